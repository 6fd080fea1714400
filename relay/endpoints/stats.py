"""An endpoint's page: its attempt counters over a window, its breaker, and why it is held.

The figures come from the per-minute counters ``settle.lua`` keeps per endpoint
(:mod:`relay.domain.endpointstats`), read in one round trip, so the page does not need
Prometheus; the breaker is the one the workers share (:mod:`relay.endpoints.health`).
"""

from __future__ import annotations

import time
from typing import Any

from relay.domain import endpointstats, signing
from relay.endpoints.health import Health
from relay.queue.store import Store


async def endpoint_stats(
    store: Store, endpoint: dict[str, Any], window: str, now_ms: int | None = None
) -> dict[str, Any]:
    """The window's figures (``endpointstats.summarize``), the breaker as the API shows
    it, whether the endpoint is enabled, and ``why``: one sentence when it is held back."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    hours = endpointstats.hours_of_window(window, now)
    counters = await store.endpoint_counters(endpoint["id"], hours)
    breaker = (await Health(store).breakers([endpoint["id"]]))[endpoint["id"]]
    return {
        "endpoint_id": endpoint["id"],
        **endpointstats.summarize(window, now, counters),
        "breaker": breaker,
        "enabled": bool(endpoint.get("enabled", True)),
        "why": why(endpoint, breaker),
    }


def why(endpoint: dict[str, Any], breaker: dict[str, Any]) -> str | None:
    """Why the endpoint's deliveries are held back, in one sentence; None when they are not."""
    if not endpoint.get("enabled", True):
        reason = endpoint.get("disabled_reason")
        return (
            f"disabled ({reason}); its deliveries are held until it is enabled"
            if reason
            else "disabled by an operator; its deliveries are held until it is enabled"
        )
    failures = breaker["consecutive_failures"]
    if breaker["state"] == "open":
        until = signing.rfc3339_ms(breaker["open_until"] or 0)
        return (
            f"the breaker is open after {failures} consecutive failures; "
            f"the next request (a probe) goes at {until}"
        )
    if breaker["state"] == "half_open":
        return f"the breaker is half-open after {failures} consecutive failures: one probe decides"
    return None
