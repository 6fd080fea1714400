"""One event per Idempotency-Key, whatever shard the event goes to.

A key's guard lives on the shard of the app and the key (relay.domain.ordering), so the
same key is found in one place whatever its body says; the event goes where placement
puts it. When both are one shard, ``publish.lua`` takes the guard and writes the event
in one script. Otherwise the publish is two steps:

1. ``reserve.lua`` on the guard's shard stores the record: the body's hash, the answer
   (event id, delivery ids) and what writing the event needs beyond the body (its
   creation time, its lanes), ``"p"``;
2. ``publish.lua`` on the event's shard writes the event, guarded by that shard's copy
   of the record (``ShardKeys.published``), so it is written at most once.

Any request that finds a record with ``"p"`` and the same body runs step 2 again before
answering, with the record's ids and times: a request that died between the steps is
finished by the next one with its key, and an answer (201 or 200) is only given once the
event is in Redis. A record without ``"p"`` was written with its event in one script.

Upgrade from placement by app: a relay before placement by key kept every key on the
app's shard. For two idempotency TTLs after the first start of this layout on a Redis
with endpoints (``Keys.placement``), a publish also claims the key on the app's shard
with the record it holds: a relay of the older placement still running sees the claim
and answers it, and a key it (or the past) remembers there wins, is copied to the
key's guard and answered. Setting that marker to 0 ends the window early.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from relay.domain import ids, ordering, signing
from relay.domain.schema import EventIn
from relay.publish_errors import IdempotencyKeyReused
from relay.queue.store import Store

MARKER_REFRESH = 60.0  # seconds between reads of when placement by key began


@dataclass(frozen=True, slots=True)
class Published:
    """The answer to a publish: ``created`` False means the same key and body came again
    and ``answer`` is the first publish's, unchanged (nothing new was written)."""

    answer: dict[str, Any]
    created: bool


def fingerprint(event: EventIn, deliver_at: int | None = None) -> str:
    """What "the same request body" means for an idempotency key (``deliver_at``: ms,
    the time asked for, past or not)."""
    # EventIn's own fields (not a subclass's), read as they are: validated JSON values,
    # which orjson dumps as model_dump would, without model_dump's deep copy
    fields: dict[str, Any] = {name: getattr(event, name) for name in EventIn.model_fields}
    if fields["ordering_key"] is None:  # absent: the same fingerprint as before lanes
        del fields["ordering_key"]
    if deliver_at is not None:  # absent: the same fingerprint as before deliver_at
        fields["deliver_at"] = deliver_at
    return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()


def keyed_answer(answer: dict[str, Any], taken: tuple[dict[str, Any], bool] | None) -> Published:
    """The answer of a keyed write (``answer``: this request's; ``taken``: what
    :meth:`Guard.publish` said): 201 when it published, else the first answer (200), or
    :class:`IdempotencyKeyReused` when the key's first request had another body."""
    if taken is None:
        return Published(answer, created=True)
    first, same = taken
    if not same:
        raise IdempotencyKeyReused("this Idempotency-Key was used with a different request body")
    return Published(first, created=False)


@dataclass(frozen=True, slots=True)
class Write:
    """An event ready to be written (the arguments of ``Store.publish``)."""

    shard: int
    event_id: str
    event_type: str
    app: str
    body: bytes
    created_ms: int
    deliveries: Sequence[tuple[str, str]]
    filtered: Sequence[dict[str, str]] = ()
    lanes: Sequence[tuple[str, str]] | None = None
    trace: str = ""
    deliver_at_ms: int | None = None

    def args(self, idempotency: tuple[str, bytes] | None, copy: bool) -> dict[str, Any]:
        """The keyword arguments of ``Store.publish`` (and of each ``publish_many`` write)."""
        return {
            "shard": self.shard,
            "event_id": self.event_id,
            "event_type": self.event_type,
            "app": self.app,
            "body": self.body,
            "created_ms": self.created_ms,
            "deliveries": self.deliveries,
            "idempotency": idempotency,
            "filtered": self.filtered,
            "lanes": self.lanes,
            "trace": self.trace,
            "deliver_at_ms": self.deliver_at_ms,
            "copy": copy,
        }

    async def to(self, store: Store, idempotency: tuple[str, bytes] | None, copy: bool) -> Any:
        return await store.publish(**self.args(idempotency, copy))


