"""``relay migrate``: move what an older key layout wrote to this one (``keys.LAYOUT``).

Layout v1 -> v2 (issue 17): every key keeps its name but for the layout version
(``relay:v1:{s0}:dlv:...`` becomes ``relay:v2:{s0}:dlv:...``: the same hash tag, so the
same cluster slot), and an event hash becomes the one string of
:mod:`relay.domain.eventrecord`; v1's ``events`` index (written, never read) is
deleted. Every other key is copied as it is (``DUMP`` then ``RESTORE`` with its TTL),
then the v1 key is deleted.

Key by key, each copied before its v1 key goes, and idempotent: a run cut short is run
again, and a key already under v2 is not written twice (the copy is skipped, the v1 key
deleted). Run it with every relay process stopped (README "Upgrading"): ``relay api``
and ``relay worker`` refuse to start while a v1 key is left (:meth:`legacy_left`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from relay.domain import eventrecord
from relay.queue.base import StoreBase
from relay.queue.keys import LAYOUT, Keys

OLD = "v1"
DROPPED = {"events"}  # v1's events index: written, never read; v2 keeps none


@dataclass
class Migrated:
    keys: int = 0  # v1 keys moved to v2
    events: int = 0  # of which event hashes rewritten as one string
    already: int = 0  # v1 keys whose v2 key was there already (an earlier, cut run)
    dropped: int = 0  # v1 keys v2 has no use for (the events index), deleted
    by_kind: dict[str, int] = field(default_factory=dict)


class Migration(StoreBase):
    def _old(self) -> Keys:
        return Keys(self.settings.key_prefix, self.settings.shards, layout=OLD)

    async def legacy_left(self) -> bool:
        """Whether a key relay always writes in use is still under layout v1 (a probe of a
        few fixed keys, not a scan: cheap enough for every start)."""
        old = self._old()
        probes = [old.endpoints, old.event_types, old.api_keys, old.replay_jobs]
        for sk in old.all_shards():
            probes += [sk.deliveries, sk.due, sk.processing]
        async with self.redis.pipeline(transaction=False) as pipe:  # one round trip
            for key in probes:
                pipe.exists(key)
            return any(await pipe.execute())

    async def _scan(self, pattern: str, count: int) -> AsyncIterator[list[str]]:
        nodes: list[Any] = (
            self.redis.get_primaries() if isinstance(self.redis, RedisCluster) else [None]
        )
        for node in nodes:
            cursor = 0
            while True:
                args = ("SCAN", cursor, "MATCH", pattern, "COUNT", count)
                if node is None:
                    reply = await self.redis.execute_command(*args)
                else:
                    reply = await self.redis.execute_command(*args, target_nodes=node)
                cursor, batch = reply
                if isinstance(cursor, dict):  # redis-py's cluster SCAN: {node name: cursor}
                    (cursor,) = cursor.values()
                if batch:
                    yield list(batch)
                if int(cursor) == 0:
                    break

    async def migrate(
        self, *, dry_run: bool = False, progress: Callable[[Migrated], None] | None = None
    ) -> Migrated:
        """Move every v1 key of this prefix to v2 (module docstring); with ``dry_run``,
        only count them."""
        old_root = f"{self.settings.key_prefix}:{OLD}:"
        new_root = f"{self.settings.key_prefix}:{LAYOUT}:"
        done = Migrated()
        async for batch in self._scan(old_root + "*", 500):
            for key in batch:
                kind = _kind(key[len(old_root) :])
                done.by_kind[kind] = done.by_kind.get(kind, 0) + 1
                if dry_run:
                    done.keys += 1
                    continue
                if kind in DROPPED:
                    done.keys += await self.redis.delete(key)
                    done.dropped += 1
                    continue
                target = new_root + key[len(old_root) :]
                moved = await self._move(key, target, event=kind == "evt")
                if moved is None:
                    continue  # gone between the scan and now (a TTL ran out)
                done.keys += 1
                done.events += kind == "evt" and moved
                done.already += not moved
            if progress is not None:
                progress(done)
        return done

    async def _move(self, key: str, target: str, *, event: bool) -> bool | None:
        """Copy ``key`` to ``target`` and delete it: True when copied, False when
        ``target`` was there already, None when ``key`` is gone."""
        ttl = int(await self.redis.pttl(key))
        if ttl == -2:
            return None
        ttl = max(ttl, 0)  # -1: no TTL; RESTORE and SET take 0 / none for that
        if event and await self.redis.type(key) == "hash":
            raw = await self.redis.hgetall(key)
            value = _event_v2(raw)
            px = {"px": ttl} if ttl else {}
            copied = bool(await self.redis.set(target, value, nx=True, **px))
        else:
            dumped = await self.redis.dump(key)
            if dumped is None:
                return None
            try:
                await self.redis.restore(target, ttl, dumped)
                copied = True
            except ResponseError as exc:
                if "BUSYKEY" not in str(exc):
                    raise
                copied = False
        await self.redis.delete(key)
        return copied


def _kind(rest: str) -> str:
    """``{s0}:dlv:dlv_...`` -> ``dlv``; ``{cfg}:endpoints`` -> ``endpoints``."""
    parts = rest.split(":")
    return parts[1] if len(parts) > 1 else parts[0]


def _event_v2(raw: dict[str, str]) -> bytes:
    """A layout v1 event hash as the v2 string."""
    return eventrecord.pack(
        event_type=raw["type"],
        app=raw["app"],
        created_ms=int(raw["created_at"]),
        deliveries=[(d["id"], d["endpoint_id"]) for d in orjson.loads(raw["deliveries"])],
        body=raw["body"].encode(),
        filtered=orjson.loads(raw["filtered"]) if raw.get("filtered") else (),
        trace=raw.get("tp", ""),
    )
