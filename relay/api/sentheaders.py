"""The headers relay sends a delivery, rebuilt for display (the dashboard, the event page)."""

from __future__ import annotations

import time
from typing import Any

from yarl import URL

from relay.delivery import sender
from relay.domain import signing
from relay.domain.destinations import kind_of


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
    if endpoint is not None and kind != "http":
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
        "webhook-timestamp": _stamp_note(last is not None),
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
            out.append(_signature(endpoint))
        elif name in custom:
            out.append({"name": name, "value": "••••••", "note": "custom header; value hidden"})
        else:
            out.append({"name": name, "value": value, "note": notes.get(name, "")})
    return out


def _stamp_note(sent: bool) -> str:
    return "unix seconds at send time " + (
        "(estimated from the attempt log)" if sent else "(not sent yet)"
    )


def _signature(endpoint: dict[str, Any] | None, where: str = "") -> dict[str, str]:
    """The signature's row: its scheme's prefix only, never the value."""
    ed = (endpoint or {}).get("signing") == "ed25519"
    note = (
        "ed25519 with the endpoint's private key; not shown"
        if ed
        else "HMAC-SHA256 with the endpoint secret; not shown"
    )
    value = "v1a,…" if ed else "v1,…"
    return {"name": "webhook-signature", "value": value, "note": where + note}


def _broker_headers(
    kind: str, event_id: str, stamp: int, endpoint: dict[str, Any], sent: bool
) -> list[dict[str, str]]:
    """What a broker message carries beside its body (relay.delivery.destinations): the
    three Standard Webhooks values as message headers (a stream entry's fields), and
    what the kind adds (JetStream's de-duplication id, AMQP's message properties)."""
    where = ("stream entry field" if kind == "redis" else "message header") + ": "
    out = [
        {"name": "webhook-id", "value": event_id, "note": f"{where}the event id"},
        {"name": "webhook-timestamp", "value": str(stamp), "note": where + _stamp_note(sent)},
        _signature(endpoint, where),
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
