"""Standard Webhooks signing (https://www.standardwebhooks.com/).

Pure helpers: secret generation/decoding, the ``webhook-signature`` value,
the outgoing header set and the exact JSON body bytes that get signed.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import orjson

SECRET_PREFIX = "whsec_"
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64


def generate_secret() -> str:
    """Return a new secret: ``whsec_`` + base64 of 24 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(MIN_SECRET_BYTES)).decode("ascii")


@functools.lru_cache(maxsize=4096)
def secret_bytes(secret: str) -> bytes:
    """Decode a ``whsec_``-prefixed (or bare) base64 secret into its key bytes.

    Raises ValueError if it is not valid base64 or is not 24..64 bytes long.
    """
    raw = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("webhook secret is not valid base64") from exc
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise ValueError(
            f"webhook secret must decode to {MIN_SECRET_BYTES}..{MAX_SECRET_BYTES} bytes,"
            f" got {len(key)}"
        )
    return key


def is_valid_secret(secret: str) -> bool:
    """Return True if ``secret_bytes`` would accept ``secret``."""
    try:
        secret_bytes(secret)
    except ValueError:
        return False
    return True


def sign(secret_keys: Sequence[bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    """Return the ``webhook-signature`` header value: one ``v1,<b64>`` per key, space-joined."""
    prefix = f"{msg_id}.{timestamp}.".encode()
    sigs = []
    for key in secret_keys:
        mac = hmac.new(key, digestmod=hashlib.sha256)
        mac.update(prefix)
        mac.update(body)
        sigs.append("v1," + base64.b64encode(mac.digest()).decode("ascii"))
    return " ".join(sigs)


def signed_headers(
    *,
    secret_keys: Sequence[bytes],
    msg_id: str,
    timestamp: int,
    body: bytes,
    delivery_id: str,
    attempt: int,
    user_agent: str,
    extra: Mapping[str, str] | None = None,
    signature: str | None = None,
) -> dict[str, str]:
    """Return the outgoing request headers.

    ``extra`` (custom endpoint headers) is applied first; any custom header whose
    name matches one of relay's own headers (case-insensitively) is dropped.
    ``signature``: a ``webhook-signature`` value made elsewhere (``v1a``, ed25519),
    used instead of the HMAC of ``secret_keys``.
    """
    own = {
        "content-type": "application/json",
        "user-agent": user_agent,
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(timestamp)),
        "webhook-signature": signature
        if signature is not None
        else sign(secret_keys, msg_id, timestamp, body),
        "x-relay-delivery-id": delivery_id,
        "x-relay-attempt": str(attempt),
    }
    if not extra:
        return own
    headers = {k: v for k, v in extra.items() if k.lower() not in own}
    headers.update(own)
    return headers


def rfc3339_ms(created_at_ms: int) -> str:
    """Format epoch milliseconds as RFC 3339 UTC with milliseconds, e.g. ``...T07:53:39.123Z``."""
    secs, ms = divmod(created_at_ms, 1000)
    return _second(secs) + f".{ms:03d}Z"


@functools.lru_cache(maxsize=64)
def _second(secs: int) -> str:
    # strftime on every publish showed in profiles; a burst shares a handful of seconds
    return datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def build_body(event_id: str, event_type: str, created_at_ms: int, payload_json: bytes) -> bytes:
    """Return the exact body bytes; ``payload_json`` is spliced in verbatim as ``data``."""
    return body_head(event_id, event_type, created_at_ms) + payload_json + b"}"


def body_head(event_id: str, event_type: str, created_at_ms: int) -> bytes:
    """What a body holds before its payload: ``{"id":...,"type":...,"timestamp":...,"data":``
    (the body is this, the payload verbatim, then ``}``)."""
    return b"".join(
        (
            b'{"id":',
            orjson.dumps(event_id),
            b',"type":',
            orjson.dumps(event_type),
            b',"timestamp":',
            orjson.dumps(rfc3339_ms(created_at_ms)),
            b',"data":',
        )
    )
