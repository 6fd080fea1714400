"""Delivery transitions: one typed method per script, the only place its KEYS/ARGV are built.

Each method here calls exactly one script of ``relay/queue/lua/`` (named after it, or
said in its docstring), with keys and key prefixes from :mod:`relay.queue.keys`, and
parses the reply into a typed value. Hot paths (publish, claim, record) are one script
call each, nothing more.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson
from redis.client import NEVER_DECODE

from relay.domain import attemptlog, eventrecord, ids
from relay.queue.base import StoreBase
from relay.queue.keys import ShardKeys
from relay.queue.records import Claimed, ClaimResult, Outcome, Swept, num


class Transitions(StoreBase):
    @property
    def _ack(self) -> tuple[int, float]:
        """``(replicas, timeout)`` for writes answered to a client (``_Call._confirmed``)."""
        return self.settings.ack_replicas, self.settings.ack_timeout

    # ------------------------------------------------------------------ publish

    async def publish(self, **write: Any) -> str | None:
        """Store an event with its deliveries in one script (``publish.lua``); ``write``:
        the keyword arguments of :meth:`_publish_call`.

        When the idempotency key is already taken nothing is written and the stored
        value is returned instead of None."""
        # sent with the other single publishes of this loop turn (one round trip for all)
        res = await self.scripts.publish.grouped(*self._publish_call(**write), ack=self._ack)
        return None if int(res[0]) == 1 else res[1]

    async def publish_many(self, writes: Sequence[dict[str, Any]]) -> list[str | None]:
        """Several :meth:`publish` calls at once, in the order given (one pipeline on one
        Redis, then one ``WAIT`` for them all); one reply each, as :meth:`publish`'s."""
        calls = [self._publish_call(**write) for write in writes]
        # Confirmed by RELAY_ACK_REPLICAS replicas (WAIT), on the hit path too: the script
        # then touches the key, so the WAIT covers the first answer's write as well.
        replies = await self.scripts.publish.many(calls, ack=self._ack)
        return [None if int(res[0]) == 1 else res[1] for res in replies]

    def _publish_call(
        self,
        *,
        shard: int,
        event_id: str,
        event_type: str,
        app: str,
        body: bytes,
        created_ms: int,
        deliveries: Sequence[tuple[str, str]],
        idempotency: tuple[str, bytes] | None = None,
        filtered: Sequence[dict[str, str]] = (),
        lanes: Sequence[tuple[str, str]] | None = None,
        trace: str = "",
        deliver_at_ms: int | None = None,
        copy: bool = False,
    ) -> tuple[list[Any], list[Any]]:
        """The KEYS and ARGV of ``publish.lua`` for one event with its deliveries.

        ``filtered``: endpoints left out because their filter erred, kept on the event.

        ``idempotency`` is ``(key, value)``: the value stored under the key when the
        script takes it. ``lanes``: per
        delivery, its ordered lane ("" for none) and ``"skip"`` or ``"block"``.
        ``trace``: the publish span's context (:func:`relay.tracing.carrier`), stored as
        the event's ``tp``; "" with tracing off. ``deliver_at_ms``: when the deliveries
        are due (kept in the event's header as ``at``); None or a past time: now.
        ``copy``: the key's guard is on another shard, taken already; ``idempotency``
        then goes to this shard's copy (``ShardKeys.published``), so the event is written
        once.
        """
        sk = self.keys.shard(shard)
        event_key = sk.event(event_id)
        # Without an Idempotency-Key the script never touches KEYS[1]: the event key
        # stands in (a key of the same slot, so the call still names one slot).
        idem_key = event_key
        if idempotency:
            guard = sk.published if copy else sk.idempotency
            idem_key = guard(app, idempotency[0])
        keys = [idem_key, event_key, sk.due, sk.events]
        args: list[Any] = [
            "1" if idempotency else "0",
            idempotency[1] if idempotency else "",
            int(self.settings.idempotency_ttl * 1000),
            event_id,
            event_type,
            app,
            eventrecord.pack(
                event_id=event_id,
                event_type=event_type,
                app=app,
                created_ms=created_ms,
                max_attempts=self.settings.max_attempts,
                deliveries=deliveries,
                body=body,
                filtered=filtered,
                trace=trace,
                deliver_at=deliver_at_ms,
                idempotency_key=idempotency[0] if idempotency else "",
            ),
            created_ms,
            sk.wake,
            int(self.settings.retention * 1000),  # TTL of an event with no delivery
            len(deliveries),
        ]
        for i, (delivery_id, endpoint_id) in enumerate(deliveries):
            keys += [sk.delivery(delivery_id), sk.endpoint_index(endpoint_id)]
            # a delivery whose id does not derive from the event's gets a hash now
            derived = ids.is_delivery_of(delivery_id, event_id, i)
            args += [delivery_id, endpoint_id, "" if derived else "1"]
        keys += [sk.queued, sk.scheduled]
        keys.append(sk.idempotency_index(idempotency[0]) if idempotency else event_key)
        args.append("" if deliver_at_ms is None else deliver_at_ms)
        args.append(sk.lane_prefix if lanes else "")
        for lane, on_dead in lanes or ():
            args += [lane, on_dead]
        return keys, args

    # ------------------------------------------------------------------ worker transitions

    async def claim(
        self, sk: ShardKeys, *, limit: int, lease_ms: int, token_prefix: str, worker: str
    ) -> ClaimResult:
        """Take up to ``limit`` due deliveries under a lease (``claim.lua``); tokens are
        ``<token_prefix>:<n>``. Their events are read after it in one ``MGET`` (the
        script reads none: a string passed through Lua costs Redis far more than one a
        command answers), and a delivery's endpoint and attempt budget, when its hash has
        none, are its event's header's. A claimed delivery whose event is gone is
        recorded dead at once (``event_missing``) and not returned."""
        res = await self.scripts.claim(
            keys=[sk.due, sk.processing],
            args=[sk.delivery_prefix, limit, lease_ms, token_prefix + ":", worker],
            raw=True,  # ids and tokens are ASCII: left as bytes, decoded once here
        )
        rows = []
        for i in range(4, 4 + 6 * int(res[3]), 6):
            delivery_id = res[i].decode()
            derived = ids.derived(delivery_id)  # a first claim's event and index: its id's
            event_id = res[i + 4].decode() or (derived[0] if derived else "")
            rows.append(
                (
                    delivery_id,
                    res[i + 1].decode(),
                    res[i + 2],
                    res[i + 3],
                    event_id,
                    res[i + 5].decode(),
                    derived[1] if derived else -1,
                )
            )
        # an event's deliveries in one batch (a fan-out) share its body: read and inflated once
        event_ids = list(dict.fromkeys(r[4] for r in rows))
        stored = await self._events(sk, event_ids) if event_ids else {}
        events: dict[str, tuple[dict[str, Any], bytes] | None] = {}
        items, missing = [], []
        for delivery_id, token, attempts, max_attempts, event_id, endpoint_id, index in rows:
            if event_id not in events:
                value = stored.get(event_id)
                events[event_id] = eventrecord.unpack(value, event_id) if value else None
            got = events[event_id]
            if got is not None and not endpoint_id:
                endpoint_id = eventrecord.endpoint_at(got[0], index) or ""
            if got is None or not endpoint_id:
                at = int(time.time() * 1000)
                gone = "its event is no longer stored: nothing to send"
                entry = orjson.dumps(
                    attemptlog.fields(
                        int(attempts), at, 0.0, None, "event_missing", gone, "dead", worker
                    )
                )
                missing.append(Outcome(delivery_id, token, "dead", 0, None, "event_missing", entry))
                continue
            header, body = got
            budget = int(max_attempts) if max_attempts else int(header["max_attempts"])
            trace = header.get("tp", "")
            items.append(
                Claimed(
                    delivery_id,
                    token,
                    int(attempts),
                    budget,
                    event_id,
                    endpoint_id,
                    body,
                    trace,
                    header["type"],
                )
            )
        if missing:
            await self.record(sk, missing)
        return ClaimResult(int(res[0]), num(res[1]), num(res[2]), items)

    async def _events(self, sk: ShardKeys, event_ids: list[str]) -> dict[str, bytes]:
        """Stored events by id, as bytes (compressed or not), in one ``MGET``: one shard's
        keys share its hash tag, so one slot. An event that is gone is left out."""
        values = await self.redis.execute_command(
            "MGET", *(sk.event(e) for e in event_ids), **{NEVER_DECODE: True}
        )
        return {e: v for e, v in zip(event_ids, values, strict=True) if v is not None}

    async def record(self, sk: ShardKeys, outcomes: Sequence[Outcome]) -> list[int]:
        """Record outcomes, each fenced on its token (``record.lua``): 1 recorded, 0 fenced."""
        keys = [sk.due, sk.processing, sk.succeeded, sk.dead]
        keys += [sk.queued, sk.blocked, sk.dead_tally_index]
        # A first request that succeeded goes as its short form alone (id, token, a1,
        # endpoint: four values, not nine), after the others; the replies come back in
        # that order and are put back in the callers'.
        full: list[int] = []
        short: list[int] = []
        for i, o in enumerate(outcomes):
            (short if _short(o) else full).append(i)
        args: list[Any] = [sk.wake, sk.lane_prefix, sk.delivery_prefix, sk.dead_tally_prefix]
        args += [sk.log_prefix, sk.event_prefix, len(full)]
        for i in full:
            o = outcomes[i]
            code = "" if o.status_code is None else o.status_code
            # an entry with a short form is made from it in the script, where it is needed
            entry = b"" if o.inline else o.entry
            args += [o.id, o.token, o.outcome, o.delay_ms, code, o.error, entry, o.inline]
            args.append(o.endpoint_id)
        args.append(len(short))
        for i in short:
            o = outcomes[i]
            args += [o.id, o.token, o.inline, o.endpoint_id]
        res = await self.scripts.record(keys=keys, args=args)
        out = [0] * len(outcomes)
        for i, r in zip(full + short, res, strict=True):
            out[i] = int(r)
        return out

    async def extend(
        self, sk: ShardKeys, claims: Sequence[tuple[str, str]], lease_ms: int
    ) -> list[int]:
        """Extend the leases of ``(delivery id, token)`` claims (``extend.lua``)."""
        keys = [sk.processing] + [sk.delivery(i) for i, _ in claims]
        args = [lease_ms, len(claims), *(t for _, t in claims), *(i for i, _ in claims)]
        return [int(x) for x in await self.scripts.extend(keys=keys, args=args)]

    async def release(self, sk: ShardKeys, claims: Sequence[tuple[str, str]]) -> list[int]:
        """Hand back interrupted sends, uncharged; each is logged as ``handed_back``."""
        keys = [sk.due, sk.processing]
        args: list[Any] = [sk.wake, self.settings.worker_id, len(claims)]
        for delivery_id, token in claims:
            keys += [sk.delivery(delivery_id), sk.log(delivery_id)]
            args += [token, delivery_id]
        return [int(x) for x in await self.scripts.release(keys=keys, args=args)]

    async def reclaim(self, sk: ShardKeys, limit: int = 500) -> tuple[int, int, list[str]]:
        """Expired leases back to due or to dead (``reclaim.lua``): (back, dead, ids)."""
        res = await self.scripts.reclaim(
            keys=[
                sk.due,
                sk.processing,
                sk.dead,
                sk.stats,
                sk.queued,
                sk.blocked,
                sk.dead_tally_index,
            ],
            args=[
                sk.delivery_prefix,
                sk.log_prefix,
                limit,
                sk.wake,
                sk.lane_prefix,
                sk.dead_tally_prefix,
                sk.event_prefix,
            ],
        )
        return int(res[0]), int(res[1]), list(res[2:])

    async def hold(self, sk: ShardKeys, endpoint_id: str, claims: Sequence[tuple[str, str]]) -> int:
        """Park claimed deliveries of a disabled endpoint as ``held`` (``hold.lua``),
        uncharged; returns how many were still ours."""
        keys = [
            sk.processing,
            sk.held(endpoint_id),
            sk.held_index,
            *(sk.delivery(i) for i, _ in claims),
        ]
        args = [len(claims), *(t for _, t in claims), *(i for i, _ in claims), endpoint_id]
        return int(await self.scripts.hold(keys=keys, args=args))

    async def resume(self, endpoint_id: str, *, confirm: bool = False) -> int:
        """An endpoint's held deliveries back to pending, due now, on every shard
        (``resume.lua``, one call per shard); returns how many. ``confirm``: a client's
        write (re-enable, delete), confirmed by ``RELAY_ACK_REPLICAS`` replicas like the
        endpoint write before it, so a failover cannot leave them parked."""
        total = 0
        ack = self._ack if confirm else (0, 0.0)
        for sk in self.keys.all_shards():
            total += int(
                await self.scripts.resume(
                    keys=[sk.held(endpoint_id), sk.due, sk.held_index],
                    args=[sk.delivery_prefix, sk.wake],
                    ack=ack,
                )
            )
        return total

    # ------------------------------------------------------------------ operator transitions

    async def replay(self, delivery_ids: Sequence[str]) -> dict[str, str]:
        """Replay deliveries (``replay.lua``); each id maps to "ok" or the status that
        refused it ("" for an unknown id)."""
        by_shard: dict[int, list[str]] = {}
        result: dict[str, str] = {}
        for d in delivery_ids:
            sk = self.shard_keys_for(d)
            if sk is None:
                result[d] = ""
            else:
                by_shard.setdefault(sk.shard, []).append(d)
        for shard, group in by_shard.items():
            sk = self.keys.shard(shard)
            for start in range(0, len(group), 500):
                chunk = group[start : start + 500]
                res = await self.scripts.replay(
                    keys=[
                        sk.due,
                        sk.succeeded,
                        sk.dead,
                        *(sk.delivery(d) for d in chunk),
                        sk.queued,
                        sk.blocked,
                    ],
                    args=[
                        sk.wake,
                        self.settings.max_attempts,
                        len(chunk),
                        *chunk,
                        sk.lane_prefix,
                    ],
                    ack=self._ack,
                )
                result.update(zip(chunk, res, strict=True))
        return result

    async def discard(self, delivery_ids: Sequence[str]) -> dict[str, str]:
        """Give up on dead deliveries (``discard.lua``); a dead head blocking its lane
        leaves it and the next one goes. Each id maps to "ok" or the status that refused
        it ("" for an unknown id)."""
        result: dict[str, str] = {}
        for d in delivery_ids:
            sk = self.shard_keys_for(d)
            if sk is None:
                result[d] = ""
                continue
            res = await self.scripts.discard(
                keys=[sk.due, sk.queued, sk.blocked, sk.delivery(d)],
                args=[sk.wake, sk.lane_prefix, sk.delivery_prefix, 1, d],
                ack=self._ack,
            )
            result[d] = res[0]
        return result

    async def expire_shard(
        self, sk: ShardKeys, *, succeeded_before: int, dead_before: int, limit: int
    ) -> Swept:
        """One bounded retention sweep of a shard (``expire.lua``).

        Removes at most ``limit`` succeeded deliveries finished at or before
        ``succeeded_before`` and dead ones that died at or before ``dead_before`` (ms;
        -1: none), with their logs, index entries and, with its last delivery, the event.
        """
        res = await self.scripts.expire(
            keys=[sk.succeeded, sk.dead, sk.events, sk.due, sk.queued, sk.blocked],
            args=[
                sk.delivery_prefix,
                sk.log_prefix,
                sk.event_prefix,
                sk.endpoint_index_prefix,
                succeeded_before,
                dead_before,
                limit,
                sk.lane_prefix,
                sk.wake,
            ],
        )
        return Swept(int(res[0]), int(res[1]), bool(int(res[2])))


def _short(o: Outcome) -> bool:
    """Whether the outcome goes to record.lua as its short form alone: a request that
    succeeded and has one (``a1`` says its time, status code and worker; no error)."""
    return o.outcome == "succeeded" and bool(o.inline) and not o.error
