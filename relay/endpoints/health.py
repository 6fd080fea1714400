"""Endpoint health and pacing, shared by all workers: breaker, rate limit, in-flight cap.

Each endpoint's state lives under its own hash tag (``relay:v3:{ep_X}:...``, see
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
import time
from collections.abc import Sequence
from typing import Any

from relay.domain.schema import public_endpoint
from relay.queue.keys import ShardKeys
from relay.queue.store import Settled, Store

SLOT_MARGIN_MS = 2000

__all__ = [
    "SLOT_MARGIN_MS",
    "Health",
    "Settled",
    "Windows",
    "breaker_view",
    "burst_for",
    "previous_secret_expires_at",
    "waiting_reason",
]


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
        self._queued: dict[str, tuple[float, float]] = {}  # sends waiting, as of when (ms)

    def window(self, endpoint_id: str) -> int:
        return self._window.get(endpoint_id, self.start)

    def room(self, endpoint_id: str, open_now: int) -> int:
        return max(0, self.window(endpoint_id) - open_now)

    def succeeded(self, endpoint_id: str) -> None:
        self._window[endpoint_id] = min(self.window(endpoint_id) + 1, self.concurrency)

    def wait_ms(self, endpoint_id: str, avg_ms: float | None, now_ms: float) -> int:
        """Wait for a send over the window: one send's worth of the window each (a few
        over it come back soon), wrapping within one HTTP timeout, by which time every
        send holding the window has ended; a deep backlog returns spread, not at once.
        The sends already waiting are counted as a queue that drains at today's pace, so
        an endpoint found faster than first taken no longer stacks new waits behind them."""
        step = max(1.0, avg_ms or 100.0) / self.window(endpoint_id)
        queued, then = self._queued.get(endpoint_id, (0.0, now_ms))
        queued = max(0.0, queued - (now_ms - then) / step) + 1
        if queued * step > self.http_timeout_ms:
            queued = 1.0
        self._queued[endpoint_id] = (queued, now_ms)
        return max(1, int(queued * step))

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

    async def settle(
        self, endpoint_id: str, results: Sequence[tuple[str, str] | tuple[str, str, str]]
    ) -> Settled:
        """``results``: (claim token, "1" success | "0" failure, or "0@<sent ms>" |
        "-" neutral[, what the attempt adds to the endpoint's counters])."""
        return await self.store.settle(
            endpoint_id,
            results,
            threshold=self.settings.breaker_threshold,
            cooldown_ms=int(self.settings.breaker_cooldown * 1000),
            cooldown_max_ms=int(self.settings.breaker_cooldown_max * 1000),
        )

    async def breakers(self, endpoint_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Breaker state of each endpoint, as the API shows it (the effective state: an
        open breaker whose cooldown has passed reads ``half_open``, ready to probe)."""
        raw = await self.store.breaker_states(endpoint_ids)
        now = _now_ms()
        return {e: breaker_view(r, now) for e, r in raw.items()}

    async def endpoint_views(self, endpoints: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Endpoints as shown (no secrets), each with its shared breaker state and until
        when a rotated-out secret still signs beside the current one."""
        breakers = await self.breakers([e["id"] for e in endpoints])
        return [
            {
                **public_endpoint(e),
                "breaker": breakers[e["id"]],
                "previous_secret_expires_at": previous_secret_expires_at(e),
            }
            for e in endpoints
        ]

    async def explain_waits(self, deliveries: Sequence[dict[str, Any]]) -> None:
        """Set each delivery's ``waiting``: why it is not going out now, or None.

        Derived at read time from the endpoint (enabled, limits) and its shared breaker,
        rate and in-flight state, not recorded with each deferral: deferrals stay one
        cheap write on the hot path, and the answer is the state now (a breaker that
        has closed since no longer shows as the reason)."""
        now = _now_ms()
        ids = sorted({d["endpoint_id"] for d in deliveries if d["status"] in _WAITING_STATUSES})
        endpoints = await self.store.get_endpoints(ids) if ids else {}
        states = await self.store.pacing_states(list(endpoints), now)
        for d in deliveries:
            ep = endpoints.get(d["endpoint_id"])
            d["waiting"] = waiting_reason(d, ep, states.get(d["endpoint_id"]), now)

    async def hold(self, sk: ShardKeys, endpoint_id: str, claims: Sequence[tuple[str, str]]) -> int:
        """Park claimed deliveries of a disabled endpoint (status ``held``), uncharged."""
        return await self.store.hold(sk, endpoint_id, claims)

    async def reset_failing(self, endpoint_id: str) -> None:
        """Forget the failure streak (an operator re-enabled the endpoint)."""
        await self.store.reset_failing(endpoint_id)

    async def resume(self, endpoint_id: str, *, confirm: bool = False) -> int:
        """Move an endpoint's held deliveries back to due, on every shard (``confirm``:
        a client's write, waited for by ``RELAY_ACK_REPLICAS`` replicas)."""
        return await self.store.resume(endpoint_id, confirm=confirm)


_WAITING_STATUSES = ("pending", "queued", "held")
OPEN_SLACK_MS = 60_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def previous_secret_expires_at(endpoint: dict[str, Any], now_ms: int | None = None) -> int | None:
    """When the last rotated-out secret still inside its grace stops signing (ms)."""
    now = _now_ms() if now_ms is None else now_ms
    live = [int(p["expires_at"]) for p in endpoint.get("previous_secrets", ())]
    live = [t for t in live if t > now]
    return max(live) if live else None


def waiting_reason(
    delivery: dict[str, Any],
    endpoint: dict[str, Any] | None,
    state: tuple[dict[str, str], int, int] | None,
    now_ms: int,
) -> dict[str, Any] | None:
    """Why ``delivery`` is not being sent now: ``{"reason", "until"}`` (``until`` in ms,
    None when it waits for an operator), or None when it is due, in flight or done.

    Reasons: ``endpoint_disabled`` (held), ``endpoint_deleted``, ``breaker_open`` (until
    the breaker lets a probe through), ``breaker_probing`` (one probe is out or about to
    go; the rest follow its answer), ``in_flight_cap`` (``max_in_flight`` reached),
    ``rate_limited`` (``rate_limit`` used up), ``ordering_lane`` (queued behind the
    delivery before it in its ordered lane), ``retry_backoff`` (its last attempt
    failed; the next is on the retry schedule), ``scheduled`` (a Retry-After or a
    deferral whose cause has passed: it goes at ``until``), ``deliver_at`` (published
    for later: status ``scheduled`` until ``until``)."""
    status = delivery["status"]
    if status == "scheduled":
        return {"reason": "deliver_at", "until": delivery.get("next_attempt_at")}
    if status == "held":
        return {"reason": "endpoint_disabled", "until": None}
    if status == "queued":  # behind its lane's head; goes when the head finishes
        return {"reason": "ordering_lane", "until": None}
    if status != "pending":
        return None
    if endpoint is None:
        return {"reason": "endpoint_deleted", "until": None}
    if not endpoint.get("enabled", True):
        return {"reason": "endpoint_disabled", "until": None}
    due = delivery.get("next_attempt_at")
    raw, tat, in_flight = state or ({}, 0, 0)
    breaker = breaker_view(raw, now_ms)
    reopen = breaker["open_until"] or 0
    # open, and it would go at the reopen time (deferrals land just after it); a
    # retry due well after the breaker reopens waits for its schedule instead
    if breaker["state"] == "open" and (due is None or due < reopen + OPEN_SLACK_MS):
        return {"reason": "breaker_open", "until": reopen}
    if due is None or due <= now_ms:
        return None
    if breaker["state"] == "half_open":
        return {"reason": "breaker_probing", "until": due}
    cap = endpoint.get("max_in_flight") or 0
    if cap and in_flight >= cap:
        return {"reason": "in_flight_cap", "until": due}
    if endpoint.get("rate_limit") and tat > now_ms:
        return {"reason": "rate_limited", "until": due}
    if delivery.get("attempts") and (
        delivery.get("last_status_code") or delivery.get("last_error")
    ):
        return {"reason": "retry_backoff", "until": due}
    return {"reason": "scheduled", "until": due}


def breaker_view(raw: dict[str, str], now_ms: int | None = None) -> dict[str, Any]:
    """The breaker as shown. With ``now_ms``, the effective state: ``open`` past its
    ``open_until`` is ``half_open`` (the next send is the probe)."""

    def num(name: str) -> int | None:
        v = raw.get(name)
        return int(float(v)) if v not in (None, "", "0") else None

    state = raw.get("state", "closed")
    if state == "open" and now_ms is not None and (num("open_until") or 0) <= now_ms:
        state = "half_open"
    return {
        "state": state,
        "consecutive_failures": int(raw.get("failures", 0)),
        "open_until": num("open_until"),
        "failing_since": num("failing_since"),
        "last_success_at": num("last_success_at"),
        "times_opened": int(raw.get("opened", 0)),
    }
