"""The archive mover: every worker moves finished deliveries past ``RELAY_HOT_RETENTION``
from Redis to the PostgreSQL archive (relay/archive/), in batches.

Per shard, one worker at a time: it takes the shard's archive lease (a Redis key with a
TTL), reads a batch of the oldest finished deliveries (records, attempt logs, stored
events), writes them to PostgreSQL in one transaction, and only once that committed
removes them from Redis (``archive_drop.lua``, fenced by the lease: a mover whose lease
ran out removes nothing). A worker killed anywhere in between leaves the batch in Redis;
the next mover writes it again, which leaves one row per delivery, and removes it.

PostgreSQL away or slow never touches publishing or delivery: the mover logs, counts
``relay_archive_errors`` and tries again later while finished deliveries wait in Redis
(``relay_archive_backlog``, ``relay_archive_lag_seconds``). A backlog past
``RELAY_ARCHIVE_BACKLOG_ALERT`` is reported through ``on_behind`` (the runner publishes
the operational event ``archive.behind``). The same loop drops the archive's day
partitions past ``RELAY_RETENTION`` / ``RELAY_DEAD_RETENTION`` every ``RELAY_SWEEP_INTERVAL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from relay.archive.tables import Tables
from relay.ops import metrics
from relay.queue.keys import ShardKeys
from relay.queue.store import Store

log = structlog.get_logger("relay.archive")

BEHIND_EVERY = 3600.0  # seconds between two archive.behind reports of one process


class Mover:
    def __init__(
        self,
        store: Store,
        tables: Tables,
        *,
        on_behind: Callable[[int, float], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.tables = tables
        self.settings = store.settings
        self.on_behind = on_behind
        self._reported = 0.0
        self._swept = 0.0

    async def move_shard(self, sk: ShardKeys, now_ms: int | None = None) -> int:
        """Move what is past the hot retention in one shard; returns deliveries moved
        (0 when another worker holds the shard)."""
        token = secrets.token_hex(8)
        lease_ms = int(self.settings.archive_lease * 1000)
        if not await self.store.archive_lease(sk, token, lease_ms):
            return 0
        moved, held = 0, True
        try:
            while True:
                now = int(time.time() * 1000) if now_ms is None else now_ms
                cutoff = now - int(self.settings.hot_retention * 1000)
                batch = self.settings.archive_batch
                finished = await self.store.finished_before(sk, cutoff, batch)
                more = len(finished) == batch
                got = await self._move(sk, token, finished, lease_ms if more else 0)
                if got is None:  # the lease ran out: another worker has the shard now
                    held = False
                    break
                moved += got
                if not more:
                    held = False  # released by the last drop
                    break
        finally:
            if held:  # stopped by an error: let the next mover in at once
                await asyncio.shield(self._release(sk, token))
        return moved

    async def _move(self, sk: ShardKeys, token: str, finished: list[Any], lease: int) -> int | None:
        records = await self.store.finished_records(sk, [f.id for f in finished])
        by_id = {r["id"]: r for r in records}
        events = await self.store.stored_events(sk, sorted({r["event_id"] for r in records}))
        rows = [(by_id[f.id], int(f.score)) for f in finished if f.id in by_id]
        if rows:
            await self.tables.write(sk.shard, rows, events)
        items = [(f, by_id[f.id]["updated_at"] if f.id in by_id else None) for f in finished]
        got = await self.store.archive_drop(sk, token, lease, items)
        if got is None:
            return None
        metrics.ARCHIVED.labels("delivery").inc(got[0])
        metrics.ARCHIVED.labels("event").inc(got[1])
        return got[0]

    async def _release(self, sk: ShardKeys, token: str) -> None:
        try:
            await self.store.archive_drop(sk, token, 0, [])
        except Exception as exc:  # Redis away: the lease runs out on its own
            log.warning("archive.release_failed", error=str(exc))

    async def once(self, now_ms: int | None = None) -> int:
        """One pass over every shard (shards in random order, so workers spread out)."""
        shards = self.store.keys.all_shards()
        random.shuffle(shards)
        moved = 0
        for sk in shards:
            moved += await self.move_shard(sk, now_ms)
        return moved

    async def sweep(self, now_ms: int | None = None) -> list[str]:
        """Drop the day partitions whose rows are all past their retention."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        ok, dead = int(self.settings.retention * 1000), int(self.settings.dead_retention * 1000)
        return await self.tables.drop_expired(
            {
                "deliveries_succeeded": now - ok,
                "deliveries_dead": now - dead,
                "events": now - max(ok, dead),
            }
        )

    async def check_behind(self) -> None:
        backlog, lag = await metrics.archive_behind(self.store)
        metrics.ARCHIVE_BACKLOG.set(backlog)
        metrics.ARCHIVE_LAG.set(lag)
        if backlog < self.settings.archive_backlog_alert or self.on_behind is None:
            return
        if time.monotonic() - self._reported < BEHIND_EVERY and self._reported:
            return
        self._reported = time.monotonic()
        log.warning("archive.behind", backlog=backlog, lag_seconds=lag)
        await self.on_behind(backlog, lag)

    async def _check(self) -> None:
        """``check_behind`` after every pass, the failed ones included: a PostgreSQL that
        refuses every move is when the backlog grows. It reads Redis only."""
        try:
            await self.check_behind()
        except Exception as exc:  # Redis away: the next pass checks again
            log.warning("archive.check_failed", error=str(exc))

    async def run(self, stop: asyncio.Event) -> None:
        """Move, sweep and check until ``stop``; errors wait a little and try again."""
        await self._until_migrated(stop)
        while not stop.is_set():
            moved = 0
            try:
                moved = await self.once()
                if time.monotonic() - self._swept >= self.settings.sweep_interval:
                    self._swept = time.monotonic()
                    if dropped := await self.sweep():
                        log.info("archive.partitions_dropped", partitions=dropped)
            except Exception as exc:  # PostgreSQL or Redis away: deliveries wait in Redis
                metrics.ARCHIVE_ERRORS.inc()
                log.warning("archive.move_failed", error=str(exc))
            await self._check()
            if moved == 0:
                await _pause(stop, self.settings.archive_interval * random.uniform(0.5, 1.0))

    async def _until_migrated(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.tables.migrate()
                return
            except Exception as exc:
                metrics.ARCHIVE_ERRORS.inc()
                log.warning("archive.migrate_failed", error=str(exc))
                await self._check()
                await _pause(stop, self.settings.archive_interval)


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less when ``stop`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
