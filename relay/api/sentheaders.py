"""The headers relay sends a delivery, rebuilt for display (the dashboard, the event page)."""

from __future__ import annotations

import time
from typing import Any

from yarl import URL

from relay.delivery import sender
from relay.domain import signing


def sent_headers(
    delivery: dict[str, Any], endpoint: dict[str, Any] | None, body_len: int | None
) -> list[dict[str, str]]:
    """The headers of the latest request, rebuilt with the sender's own header function.

    The signature is never shown; custom header values are hidden because operators
    put credentials for the receiver there.
    """
    log = [e for e in delivery.get("attempt_log", []) if not e.get("fenced")]
    last = log[-1] if log else None
    attempt = int(last.get("attempt") or delivery["attempts"] or 1) if last else 1
    custom = (endpoint or {}).get("headers") or {}
    stamp = int((last["at"] - (last.get("duration_ms") or 0)) / 1000) if last else int(time.time())
    built = signing.signed_headers(
        secret_keys=[],
        msg_id=delivery["event_id"],
        timestamp=stamp,
        body=b"",
        delivery_id=delivery["id"],
        attempt=attempt,
        user_agent=sender.USER_AGENT,
        extra=custom,
    )
    notes = {
        "webhook-id": "the event id: the same on every retry, the receiver's dedupe key",
        "webhook-timestamp": "unix seconds at send time (estimated from the attempt log)"
        if last
        else "unix seconds at send time (not sent yet)",
        "x-relay-attempt": "attempt number of this request",
    }
    out: list[dict[str, str]] = []
    if endpoint is not None:
        url = URL(endpoint["url"])
        host = url.raw_host or ""
        out.append(
            {"name": "host", "value": host if url.is_default_port() else f"{host}:{url.port}"}
        )
    out.append({"name": "accept", "value": "*/*"})
    out.append({"name": "accept-encoding", "value": "gzip, deflate"})
    if body_len is not None:
        out.append({"name": "content-length", "value": str(body_len)})
    for name, value in built.items():
        if name == "webhook-signature":
            ed = (endpoint or {}).get("signing") == "ed25519"
            out.append(
                {
                    "name": name,
                    "value": "v1a,…" if ed else "v1,…",
                    "note": "ed25519 with the endpoint's private key; not shown"
                    if ed
                    else "HMAC-SHA256 with the endpoint secret; not shown",
                }
            )
        elif name in custom:
            out.append({"name": name, "value": "••••••", "note": "custom header; value hidden"})
        else:
            out.append({"name": name, "value": value, "note": notes.get(name, "")})
    return out
