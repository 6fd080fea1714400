"""Events as listed and searched (``GET /v1/events``): newest first, across shards, from Redis.

The walk goes down one index per shard, by score (the event's creation time): the
events index (``ShardKeys.events``), or, with an endpoint filter, that endpoint's
delivery index (``ShardKeys.endpoint_index``, whose delivery ids name their events), or,
with an ``Idempotency-Key``, that key's index (``ShardKeys.idempotency_index``). Each
batch of events is read in one round trip (their headers), their deliveries in one more
(:meth:`Reads._rows`), and filtered here. A filter that matches little stops after a
bounded number of entries and deliveries read per call and answers where it stopped,
so a page may hold fewer than ``limit`` events and still continue (as
``Reads.list_deliveries`` does).

Pages are ordered, and positions made, by ``(created ms, event id)``, descending.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from relay.domain import eventrecord, ids, matching
from relay.queue.keys import ShardKeys
from relay.queue.reads import Reads, decode_cursor, encode_cursor

SHOWN = 20  # deliveries of an event summarised in a listing (all are counted)
BATCH = 64  # index entries read per round trip
BUDGET = 4000  # index entries and deliveries read per shard and call before a page stops
KEY_LOOKUP = 1000  # events of one Idempotency-Key looked at (the index keeps them all)

SUMMARY_FIELDS = (
    "id",
    "endpoint_id",
    "status",
    "attempts",
    "last_status_code",
    "last_error",
    "next_attempt_at",
)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """What ``GET /v1/events`` narrows to; None: any. ``since``/``until``: creation time,
    ms, ``since <= created < until``."""

    app: str | None = None
    event_type: str | None = None  # exact, or a prefix pattern (order.*)
    endpoint_id: str | None = None
    status: str | None = None  # of at least one of its deliveries
    since: int | None = None
    until: int | None = None
    idempotency_key: str | None = None


class EventListing(Reads):
    async def list_events(
        self, f: EventFilter, *, limit: int = 50, position: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of event summaries, newest first, and the position after it (None: the
        end). Raises ValueError for a position that is not one this module made."""
        after = decode_cursor(position) if position else None
        found: list[tuple[float, str, dict[str, Any]]] = []
        cuts: list[tuple[float, str]] = []
        for sk in self.keys.all_shards():
            got, cut = await self._walk(sk, f, limit, after)
            found += got
            if cut is not None:
                cuts.append(cut)
        found.sort(key=lambda t: (t[0], t[1]), reverse=True)
        if cuts:  # a shard stopped short: nothing past its stop is known complete
            bound = max(cuts)
            found = [t for t in found if (t[0], t[1]) >= bound]
        if len(found) > limit:
            s, m, _ = found[limit - 1]
            return [r for _, _, r in found[:limit]], encode_cursor(s, m)
        if cuts:
            s, m = max(cuts)
            return [r for _, _, r in found], encode_cursor(s, m)
        return [r for _, _, r in found], None

    async def event_deliveries(self, event_id: str, limit: int) -> list[dict[str, Any]]:
        """The first ``limit`` deliveries of an event, each with its attempt log."""
        sk = self.shard_keys_for(event_id)
        headers = await self._headers(sk, [event_id]) if sk is not None else {}
        header = headers.get(event_id)
        if sk is None or header is None:
            return []
        wanted = [d for d, _ in eventrecord.deliveries(event_id, header)][:limit]
        return await self._rows(sk, wanted, with_log=True, headers=headers)

    async def _walk(
        self, sk: ShardKeys, f: EventFilter, limit: int, after: tuple[float, str] | None
    ) -> tuple[list[tuple[float, str, dict[str, Any]]], tuple[float, str] | None]:
        """Up to ``limit + 1`` matching events of one shard below ``after``, and where the
        walk stopped short (its budget spent), if it did."""
        top: float | str = "+inf" if f.until is None else f"({f.until}"
        if after is not None:
            top = after[0] if f.until is None else min(after[0], f.until - 0.5)
        bottom: float | str = "-inf" if f.since is None else f.since
        if f.idempotency_key is not None:
            key = sk.idempotency_index(f.idempotency_key)
        elif f.endpoint_id is not None:
            key = sk.endpoint_index(f.endpoint_id)
        else:
            key = sk.events
        found: list[tuple[float, str, dict[str, Any]]] = []
        seen: set[str] = set()
        offset, read = 0, 0
        while True:
            batch = await self.redis.zrange(
                key, top, bottom, desc=True, byscore=True, offset=offset, num=BATCH, withscores=True
            )
            offset += len(batch)
            entries = []
            for member, score in batch:
                event_id = await self._event_of(sk, member) if key != sk.events else member
                if event_id is None or event_id in seen:
                    continue
                seen.add(event_id)
                if after is None or (score, event_id) < after:
                    entries.append((score, event_id))
            rows, n = await self._summaries(sk, entries, f)
            read += len(batch) + n
            found += rows
            if len(batch) < BATCH or len(found) > limit:
                return found, None
            if f.idempotency_key is not None and offset >= KEY_LOOKUP:
                return found, None
            if read >= BUDGET:
                last = batch[-1]
                return found, (last[1], await self._event_of(sk, last[0]) or last[0])

    async def _event_of(self, sk: ShardKeys, member: str) -> str | None:
        """The event id of an index member: itself (an event id), or a delivery's event."""
        if member.startswith("evt_"):
            return member
        derived = ids.derived(member)
        if derived is not None and ids.is_delivery_of(member, derived[0], derived[1]):
            return derived[0]
        # a delivery moved from layout v2 names its event in its hash
        event_id = await self.redis.hget(sk.delivery(member), "event_id")
        return str(event_id) if event_id else None

    async def _summaries(
        self, sk: ShardKeys, entries: list[tuple[float, str]], f: EventFilter
    ) -> tuple[list[tuple[float, str, dict[str, Any]]], int]:
        """The events of ``entries`` that pass ``f``, summarised; and how many deliveries
        were read for them."""
        headers = await self._headers(sk, [e for _, e in entries])
        kept = []
        for score, event_id in entries:
            header = headers.get(event_id)
            if header is None:
                continue
            if f.app is not None and header.get("app") != f.app:
                continue
            if f.event_type is not None and not matching.matches(
                [f.event_type], header.get("type", "")
            ):
                continue
            kept.append((score, event_id, header))
        wanted = [d for _, e, h in kept for d, _ in eventrecord.deliveries(e, h)]
        rows = await self._rows(sk, wanted, headers=headers) if wanted else []
        by_event: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_event.setdefault(row["event_id"], []).append(row)
        out = []
        for score, event_id, header in kept:
            mine = by_event.get(event_id, [])
            if f.status is not None and not any(r["status"] == f.status for r in mine):
                continue
            if f.endpoint_id is not None and not any(
                r["endpoint_id"] == f.endpoint_id for r in mine
            ):
                continue
            out.append((score, event_id, summary(event_id, header, mine)))
        return out, len(wanted)


def summary(event_id: str, header: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """An event as ``GET /v1/events`` lists it (``created_at`` in ms; the API formats it)."""
    return {
        "id": event_id,
        "type": header["type"],
        "app": header["app"],
        "created_at": eventrecord.created(event_id, header),
        "idempotency_key": header.get("ik"),
        "delivery_count": len(header.get("d", ())),
        "status_counts": dict(Counter(r["status"] for r in rows)),
        "deliveries": [{k: r.get(k) for k in SUMMARY_FIELDS} for r in rows[:SHOWN]],
    }
