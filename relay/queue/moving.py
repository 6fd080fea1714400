"""What the archive mover (relay/archive/mover.py) reads and removes in Redis.

Finished deliveries past the hot retention are read whole (record, attempt log, the
stored event), handed to PostgreSQL, and only then removed by ``archive_drop.lua``,
fenced by the shard's archive lease (``ShardKeys.archiving``) so one worker at a time
moves a shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from relay.domain import eventrecord
from relay.queue.keys import ShardKeys
from relay.queue.reads import Reads

# The fields of an archived record that go back into a delivery's hash; the others come
# from its id, its event's header or its indexes (relay/queue/records.py).
RESTORED = frozenset(
    {
        "status", "attempts", "updated_at", "log_n", "endpoint_id", "last_status_code",
        "last_error", "last_attempt_at", "finished_at", "replays", "replayed_at",
        "discarded_at", "worker", "lane", "blocking", "app", "type",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Finished:
    """A finished delivery as its index holds it: id, ``succeeded`` or ``dead``, score."""

    id: str
    status: str
    score: float


class ArchiveMoves(Reads):
    async def archive_lease(self, sk: ShardKeys, token: str, ms: int) -> bool:
        """Take the shard's archive lease for ``ms`` when nobody holds it."""
        return bool(await self.redis.set(sk.archiving, token, nx=True, px=ms))

    async def finished_before(self, sk: ShardKeys, cutoff_ms: int, limit: int) -> list[Finished]:
        """Up to ``limit`` succeeded and dead deliveries finished at or before ``cutoff_ms``,
        oldest first in each index."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for index in (sk.succeeded, sk.dead):
                pipe.zrangebyscore(index, "-inf", cutoff_ms, start=0, num=limit, withscores=True)
            ok, dead = await pipe.execute()
        out = [Finished(m, "succeeded", s) for m, s in ok]
        out += [Finished(m, "dead", s) for m, s in dead]
        return out[:limit]

    async def finished_records(self, sk: ShardKeys, delivery_ids: Sequence[str]) -> list[dict]:
        """The deliveries as :meth:`get_delivery` shows them, attempt logs included."""
        return await self._rows(sk, delivery_ids, with_log=True) if delivery_ids else []

    async def stored_events(self, sk: ShardKeys, event_ids: Sequence[str]) -> dict[str, bytes]:
        """The stored form of each event that exists (relay/domain/eventrecord.py), as bytes."""
        if not event_ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for e in event_ids:
                pipe.get(sk.event(e))
            got = await pipe.execute()
        return {e: eventrecord.raw(v) for e, v in zip(event_ids, got, strict=True) if v is not None}

    async def archive_drop(
        self, sk: ShardKeys, token: str, lease_ms: int, items: Sequence[tuple[Finished, Any]]
    ) -> tuple[int, int] | None:
        """Remove what the archive committed: ``items`` of ``(finished, updated_at)``;
        ``lease_ms`` extends the lease (0 releases it). ``(deliveries, events)`` removed,
        or None when the lease is no longer this mover's."""
        args: list[Any] = [
            sk.delivery_prefix,
            sk.log_prefix,
            sk.event_prefix,
            sk.endpoint_index_prefix,
            sk.lane_prefix,
            sk.wake,
            token,
            lease_ms,
            len(items),
        ]
        for f, updated in items:
            args += [f.id, f.status, repr(f.score), "" if updated is None else updated]
        res = await self.scripts.archive_drop(
            keys=[sk.succeeded, sk.dead, sk.events, sk.due, sk.queued, sk.blocked, sk.archiving],
            args=args,
        )
        return None if int(res[0]) < 0 else (int(res[0]), int(res[1]))

    async def archive_restore(
        self, record: dict[str, Any], finished_at: int, stored_event: bytes | None
    ) -> bool:
        """Put an archived delivery back into Redis as it was when it finished (its event
        too, when Redis has none), for a replay; False when Redis holds it already."""
        sk = self.shard_keys_for(record["id"])
        if sk is None:
            return False
        fields: list[Any] = []
        for name, value in record.items():
            if name in RESTORED and value is not None and value is not False:
                fields += [name, "1" if value is True else value]
        log = [orjson.dumps(e) for e in record.get("attempt_log", [])]
        index = sk.dead if record["status"] == "dead" else sk.succeeded
        args: list[Any] = [
            record["id"],
            record["event_id"],
            record["created_at"],
            finished_at,
            stored_event or "",
            len(fields) // 2,
            *fields,
            len(log),
            *log,
        ]
        keys = [sk.delivery(record["id"]), sk.log(record["id"]), sk.event(record["event_id"])]
        keys += [sk.events, index, sk.endpoint_index(record["endpoint_id"]), sk.due]
        return bool(await self.scripts.archive_restore(keys=keys, args=args))

    async def finished_waiting(self, cutoff_ms: int) -> tuple[int, int | None]:
        """Finished deliveries past ``cutoff_ms`` still in Redis over every shard, and the
        finish time (ms) of the oldest of them (None: none waits)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for sk in self.keys.all_shards():
                for index in (sk.succeeded, sk.dead):
                    pipe.zcount(index, "-inf", cutoff_ms)
                    pipe.zrange(index, 0, 0, withscores=True)
            res = await pipe.execute()
        count = sum(int(c) for c in res[0::2])
        heads = [int(h[0][1]) for h in res[1::2] if h and h[0][1] <= cutoff_ms]
        return count, min(heads, default=None)
