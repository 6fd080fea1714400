"""Operational events: what relay publishes about itself into the ops app (pure).

An ops outbox entry (written by a Lua script, see :mod:`relay.queue.opsbox`) becomes an
event of one of :data:`TYPES`. Payloads are small and hold ids, the endpoint's app,
times (ms since the epoch), reasons and counts: never a URL, header or secret.
"""

from __future__ import annotations

from typing import Any

TYPES = (
    "endpoint.disabled",
    "endpoint.enabled",
    "endpoint.failing",
    "endpoint.recovered",
    "delivery.dead",
    "archive.behind",
)

# The fields each type carries besides ops_id, endpoint_id, app and at.
_FIELDS: dict[str, tuple[str, ...]] = {
    "endpoint.disabled": ("reason",),
    "endpoint.enabled": (),
    "endpoint.failing": ("failures", "open_until"),
    "endpoint.recovered": ("opened_at",),
    "delivery.dead": ("count", "first_id", "first_at", "last_id", "last_at", "window_start"),
    "archive.behind": ("backlog", "lag_seconds", "threshold"),
}


def payload_of(entry: dict[str, Any], endpoint: dict[str, Any] | None) -> dict[str, Any]:
    """The payload published for one outbox entry. ``app`` is the endpoint's app as the
    entry recorded it, else as the endpoint has it now (None: the endpoint is gone)."""
    app = entry.get("app") or (endpoint or {}).get("app")
    out: dict[str, Any] = {
        "ops_id": entry["id"],
        "endpoint_id": entry.get("endpoint_id"),
        "app": app,
        "at": entry.get("at"),
    }
    for name in _FIELDS[entry["type"]]:
        out[name] = entry.get(name)
    return out


def idempotency_key(entry: dict[str, Any]) -> str:
    """The publish of an entry is keyed on its id: publishing it again (a relay died
    between the publish and the removal, or two relays took it) is the same event."""
    return f"relay-ops:{entry['id']}"
