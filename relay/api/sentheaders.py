"""The headers relay sends a delivery, rebuilt for display (the dashboard, the event page)."""

from __future__ import annotations

import time
from typing import Any

from yarl import URL

from relay.delivery import sender
from relay.domain import signing
from relay.domain.destinations import kind_of

SIGNATURE_NOTE = "HMAC-SHA256 with the endpoint secret; not shown"
ED25519_NOTE = "ed25519 with the endpoint's private key; not shown"


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
    kind = kind_of(endpoint["url"]) if endpoint is not None else "http"
    if kind != "http":
        return _broker_headers(kind, delivery["event_id"], stamp, endpoint, last is not None)
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
                    "note": ED25519_NOTE if ed else SIGNATURE_NOTE,
                }
            )
        elif name in custom:
            out.append({"name": name, "value": "••••••", "note": "custom header; value hidden"})
        else:
            out.append({"name": name, "value": value, "note": notes.get(name, "")})
    return out


def _broker_headers(
    kind: str, event_id: str, stamp: int, endpoint: dict[str, Any] | None, sent: bool
) -> list[dict[str, str]]:
    """What a broker message carries beside its body (relay.delivery.destinations): the
    three Standard Webhooks values as message headers (a stream entry's fields), and
    what the kind adds (JetStream's de-duplication id, AMQP's message properties)."""
    ed = (endpoint or {}).get("signing") == "ed25519"
    where = "stream entry field" if kind == "redis" else "message header"
    out = [
        {"name": "webhook-id", "value": event_id, "note": f"{where}: the event id"},
        {
            "name": "webhook-timestamp",
            "value": str(stamp),
            "note": f"{where}: unix seconds at send time"
            + (" (estimated from the attempt log)" if sent else " (not sent yet)"),
        },
        {
            "name": "webhook-signature",
            "value": "v1a,…" if ed else "v1,…",
            "note": f"{where}: {ED25519_NOTE if ed else SIGNATURE_NOTE}",
        },
    ]
    if kind == "nats":
        out.append(
            {
                "name": "Nats-Msg-Id",
                "value": event_id,
                "note": "JetStream drops a re-send within its window",
            }
        )
    elif kind == "amqp":
        out += [
            {"name": "message_id", "value": event_id, "note": "AMQP property"},
            {"name": "content_type", "value": "application/json", "note": "AMQP property"},
            {"name": "delivery_mode", "value": "2", "note": "AMQP property: persistent"},
        ]
    return out
