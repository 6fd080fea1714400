"""Admission of a claimed batch: which sends go now, which wait, which are held.

Per endpoint in the batch: a deleted endpoint's deliveries go straight to be recorded
dead (no request); a disabled endpoint's are held (:meth:`Lifecycle.hold`); the rest
first meet this worker's window for the endpoint (:class:`Windows`: no head-of-line
blocking; sends over it wait, spread by how long the endpoint's sends take, or, before
its first answer here, by how long its oldest open request has been waiting, so a first
burst to a fast endpoint comes back in milliseconds and one that hangs waits longer at
each deferral), then the endpoint's shared breaker, rate limit and in-flight cap
(``Health.admit``, one script call per endpoint). Sends that may not go now are
deferred, not charged: back to due after a wait, through the outcome recorder. When
the shared admission itself fails (Redis unavailable, a script error), the sends are
deferred too: the caps fail closed, never open (a limit that cannot be checked is not
exceeded).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from relay.delivery.groupcommit import GroupCommit, log_failed
from relay.delivery.inflight import InFlight
from relay.delivery.stats import Stats
from relay.endpoints.health import Health, Windows
from relay.endpoints.lifecycle import Lifecycle
from relay.queue.keys import ShardKeys
from relay.queue.store import Claimed, Outcome

log = structlog.get_logger("relay.worker")

ADMIT_FAILED_WAIT_MS = 1000  # admission could not be asked: try these again after this
UNANSWERED_MIN_MS = 10.0  # the least a send to an endpoint yet to answer is taken to take

Spawn = Callable[[ShardKeys, Claimed, dict[str, Any] | None], None]


class Admission:
    def __init__(
        self,
        *,
        health: Health,
        lifecycle: Lifecycle,
        windows: Windows,
        inflight: InFlight,
        avg_ms: Mapping[str, float],
        recorder: GroupCommit,
        stats: Stats,
        spawn: Spawn,
    ) -> None:
        self.health = health
        self.lifecycle = lifecycle
        self.windows = windows
        self.inflight = inflight
        self.avg_ms = avg_ms  # send duration per endpoint (the Attempter's measurements)
        self.recorder = recorder
        self.stats = stats
        self.spawn = spawn  # start one send (endpoint None: record it dead, no request)

    async def admit_batch(
        self, sk: ShardKeys, claims: list[Claimed], endpoints: Mapping[str, dict[str, Any]]
    ) -> None:
        groups: dict[str, list[Claimed]] = {}
        held: dict[str, list[Claimed]] = {}
        for c in claims:
            ep = endpoints.get(c.endpoint_id)
            if ep is None:
                self.spawn(sk, c, None)  # deleted endpoint: recorded dead, no request
            elif not ep.get("enabled", True):
                held.setdefault(c.endpoint_id, []).append(c)
            else:
                groups.setdefault(c.endpoint_id, []).append(c)
        await asyncio.gather(
            *(self.hold(sk, e, cs) for e, cs in held.items()),
            *(self.admit(sk, endpoints[e], cs) for e, cs in groups.items()),
        )

    async def admit(self, sk: ShardKeys, endpoint: dict[str, Any], cs: list[Claimed]) -> None:
        """Ask the endpoint's shared breaker/limits which sends may go; defer the rest."""
        e = endpoint["id"]
        spread = int(self.avg_ms.get(e, 100.0))
        # No head-of-line blocking: past its window here, an endpoint's sends are deferred
        room = self.windows.room(e, self.inflight.open_to(e))
        cs, over = cs[:room], cs[room:]
        now = time.time() * 1000
        took = self.avg_ms.get(e)
        if took is None and over:  # not answered here yet: as long as it has kept us waiting
            took = max(UNANSWERED_MIN_MS, self.inflight.oldest_open_ms(e, time.monotonic()))
        waits = [self.windows.wait_ms(e, took, now) for _ in over]
        if cs:
            try:
                _, shared = await self.health.admit(endpoint, [c.token for c in cs], spread)
            except Exception as exc:  # fail closed: defer (not charged), do not send
                log.warning("admit.failed", endpoint_id=e, error=str(exc) or type(exc).__name__)
                shared = [ADMIT_FAILED_WAIT_MS + i * spread for i in range(len(cs))]
            waits = shared + waits
        for c, wait in zip(cs + over, waits, strict=True):
            if wait == 0:
                self.spawn(sk, c, endpoint)
            else:  # not sent, so not charged: back to due after the wait
                self.stats.deferred += 1
                deferred = Outcome(c.id, c.token, "defer", wait, None, "", b"{}")
                self.recorder.submit_then(sk, deferred, log_failed)

    async def hold(self, sk: ShardKeys, endpoint_id: str, cs: list[Claimed]) -> None:
        """Park deliveries of a disabled endpoint until it is enabled again."""
        try:
            self.stats.held += await self.lifecycle.hold(
                sk, endpoint_id, [(c.id, c.token) for c in cs]
            )
        except Exception as exc:  # the leases run out and they come back
            log.warning("hold.failed", endpoint_id=endpoint_id, error=str(exc))
