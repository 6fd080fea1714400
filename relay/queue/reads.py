"""Reads of deliveries and events: records, listings, counts by status, shard stats.

Pipelined per shard; never a scan. Key names come from :mod:`relay.queue.keys`.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from relay.domain import attemptlog, eventrecord, ids, matching
from relay.queue.base import StoreBase
from relay.queue.keys import ShardKeys
from relay.queue.records import record_of


def encode_cursor(score: float, member: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([score, member])).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """Raises ValueError on anything that is not a cursor relay made."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, member = orjson.loads(raw)
        return float(score), str(member)
    except Exception as exc:  # binascii.Error, orjson.JSONDecodeError, unpacking
        raise ValueError("cursor is not valid") from exc


HEADER_READ = 4096  # bytes of an event read for its header; a longer header is read whole
Found = dict[str, dict[str, Any] | None]  # what a per-shard read found, by event id


class Reads(StoreBase):
    async def get_delivery(self, delivery_id: str, with_log: bool = True) -> dict[str, Any] | None:
        sk = self.shard_keys_for(delivery_id)
        if sk is None:
            return None
        rows = await self._rows(sk, [delivery_id], with_log=with_log)
        if not rows:
            return None
        record = rows[0]
        if "lane" in record:  # ordered: the lane's head now, and whether a dead head holds it
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.lindex(sk.lane(record["lane"]), 0)
                pipe.zscore(sk.blocked, record["lane"])
                head, since = await pipe.execute()
            record["lane_head"] = head
            record["lane_blocked"] = since is not None
        return record

    async def app_of(self, kind: str, ident: str) -> str | None:
        """The app of an endpoint, event or delivery; None when it does not exist (the one
        read the API's access check makes before a scoped request for one of them)."""
        if kind == "endpoint":
            raw = await self.redis.hget(self.keys.endpoints, ident)
            return str(orjson.loads(raw)["app"]) if raw else None
        sk = self.shard_keys_for(ident)
        if sk is None:
            return None
        if kind == "event":  # its header only, not its payload (up to max_payload_bytes)
            header = (await self._headers(sk, [ident]))[ident]
            return str(header["app"]) if header is not None else None
        # a delivery's app is its event's (its hash has none but for an ordered or moved
        # one): read it as any read does, in one round trip
        rows = await self._rows(sk, [ident])
        app = rows[0].get("app") if rows else None
        return str(app) if app is not None else None

    async def get_deliveries(self, sk: ShardKeys, delivery_ids: Sequence[str]) -> list[dict]:
        return await self._rows(sk, delivery_ids) if delivery_ids else []

    async def _rows(
        self,
        sk: ShardKeys,
        delivery_ids: Sequence[str],
        *,
        with_log: bool = False,
        headers: dict[str, dict[str, Any] | None] | None = None,
    ) -> list[dict[str, Any]]:
        """The deliveries that exist of ``delivery_ids`` (one shard), as the API shows them.

        Layout v3 keeps in a delivery's hash only what is nowhere else (a delivery as
        published has none): the rest comes from its id (event, created), its due and
        processing scores (next attempt, lease) and its event's header (endpoint, app,
        type, budget). One round trip: each hash, both scores (and attempt log,
        ``with_log``), and each event's header, once; ``headers``: those already read. A
        header past :data:`HEADER_READ`, or a layout v2 id's event, takes one more.
        """
        known = dict(headers or {})
        named = [ids.derived(d) for d in delivery_ids]
        wanted = list(dict.fromkeys(n[0] for n in named if n is not None and n[0] not in known))
        step = 4 if with_log else 3
        async with self.redis.pipeline(transaction=False) as pipe:
            for d in delivery_ids:
                pipe.hgetall(sk.delivery(d))
                pipe.zscore(sk.due, d)
                pipe.zscore(sk.processing, d)  # a lease's expiry is only there
                if with_log:
                    pipe.lrange(sk.log(d), 0, -1)
            for e in wanted:
                pipe.getrange(sk.event(e), 0, HEADER_READ - 1)
            res = await pipe.execute()
        known |= await self._headers(sk, wanted, res[len(delivery_ids) * step :])
        raws = [res[i * step] for i in range(len(delivery_ids))]
        # an id of layout v2 does not name its event: its hash does (when it has no budget)
        more = {r["event_id"] for r in raws if "event_id" in r and "max_attempts" not in r}
        known |= await self._headers(sk, sorted(more - known.keys()))
        # Redis's clock, read only when an event was published for later (``scheduled``)
        later = any(h is not None and "at" in h for h in known.values())
        now_ms = await self.now_ms() if later else None
        rows = []
        for i, (d, raw) in enumerate(zip(delivery_ids, raws, strict=True)):
            event_id = raw.get("event_id") or (named[i] or ("", 0))[0]
            lease = res[i * step + 2]
            row = record_of(d, raw, res[i * step + 1], known.get(event_id), lease, now_ms)
            if row is None:
                continue
            if with_log:
                log = [orjson.loads(e) for e in res[i * step + 3]]
                if "a1" in raw:  # a first request that succeeded, kept in the hash
                    log.insert(0, attemptlog.expand(raw["a1"]))
                row["attempt_log"] = log
            rows.append(row)
        return rows

    async def _headers(
        self, sk: ShardKeys, event_ids: Sequence[str], heads: Sequence[str | None] | None = None
    ) -> dict[str, dict[str, Any] | None]:
        """The headers of events of one shard (None: gone), from their first
        :data:`HEADER_READ` bytes (``heads``, or read here in one round trip); the whole
        event is read, in one more, only for a header longer than that."""
        if not event_ids:
            return {}
        if heads is None:
            async with self.redis.pipeline(transaction=False) as pipe:
                for e in event_ids:
                    pipe.getrange(sk.event(e), 0, HEADER_READ - 1)
                heads = await pipe.execute()
        got = dict(zip(event_ids, heads, strict=True))
        long = [e for e, h in got.items() if h and "\n" not in h and len(h) >= HEADER_READ]
        if long:
            async with self.redis.pipeline(transaction=False) as pipe:
                for e in long:
                    pipe.get(sk.event(e))
                got.update(zip(long, await pipe.execute(), strict=True))
        return {e: eventrecord.header_of(h) if h else None for e, h in got.items()}

    async def get_idempotency(self, shard: int, app: str, key: str) -> str | None:
        """The idempotency record of ``key`` (``{"h": body hash, "answer": ...}``), or None."""
        raw = await self.redis.get(self.keys.shard(shard).idempotency(app, key))
        return None if raw is None else str(raw)

    async def get_event(self, event_id: str) -> dict[str, Any] | None:
        sk = self.shard_keys_for(event_id)
        if sk is None:
            return None
        raw = await self.redis.get(sk.event(event_id))
        if raw is None:
            return None
        return eventrecord.view(event_id, raw)

    async def _per_shard(
        self, event_ids: Sequence[str], read: Callable[[ShardKeys, list[str]], Awaitable[Found]]
    ) -> list[dict[str, Any] | None]:
        """``read`` of the distinct ``event_ids`` of each shard (one not of a shard left
        out), the shards at once; what it found for each id, in order (None: not found)."""
        by_shard: dict[ShardKeys, list[str]] = {}
        for e in dict.fromkeys(event_ids):
            sk = self.shard_keys_for(e)
            if sk is not None:
                by_shard.setdefault(sk, []).append(e)
        found: Found = {}
        for got in await asyncio.gather(*(read(sk, w) for sk, w in by_shard.items())):
            found |= got
        return [found.get(e) for e in event_ids]

    async def get_events(self, event_ids: Sequence[str]) -> list[dict[str, Any] | None]:
        """Several events as :meth:`get_event` reads them (None for one unknown or
        gone), in order: one ``MGET`` per shard (its events share one slot), the shards
        at once."""

        async def read(sk: ShardKeys, wanted: list[str]) -> Found:
            raws = await self.redis.mget([sk.event(e) for e in wanted])
            return {
                e: None if raw is None else eventrecord.view(e, raw)
                for e, raw in zip(wanted, raws, strict=True)
            }

        return await self._per_shard(event_ids, read)

    async def get_headers(self, event_ids: Sequence[str]) -> list[dict[str, Any] | None]:
        """Several events' stored headers (None for one unknown or gone), in order, without
        their payloads: a ranged read of each event's first bytes, the shards at once."""
        return await self._per_shard(event_ids, self._headers)

    async def endpoint_known(self, endpoint_id: str) -> bool:
        """Whether the endpoint exists, or once did and still has deliveries indexed
        (a deleted endpoint's dead letters stay listable and replayable)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hexists(self.keys.endpoints, endpoint_id)
            for sk in self.keys.all_shards():
                pipe.exists(sk.endpoint_index(endpoint_id))
            found = await pipe.execute()
        return any(found)

    async def event_body_length(self, event_id: str) -> int | None:
        """Bytes of the body sent for an event, None for an unknown id (0 when gone)."""
        sk = self.shard_keys_for(event_id)
        if sk is None:
            return None
        raw = await self.redis.get(sk.event(event_id))
        return len(eventrecord.unpack(raw, event_id)[1]) if raw is not None else 0

    async def list_deliveries(
        self,
        *,
        status: str | None = None,
        endpoint_id: str | None = None,
        event_id: str | None = None,
        event_type: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        app: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first, across shards; ``cursor`` continues a previous page.

        ``event_type`` is exact or a prefix pattern (``order.*``). A filter that matches
        little scans a bounded number of index entries per call and returns the cursor of
        where it stopped, so a page may hold fewer than ``limit`` rows and still continue.
        ``app``: only that app's deliveries (an app-scoped API key's listing).
        """
        after = decode_cursor(cursor) if cursor else None

        def wanted(row: dict[str, Any]) -> bool:
            return (
                (status is None or row.get("status") == status)
                and (app is None or row.get("app") == app)
                and (endpoint_id is None or row.get("endpoint_id") == endpoint_id)
                and (event_type is None or matching.matches([event_type], row.get("type", "")))
            )

        if event_id is not None:
            event = await self.get_event(event_id)
            sk = self.shard_keys_for(event_id)
            if event is None or sk is None:
                return [], None
            rows = await self.get_deliveries(sk, [d["id"] for d in event["deliveries"]])
            rows = [r for r in rows if wanted(r)]
            # Same order and cursor as the indexes (created, id), so an event with more
            # deliveries than one page is walked page by page like any other listing.
            rows.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
            if after is not None:
                rows = [r for r in rows if (r["created_at"], r["id"]) < after]
            if len(rows) > limit:
                last = rows[limit - 1]
                return rows[:limit], encode_cursor(last["created_at"], last["id"])
            return rows, None

        def source(sk: ShardKeys) -> str:
            if endpoint_id is not None:
                return sk.endpoint_index(endpoint_id)
            if status is not None:
                return {
                    "scheduled": sk.scheduled,
                    "pending": sk.due,
                    "queued": sk.queued,
                    "held": sk.held_index,
                    "delivering": sk.processing,
                    "succeeded": sk.succeeded,
                    "dead": sk.dead,
                }[status]
            return sk.events  # events, each standing for its deliveries (_expand)

        # Each shard contributes up to limit + 1 matches, scanning at most `budget`
        # index entries; a shard cut short by the budget bounds how far this page may go.
        # Rows are ordered, and the cursor made, by (created, delivery id) whatever the
        # index: an event's deliveries share its score and the 24 characters of its id.
        found: list[tuple[float, str, dict[str, Any]]] = []
        cuts: list[tuple[float, str]] = []
        budget = max(limit * 10, 200)
        for sk in self.keys.all_shards():
            key = source(sk)
            top: float | str = "+inf" if after is None else after[0]
            offset, scanned, matched = 0, 0, 0
            while True:
                batch = await self.redis.zrange(
                    key,
                    top,
                    "-inf",
                    desc=True,
                    byscore=True,
                    offset=offset,
                    num=limit + 1,
                    withscores=True,
                )
                offset += len(batch)
                scanned += len(batch)
                entries = [(s, m) for m, s in batch]
                headers: dict[str, dict[str, Any] | None] = {}
                if key == sk.events:
                    entries, headers = await self._expand(sk, entries)
                page = [
                    (s, m)
                    for s, m in entries
                    if after is None or s < after[0] or (s == after[0] and m < after[1])
                ]
                rows = await self._rows(sk, [m for _, m in page], headers=headers)
                got = {r["id"]: r for r in rows}
                for s, m in page:
                    r = got.get(m)
                    if r is not None and wanted(r):
                        found.append((s, m, r))
                        matched += 1
                if len(batch) <= limit or matched > limit:
                    break
                if scanned >= budget:
                    last = batch[-1][1]  # the score of the last entry scanned
                    gone = (last, "dlv_" + batch[-1][0][4:])  # its event went meanwhile
                    cuts.append(min((e for e in entries if e[0] == last), default=gone))
                    break
        found.sort(key=lambda t: (t[0], t[1]), reverse=True)
        if cuts:
            bound = max(cuts)
            found = [f for f in found if (f[0], f[1]) >= bound]
        if len(found) > limit:
            s, m, _ = found[limit - 1]
            return [r for _, _, r in found[:limit]], encode_cursor(s, m)
        if cuts:
            s, m = max(cuts)
            return [r for _, _, r in found], encode_cursor(s, m)
        return [r for _, _, r in found], None

    async def _expand(
        self, sk: ShardKeys, events: list[tuple[float, str]]
    ) -> tuple[list[tuple[float, str]], dict[str, dict[str, Any] | None]]:
        """``(score, event id)`` of the events index as ``(score, delivery id)`` of each of
        their deliveries, from each event's header (kept, for :meth:`_rows`)."""
        headers = await self._headers(sk, [e for _, e in events])
        out: list[tuple[float, str]] = []
        for s, e in events:
            header = headers[e]
            if header is not None:
                out += [(s, d) for d, _ in eventrecord.deliveries(e, header)]
        return out, headers
