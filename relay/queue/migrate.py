"""``relay migrate``: move what an older key layout wrote to this one (``keys.LAYOUT``).

Layouts v1 and v2 -> v3: every key keeps its name but for the layout version
(``relay:v2:{s0}:dlv:...`` becomes ``relay:v3:{s0}:dlv:...``: the same hash tag, so the
same cluster slot), and an event (v1: a hash; v2: a string without ``max_attempts``, its
deliveries listed with their ids, the body as it is) becomes the string of
:mod:`relay.domain.eventrecord`, its body compressed, and is added to v3's ``events``
index. The old indexes v3 has not are deleted: v1's ``events`` (written, never read) and
the ``deliveries`` index of v1 and v2 (v3 indexes events). Every other key is copied as
it is (``DUMP`` then ``RESTORE`` with its TTL), then the old key is deleted: delivery
hashes too, which layout v3 reads as they are (their ids do not derive from their
event's, so they keep naming it), less ``next_attempt_at``, which v3 reads from the due
score and no longer writes.

Key by key, each copied before its old key goes, and idempotent: a run cut short is run
again, and a key already under v3 is not written twice (the copy is skipped, the old key
deleted). Run it with every relay process stopped (docs/operating/upgrades.md): ``relay api``
and ``relay worker`` refuse to start while an old key is left (:meth:`legacy_left`).
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
from relay.queue.keys import LAYOUT, Keys, ShardKeys

OLD = ("v1", "v2")
# Indexes v3 rebuilds rather than copies: v1's events index (written, never read), and
# v1's and v2's deliveries index (v3's ``events`` lists events: each event moved is
# indexed as it is moved).
DROPPED = {"events", "deliveries"}
# Fields of a delivery hash layout v3 no longer keeps up to date (the due score holds the
# next attempt): deleted from a hash as it is moved, so no v3 script has to know of them.
STALE_DELIVERY_FIELDS = ("next_attempt_at",)


@dataclass
class Migrated:
    keys: int = 0  # old keys moved to this layout
    events: int = 0  # of which events rewritten (eventrecord)
    already: int = 0  # old keys whose new key was there already (an earlier, cut run)
    dropped: int = 0  # old keys this layout has no use for (v1's events index), deleted
    by_kind: dict[str, int] = field(default_factory=dict)


class Migration(StoreBase):
    async def legacy_left(self) -> str | None:
        """The older layout a key relay always writes in use is still under, or None (a
        probe of a few fixed keys, not a scan: cheap enough for every start)."""
        probes: list[tuple[str, str]] = []
        for layout in OLD:
            old = Keys(self.settings.key_prefix, self.settings.shards, layout=layout)
            keys = [old.endpoints, old.event_types, old.api_keys, old.replay_jobs]
            for sk in old.all_shards():
                keys += [sk.due, sk.processing, sk.succeeded]
            probes += [(layout, k) for k in keys]
        async with self.redis.pipeline(transaction=False) as pipe:  # one round trip
            for _, key in probes:
                pipe.exists(key)
            found = await pipe.execute()
        return next((layout for (layout, _), n in zip(probes, found, strict=True) if n), None)

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
        """Move every key of an older layout of this prefix to this one (module docstring);
        with ``dry_run``, only count them."""
        done = Migrated()
        for layout in OLD:
            await self._migrate(layout, done, dry_run, progress)
        return done

    async def _migrate(
        self,
        layout: str,
        done: Migrated,
        dry_run: bool,
        progress: Callable[[Migrated], None] | None,
    ) -> None:
        old_root = f"{self.settings.key_prefix}:{layout}:"
        new_root = f"{self.settings.key_prefix}:{LAYOUT}:"
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
                if moved is not None and kind == "dlv":
                    await self.redis.hdel(target, *STALE_DELIVERY_FIELDS)
                if moved is None:
                    continue  # gone between the scan and now (a TTL ran out)
                done.keys += 1
                done.events += kind == "evt" and moved
                done.already += not moved
            if progress is not None:
                progress(done)

    def _shard_of(self, key: str) -> ShardKeys:
        """The shard keys of a key under ``{sN}`` of this layout."""
        tag = key[key.index("{") + 1 : key.index("}")]
        return self.keys.shard(int(tag[1:]))

    async def _event_v3(self, key: str) -> bytes | None:
        """An event of layout v1 (a hash) or v2 (a string) as this layout stores it."""
        if await self.redis.type(key) == "hash":  # v1
            raw = await self.redis.hgetall(key)
            if not raw:
                return None
            header: dict[str, Any] = {
                "type": raw["type"],
                "app": raw["app"],
                "created_at": int(raw["created_at"]),
                "d": [[d["id"], d["endpoint_id"]] for d in orjson.loads(raw["deliveries"])],
            }
            if raw.get("filtered"):
                header["filtered"] = orjson.loads(raw["filtered"])
            if raw.get("tp"):
                header["tp"] = raw["tp"]
            body = raw["body"].encode()
        else:  # v2: the header line (deliveries as [id, endpoint]), then the body as sent
            stored = await self.redis.get(key)
            if stored is None:
                return None
            head, _, body = eventrecord.raw(stored).partition(b"\n")
            header = orjson.loads(head)
        return eventrecord.pack(
            event_id=_event_id(key),
            event_type=header["type"],
            app=header["app"],
            created_ms=int(header["created_at"]),
            # their deliveries keep max_attempts in their hashes; this is never read
            max_attempts=self.settings.max_attempts,
            deliveries=[(d, e) for d, e in header["d"]],
            body=body,
            filtered=header.get("filtered", ()),
            trace=header.get("tp", ""),
        )

    async def _move(self, key: str, target: str, *, event: bool) -> bool | None:
        """Copy ``key`` to ``target`` and delete it: True when copied, False when
        ``target`` was there already, None when ``key`` is gone."""
        ttl = int(await self.redis.pttl(key))
        if ttl == -2:
            return None
        ttl = max(ttl, 0)  # -1: no TTL; RESTORE and SET take 0 / none for that
        if event:
            value = await self._event_v3(key)
            if value is None:
                return None
            header = eventrecord.header_of(value)
            if header["d"]:  # indexed, like an event published with deliveries
                event_id = _event_id(key)
                created = eventrecord.created(event_id, header)
                await self.redis.zadd(self._shard_of(target).events, {event_id: created})
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


def _event_id(key: str) -> str:
    return key.rsplit(":", 1)[1]