@dataclass(slots=True)
class Guard:
    """Publishes keyed events into one store exactly once per key."""

    store: Store
    _since: tuple[int, float] | None = field(default=None)

    async def _legacy(self, app: str, guard: int) -> int | None:
        """The app's shard while keys must also be claimed there, else None."""
        home = ordering.app_shard(app, self.store.settings.shards)
        if home == guard:
            return None
        now = time.monotonic()
        if self._since is None or now - self._since[1] > MARKER_REFRESH:
            self._since = (await self.store.placement_since(), now)
        since = self._since[0]
        window = 2 * self.store.settings.idempotency_ttl * 1000
        return home if since and time.time() * 1000 < since + window else None

    async def direct(self, write: Write, key: str) -> bool:
        """Whether ``write`` takes ``key``'s guard in its own script (one step)."""
        guard = ordering.key_shard(write.app, key, self.store.settings.shards)
        return write.shard == guard and await self._legacy(write.app, guard) is None

    async def publish(
        self, key: str, mark: str, answer: dict[str, Any], write: Write, payload_json: bytes
    ) -> tuple[dict[str, Any], bool] | None:
        """Write ``write`` guarded by ``key``: None when this call published it (answer
        ``answer``, 201), else ``(first answer, its record matched mark)``."""
        shards = self.store.settings.shards
        guard = ordering.key_shard(write.app, key, shards)
        home = await self._legacy(write.app, guard)
        record: dict[str, Any] = {"h": mark, "answer": answer}
        if write.shard == guard and home is None:  # one script: guard and event together
            taken = await write.to(self.store, (key, orjson.dumps(record)), copy=False)
            if taken is None:
                return None
            return await self.found(key, str(taken), mark, write, payload_json)
        record["p"] = {"t": write.created_ms, "l": write.lanes}
        if write.deliver_at_ms is not None:
            record["p"]["a"] = write.deliver_at_ms
        ours = orjson.dumps(record).decode()
        first = await self.store.reserve(guard, write.app, key, ours) or ours
        if home is not None:
            held = await self.store.reserve(home, write.app, key, first)
            if held is not None and held != first:  # the app's shard remembers the key
                await self.store.replace_idempotency(guard, write.app, key, held)
                first = held
        if first == ours:
            await write.to(self.store, (key, ours.encode()), copy=True)
            return None
        return await self.found(key, first, mark, write, payload_json)

    async def found(
        self, key: str, raw: str, mark: str, write: Write, payload_json: bytes
    ) -> tuple[dict[str, Any], bool]:
        """``key``'s record ``raw`` as (its first answer, whether its body is ``mark``'s),
        its event written first when its publish stopped between the two steps."""
        first = orjson.loads(raw)
        same = first["h"] == mark
        if same and "p" in first:
            await self.finish(key, raw, write.trace, payload_json)
        return first["answer"], same

    async def finish(self, key: str, raw: str, trace: str, payload_json: bytes) -> None:
        """Step 2 of the two-step publish recorded in ``raw`` (a record with ``"p"``),
        from the record: a no-op when its event is written already."""
        first = orjson.loads(raw)
        answer, how = first["answer"], first["p"]
        event_id = answer["id"]
        shard = ids.shard_of(event_id)
        if shard is None:
            raise ValueError(f"{event_id!r} is not an event id")
        lanes = how.get("l")
        write = Write(
            shard=shard,
            event_id=event_id,
            event_type=answer["type"],
            app=answer["app"],
            body=signing.build_body(event_id, answer["type"], how["t"], payload_json),
            created_ms=how["t"],
            deliveries=[(d["id"], d["endpoint_id"]) for d in answer["deliveries"]],
            filtered=answer.get("filtered", ()),
            lanes=None if lanes is None else [(lane, dead) for lane, dead in lanes],
            trace=trace,
            deliver_at_ms=how.get("a"),
        )
        await write.to(self.store, (key, raw.encode()), copy=True)

    async def remembered(self, app: str, key: str) -> str | None:
        """The record ``key`` holds (its guard's; in the upgrade window the app's shard's
        first), or None."""
        guard = ordering.key_shard(app, key, self.store.settings.shards)
        home = await self._legacy(app, guard)
        for shard in (guard,) if home is None else (home, guard):
            raw = await self.store.get_idempotency(shard, app, key)
            if raw is not None:
                return raw
        return None
