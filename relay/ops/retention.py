"""Retention: finished deliveries and their events expire, with every index entry.

* a succeeded delivery: ``RELAY_RETENTION`` after it succeeded
  (``relay/queue/lua/expire.lua`` through :meth:`Store.expire_shard`, run by every
  worker's sweeper and by ``relay purge``);
* a dead delivery: ``RELAY_DEAD_RETENTION`` after it died (the same script);
* an event: with its last delivery (its hash counts them in ``live``); an event with no
  delivery at all carries a TTL of ``RELAY_RETENTION`` and is not indexed;
* an idempotency key: ``RELAY_IDEMPOTENCY_TTL`` after it was set (Redis expires it).

Removing a delivery deletes its hash and attempt log and takes its id out of the
``succeeded``/``dead``, ``deliveries`` and ``ep:<endpoint>`` sets; the event hash and
its ``events`` entry go with the event's last delivery. Pending, held and in-flight
deliveries are never expired. Every worker runs :meth:`Retention.run`; the script is
atomic and takes each id with ``ZREM``, so any number of sweepers may run at once, and
each call is bounded (``BATCH`` deliveries), so a large backlog never blocks Redis for long.
Cutoffs are measured on the sweeping process's clock.

Ordered lanes: a delivery queued in a lane is never expired; a dead head blocking its
lane expires with ``RELAY_DEAD_RETENTION`` and the lane goes on (``expire.lua``); a lane
of a deleted endpoint blocked by its dead head is unblocked by the next sweep
(:meth:`Retention.unblock_deleted`), so its queued deliveries go on to be recorded dead.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from relay.ops import metrics
from relay.queue.keys import ShardKeys
from relay.queue.store import Store

log = structlog.get_logger("relay.retention")

BATCH = 200  # deliveries removed per script call at most (a few ms of Redis time)
NONE = -1  # "this status is not swept in this call"


@dataclass
class Expired:
    deliveries: int = 0
    events: int = 0

    def add(self, other: Expired) -> None:
        self.deliveries += other.deliveries
        self.events += other.events


class Retention:
    """Expiry of finished deliveries for one store (its prefix and shards)."""

    def __init__(self, store: Store, *, batch: int = BATCH) -> None:
        self.store = store
        self.settings = store.settings
        self.batch = batch

    async def expire_shard(
        self, sk: ShardKeys, *, succeeded_before: int, dead_before: int, limit: int | None = None
    ) -> tuple[Expired, bool]:
        """One bounded script call; returns what it removed and whether more is left."""
        got = await self.store.expire_shard(
            sk,
            succeeded_before=succeeded_before,
            dead_before=dead_before,
            limit=limit or self.batch,
        )
        return Expired(got.deliveries, got.events), got.more

    async def expire(
        self,
        *,
        succeeded_before: int = NONE,
        dead_before: int = NONE,
        progress: Callable[[Expired], None] | None = None,
    ) -> Expired:
        """Remove everything finished at or before the cutoffs (ms), shard by shard."""
        total = Expired()
        for sk in self.store.keys.all_shards():
            more = True
            while more:
                got, more = await self.expire_shard(
                    sk, succeeded_before=succeeded_before, dead_before=dead_before
                )
                total.add(got)
                metrics.EXPIRED.labels("delivery").inc(got.deliveries)
                metrics.EXPIRED.labels("event").inc(got.events)
                if progress is not None:
                    progress(got)
                await asyncio.sleep(0)  # let the rest of the process run between calls
        return total

    async def sweep(self, now_ms: int | None = None) -> Expired:
        """Expire by the configured retentions."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return await self.expire(
            succeeded_before=now - int(self.settings.retention * 1000),
            dead_before=now - int(self.settings.dead_retention * 1000),
        )

    async def unblock_deleted(self) -> int:
        """Discard the dead heads that block lanes of deleted endpoints: an
        endpoint deleted while its head was in flight, or while its lane was blocked,
        would otherwise keep the rest of the lane queued forever. Blocked lanes are few
        (each waits for an operator), so this reads them all, once per sweep."""
        heads: list[tuple[str, str]] = []
        for sk in self.store.keys.all_shards():
            heads += await self.store.blocked_lanes(sk)
        if not heads:
            return 0
        known = await self.store.get_endpoints(lane.split(":", 1)[0] for lane, _ in heads)
        gone = [head for lane, head in heads if lane.split(":", 1)[0] not in known]
        if not gone:
            return 0
        done = await self.store.discard(gone)
        return sum(1 for v in done.values() if v == "ok")

    async def run(self) -> None:
        """Sweep every ``sweep_interval`` (jittered, so replicas spread out) until cancelled."""
        interval = self.settings.sweep_interval
        while True:
            await asyncio.sleep(interval * random.uniform(0.5, 1.0))
            try:
                done = await self.sweep()
                if unblocked := await self.unblock_deleted():
                    log.info("retention.unblocked_deleted", lanes=unblocked)
            except Exception as exc:  # Redis away: try again next time
                log.warning("retention.sweep_failed", error=str(exc))
                continue
            if done.deliveries or done.events:
                log.info("retention.swept", deliveries=done.deliveries, events=done.events)
