"""What every system sends: a ~1 KiB JSON payload, and the signed body built from it.

Imported by the bench itself and by the arq/saq baselines (which run in their own
virtualenv), so it needs nothing but orjson and ``relay.domain.signing``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from relay.domain import signing

PAYLOAD_BYTES = 1024
EVENT_TYPE = "bench.test"
# A fixed test secret, not a credential: it signs requests to our own local receiver.
SECRET = "whsec_YmVuY2htYXJrLXNlY3JldC1ub3QtYS1yZWFsLW9uZQ=="


def payload(t: float | None = None) -> dict[str, Any]:
    """A payload of ~1 KiB of JSON, carrying its publish time ``t`` (epoch seconds)."""
    t = time.time() if t is None else t
    head = len(orjson.dumps({"t": t, "pad": ""}))
    return {"t": t, "pad": "x" * (PAYLOAD_BYTES - head)}


def signed_body() -> bytes:
    """The body the limit, arq and saq send: what relay would build for one event."""
    now_ms = int(time.time() * 1000)
    return signing.build_body("evt_bench", EVENT_TYPE, now_ms, orjson.dumps(payload()))


def headers(key: list[bytes], event_id: str, body: bytes, user_agent: str) -> dict[str, str]:
    """Standard Webhooks headers for one send, signed now (as relay's sender does)."""
    return signing.signed_headers(
        secret_keys=key,
        msg_id=event_id,
        timestamp=int(time.time()),
        body=body,
        delivery_id="dlv_" + event_id,
        attempt=1,
        user_agent=user_agent,
    )
