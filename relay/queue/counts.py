"""Counts: deliveries by status, queue depths, blocked lanes, kept dead and succeeded.

One pipeline (or one ``ZCOUNT`` per shard) per call; never a scan. Key names come from
:mod:`relay.queue.keys`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relay.queue.base import StoreBase
from relay.queue.keys import ShardKeys
from relay.queue.records import STATUSES


class Counts(StoreBase):
    async def stats(self) -> dict[str, Any]:
        """Counts by status, queue depth and the oldest due age, one pipeline per shard.
        ``queue.scheduled``: every due entry with a later score (retries waiting and
        deliveries published for later alike)."""
        counts = dict.fromkeys(STATUSES, 0)
        due_now = 0
        oldest: int | None = None
        reclaimed = blocked = 0
        now_ms = await self.now_ms()  # one TIME, outside the pipelines
        for sk in self.keys.all_shards():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zcard(sk.due)
                pipe.zcard(sk.held_index)
                pipe.zcard(sk.processing)
                pipe.zcard(sk.succeeded)
                pipe.zcard(sk.dead)
                pipe.zcount(sk.due, "-inf", now_ms)
                pipe.zrange(sk.due, 0, 0, withscores=True)
                pipe.hget(sk.stats, "reclaimed")
                pipe.zcard(sk.queued)
                pipe.zcard(sk.blocked)
                pipe.zcount(sk.scheduled, f"({now_ms}", "+inf")
                res = await pipe.execute()
            due, held, proc, ok, dead, now_due, head, rec, queued, stop, later = res
            counts["scheduled"] += later  # in due too, at their deliver_at
            counts["pending"] += max(0, due - later)
            counts["held"] += held
            counts["delivering"] += proc
            counts["succeeded"] += ok
            counts["dead"] += dead
            counts["queued"] += queued
            blocked += stop
            due_now += now_due
            reclaimed += int(rec or 0)
            if now_due:  # the head is due: it is the oldest due delivery of this shard
                score = int(head[0][1])
                oldest = score if oldest is None else min(oldest, score)
        return {
            "counts": counts,
            "queue": {
                "due": due_now,
                "scheduled": counts["pending"] + counts["scheduled"] - due_now,
                "processing": counts["delivering"],
                "oldest_due_age_seconds": 0.0
                if oldest is None
                else round((now_ms - oldest) / 1000, 3),
            },
            "reclaimed_total": reclaimed,
            "blocked_lanes": blocked,
            "shards": self.settings.shards,
        }

    async def blocked_lanes(self, sk: ShardKeys, limit: int = 1000) -> list[tuple[str, str]]:
        """A shard's blocked lanes, oldest first: ``(lane, id of the dead head)``."""
        lanes = await self.redis.zrange(sk.blocked, 0, limit - 1)
        if not lanes:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for lane in lanes:
                pipe.lindex(sk.lane(lane), 0)
            heads = await pipe.execute()
        return [(lane, head) for lane, head in zip(lanes, heads, strict=True) if head]

    async def count_dead(self, since_ms: int | None = None) -> int:
        """Dead deliveries kept (that died at or after ``since_ms``), over every shard."""
        low: int | str = since_ms if since_ms else "-inf"
        return await self._count_scored(lambda sk: sk.dead, low, "+inf")

    async def count_succeeded(self, before_ms: int) -> int:
        """Succeeded deliveries kept that finished at or before ``before_ms`` (inclusive,
        like the cutoff of :meth:`expire_shard`), over every shard."""
        return await self._count_scored(lambda sk: sk.succeeded, "-inf", before_ms)

    async def _count_scored(
        self, index: Callable[[ShardKeys], str], low: int | str, high: int | str
    ) -> int:
        """``ZCOUNT`` of one finished-state index over every shard, in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for sk in self.keys.all_shards():
                pipe.zcount(index(sk), low, high)
            counts = await pipe.execute()
        return sum(int(c) for c in counts)
