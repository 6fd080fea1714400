"""Endpoint health and pacing, shared by all workers: breaker, rate limit, in-flight cap.

Each endpoint's state lives under its own hash tag (``relay:v1:{ep_X}:...``, see
:mod:`relay.queue.keys`) and changes only through ``relay/queue/lua/admit.lua`` (before
sends) and ``settle.lua`` (after them), so counts are exact across any number of
workers. Deliveries of a disabled endpoint are parked per shard with status ``held``
(``hold.lua``) and come back when it is re-enabled (``resume.lua``). This module holds
the policy (bursts, slot holds, thresholds); the Store's typed methods run the scripts.
:class:`Windows` is each worker's own share per endpoint, so one bad endpoint cannot
hold every send slot (no head-of-line blocking).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from relay.domain.schema import public_endpoint
from relay.queue.keys import ShardKeys
from relay.queue.store import Settled, Store

SLOT_MARGIN_MS = 2000

__all__ = ["SLOT_MARGIN_MS", "Health", "Settled", "Windows", "breaker_view", "burst_for"]


def burst_for(rate: float) -> int:
    """Requests allowed back to back: a tenth of a second's worth, at least one."""
    return max(1, math.floor(rate / 10))


class Windows:
    """One worker's share of its slots per endpoint: no endpoint blocks the others.

    An endpoint may hold at most its window of open requests in this worker, slow sends
    included, so the headroom that slow sends free goes to the other endpoints. A window
    starts at a quarter of the slots and grows by one per success up to all of them (slow
    start): an endpoint that hangs from its first request never fills the worker, and the
    free slots keep claiming past its backlog. Sends over the window are deferred, spread
    out; a send to an endpoint known to answer fast counts as slow early.
    """

    def __init__(self, concurrency: int, http_timeout: float, slow_send_after: float) -> None:
        self.concurrency = concurrency
        self.start = max(1, concurrency // 4)
        self.http_timeout_ms = http_timeout * 1000
        self.slow_send_after = slow_send_after
        self._window: dict[str, int] = {}
        self._tail: dict[str, float] = {}  # last deferral handed out, ms

    def window(self, endpoint_id: str) -> int:
        return self._window.get(endpoint_id, self.start)

    def room(self, endpoint_id: str, open_now: int) -> int:
        return max(0, self.window(endpoint_id) - open_now)

    def succeeded(self, endpoint_id: str) -> None:
        self._window[endpoint_id] = min(self.window(endpoint_id) + 1, self.concurrency)

    def wait_ms(self, endpoint_id: str, avg_ms: float | None, now_ms: float) -> int:
        """Wait for a send over the window: one send's worth of the window each (a few
        over it come back soon), wrapping within one HTTP timeout, by which time every
        send holding the window has ended; a deep backlog returns spread, not at once."""
        step = max(1.0, avg_ms or 100.0) / self.window(endpoint_id)
        tail = max(self._tail.get(endpoint_id, 0.0), now_ms) + step
        if tail > now_ms + self.http_timeout_ms:
            tail = now_ms + step
        self._tail[endpoint_id] = tail
        return max(1, int(tail - now_ms))

    def slow_after(self, avg_ms: float | None) -> float:
        """Seconds after which a send stops counting against the concurrency:
        slow_send_after, or ten times the endpoint's usual duration if that is sooner
        (at least 0.25 s), so an endpoint that starts hanging is noticed early."""
        if avg_ms is None:
            return self.slow_send_after
        return min(self.slow_send_after, max(0.25, avg_ms / 100))


class Health:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.settings = store.settings

    async def admit(
        self, endpoint: dict[str, Any], tokens: Sequence[str], spread_ms: int
    ) -> tuple[str, list[int]]:
        """Per token: 0 to send now, else milliseconds to wait (not charged an attempt)."""
        rate = endpoint.get("rate_limit") or 0
        got = await self.store.admit(
            endpoint["id"],
            tokens,
            rate=rate,
            burst=burst_for(rate) if rate else 1,
            max_in_flight=endpoint.get("max_in_flight") or 0,
            slot_hold_ms=int(self.settings.http_timeout * 1000) + SLOT_MARGIN_MS,
            spread_ms=max(1, spread_ms),
        )
        return got.state, got.waits

    async def settle(self, endpoint_id: str, results: Sequence[tuple[str, str]]) -> Settled:
        """``results``: (claim token, "1" success | "0" failure | "-" neutral)."""
        return await self.store.settle(
            endpoint_id,
            results,
            threshold=self.settings.breaker_threshold,
            cooldown_ms=int(self.settings.breaker_cooldown * 1000),
            cooldown_max_ms=int(self.settings.breaker_cooldown_max * 1000),
        )

    async def breakers(self, endpoint_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Breaker state of each endpoint, as the API shows it."""
        raw = await self.store.breaker_states(endpoint_ids)
        return {e: breaker_view(r) for e, r in raw.items()}

    async def endpoint_views(self, endpoints: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Endpoints as shown (no secrets), each with its shared breaker state."""
        breakers = await self.breakers([e["id"] for e in endpoints])
        return [{**public_endpoint(e), "breaker": breakers[e["id"]]} for e in endpoints]

    async def hold(self, sk: ShardKeys, endpoint_id: str, claims: Sequence[tuple[str, str]]) -> int:
        """Park claimed deliveries of a disabled endpoint (status ``held``), uncharged."""
        return await self.store.hold(sk, endpoint_id, claims)

    async def reset_failing(self, endpoint_id: str) -> None:
        """Forget the failure streak (an operator re-enabled the endpoint)."""
        await self.store.reset_failing(endpoint_id)

    async def resume(self, endpoint_id: str) -> int:
        """Move an endpoint's held deliveries back to due, on every shard."""
        return await self.store.resume(endpoint_id)


def breaker_view(raw: dict[str, str]) -> dict[str, Any]:
    def num(name: str) -> int | None:
        v = raw.get(name)
        return int(float(v)) if v not in (None, "", "0") else None

    return {
        "state": raw.get("state", "closed"),
        "consecutive_failures": int(raw.get("failures", 0)),
        "open_until": num("open_until"),
        "failing_since": num("failing_since"),
        "last_success_at": num("last_success_at"),
        "times_opened": int(raw.get("opened", 0)),
    }
