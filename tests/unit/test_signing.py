"""Tests for relay.domain.signing against the reference standardwebhooks verifier."""

from __future__ import annotations

import base64
import time

import orjson
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from relay.domain.signing import (
    build_body,
    generate_secret,
    is_valid_secret,
    secret_bytes,
    sign,
    signed_headers,
)


def _headers(keys: list[bytes], body: bytes, extra: dict[str, str] | None = None) -> dict[str, str]:
    return signed_headers(
        secret_keys=keys,
        msg_id="evt_1",
        timestamp=int(time.time()),
        body=body,
        delivery_id="dlv_1",
        attempt=1,
        user_agent="relay/0.1",
        extra=extra,
    )


BODY = build_body("evt_1", "order.created", 1_795_000_000_123, b'{"a":1,"b":"\xc3\xa9"}')


def test_generate_secret_shape() -> None:
    s = generate_secret()
    assert s.startswith("whsec_")
    assert len(secret_bytes(s)) == 24
    assert generate_secret() != s


def test_signature_verifies() -> None:
    secret = generate_secret()
    headers = _headers([secret_bytes(secret)], BODY)
    assert Webhook(secret).verify(BODY, headers)["data"] == {"a": 1, "b": "é"}


def test_rotation_either_secret_verifies() -> None:
    old, new = generate_secret(), generate_secret()
    headers = _headers([secret_bytes(old), secret_bytes(new)], BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        Webhook(secret).verify(BODY, headers, json_parse=False)


def test_wrong_secret_rejected() -> None:
    headers = _headers([secret_bytes(generate_secret())], BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(BODY, headers)


def test_tampered_body_rejected() -> None:
    secret = generate_secret()
    headers = _headers([secret_bytes(secret)], BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY.replace(b'"a":1', b'"a":2'), headers)


def test_sign_format() -> None:
    sig = sign([b"k" * 24], "m", 1, b"x")
    version, b64 = sig.split(",")
    assert version == "v1"
    assert len(base64.b64decode(b64)) == 32
    assert sign([], "m", 1, b"x") == ""


def test_headers_set() -> None:
    h = _headers([b"k" * 24], BODY)
    assert h["content-type"] == "application/json"
    assert h["user-agent"] == "relay/0.1"
    assert h["webhook-id"] == "evt_1"
    assert h["webhook-timestamp"].isdigit()
    assert h["x-relay-delivery-id"] == "dlv_1"
    assert h["x-relay-attempt"] == "1"


def test_custom_headers_cannot_override() -> None:
    secret = generate_secret()
    extra = {
        "Webhook-Signature": "v1,forged",
        "CONTENT-TYPE": "text/plain",
        "X-Relay-Attempt": "99",
        "X-Custom": "kept",
    }
    h = _headers([secret_bytes(secret)], BODY, extra)
    assert len({k.lower() for k in h}) == len(h)  # no case-variant duplicates survive
    assert h["webhook-signature"] != "v1,forged"
    assert h["content-type"] == "application/json"
    assert h["x-relay-attempt"] == "1"
    assert h["X-Custom"] == "kept"
    Webhook(secret).verify(BODY, h)


def test_build_body_exact_and_round_trip() -> None:
    payload = b'{"z": [1, 2.5, null],  "s":"x"}'
    body = build_body('e"1', "order.created", 1_796_025_219_123, payload)
    assert body.endswith(b',"data":' + payload + b"}")  # spliced verbatim, not re-serialized
    parsed = orjson.loads(body)
    assert parsed == {
        "id": 'e"1',
        "type": "order.created",
        "timestamp": "2026-11-30T07:53:39.123Z",
        "data": orjson.loads(payload),
    }


def test_build_body_timestamp_padding() -> None:
    parsed = orjson.loads(build_body("e", "t", 5, b"null"))
    assert parsed["timestamp"] == "1970-01-01T00:00:00.005Z"
    assert parsed["data"] is None


@pytest.mark.parametrize(
    "bad",
    [
        "whsec_not*base64!",
        "whsec_" + base64.b64encode(b"x" * 23).decode(),
        "whsec_" + base64.b64encode(b"x" * 65).decode(),
        "whsec_",
        "",
    ],
)
def test_bad_secrets(bad: str) -> None:
    with pytest.raises(ValueError, match="webhook secret"):
        secret_bytes(bad)
    assert not is_valid_secret(bad)


def test_secret_bounds_and_prefix_optional() -> None:
    for n in (24, 32, 64):
        raw = base64.b64encode(b"y" * n).decode()
        assert secret_bytes("whsec_" + raw) == b"y" * n
        assert secret_bytes(raw) == b"y" * n
        assert is_valid_secret(raw)
