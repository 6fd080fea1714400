"""The leases of sends in flight: extended while they run, handed back at shutdown.

The heartbeat extends every lease in flight every third of ``lease_seconds``, one
script call per shard. At shutdown, sends get ``shutdown_grace`` to finish; the rest
are cancelled and their claims released (``lua/release.lua``) without charging an
attempt, and their endpoint slots freed at once with a neutral settle.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from relay.delivery.groupcommit import GroupCommit, log_failed
from relay.delivery.inflight import InFlight, by_shard
from relay.delivery.stats import Stats
from relay.ops import metrics
from relay.queue.store import Store
from relay.settings import Settings

log = structlog.get_logger("relay.worker")


class Leases:
    def __init__(self, store: Store, settings: Settings, inflight: InFlight, stats: Stats) -> None:
        self.store = store
        self.settings = settings
        self.inflight = inflight
        self.stats = stats
        self.lease_ms = int(settings.lease_seconds * 1000)

    async def heartbeat(self) -> None:
        """Extend the leases of every send in flight, one script call per shard."""
        period = max(0.05, self.settings.lease_seconds / 3)
        while True:
            await asyncio.sleep(period)
            for items in by_shard(self.inflight):
                sk = items[0].sk
                started = time.monotonic()
                try:
                    res = await self.store.extend(
                        sk, [(f.claim.id, f.claim.token) for f in items], self.lease_ms
                    )
                except Exception as exc:
                    log.warning("lease.extend_failed", error=str(exc))
                    continue
                self.stats.lease_extensions += sum(res)
                metrics.LEASE_EXTENSIONS.inc(sum(res))
                for f, ok in zip(items, res, strict=True):
                    if ok:
                        f.lease_until = started + self.settings.lease_seconds
                    elif not f.recording:
                        log.warning("lease.lost", delivery_id=f.claim.id)

    async def hand_back(self, recorder: GroupCommit, settler: GroupCommit) -> None:
        """Finish sends within the grace period; hand back the rest uncharged."""
        tasks = self.inflight.tasks()
        if not tasks:
            return
        grace = self.settings.shutdown_grace
        log.info("worker.draining", in_flight=len(tasks), grace_s=grace)
        _, pending = await asyncio.wait(tasks, timeout=grace)
        unfinished = self.inflight.unfinished()
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.shield(recorder.drain())
        for items in by_shard(unfinished):
            claims = [(f.claim.id, f.claim.token) for f in items]
            try:
                res = await asyncio.shield(self.store.release(items[0].sk, claims))
                self.stats.released += sum(res)
                log.info("worker.handed_back", count=sum(res))
            except Exception as exc:
                log.warning("worker.hand_back_failed", error=str(exc), count=len(claims))
        # Their endpoint slots (max_in_flight, a half-open probe) free now, not when
        # they expire: a neutral result, no verdict on the endpoint's health.
        for f in unfinished:
            if f.endpoint is not None:
                settler.submit_then(f.endpoint["id"], (f.claim.token, "-"), log_failed)
