"""Reads of deliveries and events from either tier, as one: Redis first, then the archive.

Redis is read before PostgreSQL. The mover commits a batch to PostgreSQL before it
removes it from Redis, so a delivery moving while it is read is found in one tier or
both, never in neither; one found in both is shown once, as Redis has it (the live
copy: a replayed archived delivery is live in Redis while its earlier row stays).

Listings merge a page of each tier by (created, id), newest first, under one cursor;
each tier says up to where its page is complete, and the merged page stops at the
higher of those positions, so nothing is skipped and no id comes twice. Without an
archive (``RELAY_ARCHIVE_URL`` unset) every read is Redis's alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relay.archive.tables import Filters, Tables
from relay.domain import eventrecord
from relay.queue.store import Store, decode_cursor, encode_cursor

ARCHIVED = ("succeeded", "dead")  # the statuses a delivery has in the archive


class History:
    def __init__(self, store: Store, tables: Tables | None) -> None:
        self.store = store
        self.tables = tables

    @classmethod
    def of(cls, store: Store) -> History:
        """Reads over ``store`` and, when ``RELAY_ARCHIVE_URL`` is set, the archive."""
        s = store.settings
        return cls(store, Tables(s.archive_url, s.archive_schema) if s.archive_url else None)

    async def close(self) -> None:
        if self.tables is not None:
            await self.tables.close()

    async def get_delivery(self, delivery_id: str, with_log: bool = True) -> dict[str, Any] | None:
        found = await self.store.get_delivery(delivery_id, with_log=with_log)
        if found is not None or self.tables is None:
            return found
        archived = await self.tables.delivery(delivery_id)
        if archived is not None and not with_log:
            archived.pop("attempt_log", None)
        return archived

    async def get_event(self, event_id: str) -> dict[str, Any] | None:
        found = await self.store.get_event(event_id)
        if found is not None or self.tables is None:
            return found
        stored = await self.tables.event(event_id)
        return None if stored is None else eventrecord.view(event_id, stored)

    async def app_of(self, kind: str, ident: str) -> str | None:
        app = await self.store.app_of(kind, ident)
        if app is not None or self.tables is None or kind not in ("event", "delivery"):
            return app
        return await self.tables.app_of(kind, ident)

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
        """Newest first across both tiers; the same filters and cursor as
        :meth:`Store.list_deliveries`."""
        rows, hot_next = await self.store.list_deliveries(
            status=status,
            endpoint_id=endpoint_id,
            event_id=event_id,
            event_type=event_type,
            limit=limit,
            cursor=cursor,
            app=app,
        )
        if self.tables is None or (status is not None and status not in ARCHIVED):
            return rows, hot_next
        filters = Filters(
            status=status,
            endpoint_id=endpoint_id,
            event_id=event_id,
            event_type=event_type,
            app=app,
        )
        return await self.merge(rows, hot_next, filters, limit=limit, cursor=cursor)

    async def search(
        self, filters: Filters, *, limit: int, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Archived deliveries only (the search route): what ``filters`` selects."""
        if self.tables is None:
            return [], None
        after = decode_cursor(cursor) if cursor else None
        rows, last = await self.tables.page(filters, limit=limit, after=after)
        return rows, None if last is None else encode_cursor(*last)

    async def merge(
        self,
        hot: list[dict[str, Any]],
        hot_next: str | None,
        filters: Filters,
        *,
        limit: int,
        cursor: str | None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page from Redis's page ``hot`` (complete down to ``hot_next``) and the
        archive's (read after it)."""
        assert self.tables is not None
        after = decode_cursor(cursor) if cursor else None
        cold, cold_last = await self.tables.page(filters, limit=limit, after=after)
        return merged(hot, hot_next, cold, cold_last, limit=limit)

    async def archived_events(
        self, filters: Filters, *, limit: int, cursor: str | None
    ) -> tuple[list[tuple[str, bytes, list[dict[str, Any]]]], tuple[float, str] | None]:
        """A page of archived events (:meth:`Tables.event_page`) after ``cursor``."""
        assert self.tables is not None
        after = decode_cursor(cursor) if cursor else None
        return await self.tables.event_page(filters, limit=limit, after=after)

    async def restore(self, delivery_ids: list[str]) -> list[str]:
        """Bring archived deliveries that Redis does not hold back into Redis as they
        finished (for a replay); returns those restored. Their archive rows stay."""
        if self.tables is None or not delivery_ids:
            return []
        restored = []
        for record, finished_at in await self.tables.delivery_rows(delivery_ids):
            stored = await self.tables.event(record["event_id"])
            if await self.store.archive_restore(record, finished_at, stored):
                restored.append(record["id"])
        return restored

    async def replay(self, delivery_ids: list[str]) -> dict[str, str]:
        """``Store.replay`` over both tiers: an archived delivery comes back to Redis and
        is replayed there, live; the archive keeps its row (its earlier attempts)."""
        done = await self.store.replay(delivery_ids)
        missing = [d for d, v in done.items() if v == ""]
        if restored := await self.restore(missing):
            done.update(await self.store.replay(restored))
        return done

    async def replay_dead(
        self,
        *,
        endpoint_id: str | None = None,
        since: int | None = None,
        on_page: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """``Store.replay_dead`` (``recover``), then the archived dead letters the same
        way: ``(replayed, refused)``; ``on_page(n)`` reports progress."""
        replayed, refused = await self.store.replay_dead(
            endpoint_id=endpoint_id, since=since, on_page=on_page
        )
        if self.tables is None:
            return replayed, refused
        filters = Filters(status="dead", endpoint_id=endpoint_id, finished_since=since)
        after = None
        while True:
            page = await self.tables.scan(filters, after=after, limit=500)
            if not page:
                return replayed, refused
            done = await self.replay([p[0] for p in page])
            ok = sum(1 for v in done.values() if v == "ok")
            replayed, refused = replayed + ok, refused + len(page) - ok
            if on_page is not None:
                on_page(len(page))
            after = (page[-1][1], page[-1][0])

    async def stats(self) -> dict[str, Any]:
        """The Store's stats with the archive's deliveries counted in: ``counts`` over
        both tiers, and ``archived``: those in PostgreSQL by status."""
        out = await self.store.stats()
        if self.tables is None:
            return out
        archived = await self.tables.counts()
        for status in ARCHIVED:
            out["counts"][status] += archived.get(status, 0)
        out["archived"] = {s: archived.get(s, 0) for s in ARCHIVED}
        return out


def merged(
    hot: list[dict[str, Any]],
    hot_next: str | None,
    cold: list[dict[str, Any]],
    cold_last: tuple[float, str] | None,
    *,
    limit: int,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page from Redis's page ``hot`` (complete down to ``hot_next``) and the
    archive's ``cold`` (complete down to ``cold_last``), by (created, id) descending:
    an id in both comes once, as Redis has it (the live copy)."""
    bounds = [b for b in (decode_cursor(hot_next) if hot_next else None, cold_last) if b]
    bound = max(bounds) if bounds else None
    seen: dict[str, dict[str, Any]] = {}
    for r in [*hot, *cold]:
        seen.setdefault(r["id"], r)
    rows = sorted(seen.values(), key=_position, reverse=True)
    if bound is not None:
        rows = [r for r in rows if _position(r) >= bound]
    if len(rows) > limit:
        rows = rows[:limit]
        return rows, encode_cursor(*_position(rows[-1]))
    return rows, None if bound is None else encode_cursor(*bound)


def _position(row: dict[str, Any]) -> tuple[float, str]:
    return (float(row["created_at"]), str(row["id"]))
