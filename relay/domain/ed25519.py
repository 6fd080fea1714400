"""Standard Webhooks asymmetric signatures, ``v1a`` (ed25519). Pure: no I/O.

An endpoint with ``signing: ed25519`` keeps its private key in its record as
``whsk_<base64 of the 32-byte seed>`` (a 64-byte libsodium secret key, seed then public
key, is read too). relay never shows it: answers carry the public key,
``whpk_<base64 of the 32 raw bytes>``, which is all a receiver needs. The signed content
is the same as for ``v1``: ``{webhook-id}.{webhook-timestamp}.{body}``; the header value
is ``v1a,<base64 signature>``, one per key still signing, space-separated.
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

PRIVATE_PREFIX = "whsk_"
PUBLIC_PREFIX = "whpk_"
SEED_BYTES = 32


def generate_key() -> str:
    """A new private key: ``whsk_`` + base64 of a fresh 32-byte ed25519 seed."""
    seed = Ed25519PrivateKey.generate().private_bytes_raw()
    return PRIVATE_PREFIX + base64.b64encode(seed).decode("ascii")


@functools.lru_cache(maxsize=4096)
def private_key(secret: str) -> Ed25519PrivateKey:
    """The key of a ``whsk_`` value (decoded once per process: signing is on the hot path).

    Raises ValueError when it is not ``whsk_`` + base64 of 32 (or 64) bytes."""
    if not secret.startswith(PRIVATE_PREFIX):
        raise ValueError("an ed25519 key starts with whsk_")
    raw = secret.removeprefix(PRIVATE_PREFIX)
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("ed25519 key is not valid base64") from exc
    if len(key) not in (SEED_BYTES, 2 * SEED_BYTES):
        raise ValueError(f"ed25519 key must decode to 32 or 64 bytes, got {len(key)}")
    return Ed25519PrivateKey.from_private_bytes(key[:SEED_BYTES])


def is_valid_key(secret: str) -> bool:
    """True if :func:`private_key` would accept ``secret``."""
    try:
        private_key(secret)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def public_key(secret: str) -> str:
    """The ``whpk_`` public key of a ``whsk_`` private key (what receivers verify with)."""
    raw = private_key(secret).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return PUBLIC_PREFIX + base64.b64encode(raw).decode("ascii")


def sign(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one ``v1a,<b64>`` per ``whsk_`` key, space-joined."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1a," + base64.b64encode(private_key(s).sign(content)).decode("ascii") for s in secrets
    )


def verifying_key(public_key: str) -> Ed25519PublicKey:
    """The key of a ``whpk_`` value; ValueError when it is not base64 of 32 bytes."""
    try:
        raw = base64.b64decode(public_key.removeprefix(PUBLIC_PREFIX), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("ed25519 public key is not valid base64") from exc
    if len(raw) != SEED_BYTES:
        raise ValueError(f"ed25519 public key must decode to 32 bytes, got {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def verify(public_key: str, msg_id: str, timestamp: str, body: bytes, header: str) -> bool:
    """True if one ``v1a`` signature of ``header`` is ``public_key``'s over the content
    (the demo receiver's check; the receiving guide has a stand-alone one)."""
    try:
        key = verifying_key(public_key)
    except ValueError:
        return False
    content = f"{msg_id}.{timestamp}.".encode() + body
    for part in header.split():
        version, _, sig = part.partition(",")
        if version != "v1a":
            continue
        try:
            key.verify(base64.b64decode(sig, validate=True), content)
            return True
        except (InvalidSignature, ValueError):
            continue
    return False
