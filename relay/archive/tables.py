"""Reads and writes of the archive's tables (relay/archive/schema.py), over a small pool
of psycopg connections.

A batch is written in one transaction under its shard's advisory lock: the rows of its
deliveries are deleted and written again (``COPY``), its events inserted with ``ON
CONFLICT DO NOTHING``; a batch written twice leaves one row per delivery and per event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg

from relay.archive import schema
from relay.archive.schema import day_of, q
from relay.domain import eventrecord

CONNECT_TIMEOUT = 5  # seconds to reach PostgreSQL before a read or a move gives up
STATEMENT_TIMEOUT_MS = 30_000


class ArchiveUnavailable(Exception):
    """PostgreSQL did not answer: the archive cannot be read or written now."""


def _json(value: Any) -> str:
    """JSON text for a ``jsonb`` column: PostgreSQL refuses the NUL character in it."""
    text = orjson.dumps(value).decode()
    return text.replace("\\u0000", "\\ufffd")


@dataclass
class Filters:
    """What a listing or a search of archived deliveries selects."""

    status: str | None = None
    endpoint_id: str | None = None
    event_id: str | None = None
    event_type: str | None = None  # exact, or a prefix pattern ``order.*``
    app: str | None = None
    since: int | None = None  # created at or after (ms)
    until: int | None = None  # created before (ms)
    status_code: int | None = None
    finished_since: int | None = None  # finished at or after (ms)
    payload: Any = None  # the event's payload contains this (``@>``)
    idempotency_key: str | None = None  # events only (:meth:`Tables.event_page`)

    def where(self) -> tuple[str, list[Any]]:
        sql, args = [], []
        for column, value in (
            ("status", self.status),
            ("endpoint_id", self.endpoint_id),
            ("event_id", self.event_id),
            ("app", self.app),
            ("status_code", self.status_code),
        ):
            if value is not None:
                sql.append(f"{column} = %s")
                args.append(value)
        if self.event_type is not None:
            if self.event_type.endswith("*"):
                prefix = self.event_type[:-1]
                sql.append("left(type, %s) = %s")
                args += [len(prefix), prefix]
            elif self.event_type != "*":
                sql.append("type = %s")
                args.append(self.event_type)
        if self.since is not None:
            sql.append("created_at >= %s")
            args.append(self.since)
        if self.until is not None:
            sql.append("created_at < %s")
            args.append(self.until)
        if self.finished_since is not None:
            sql.append("finished_at >= %s")
            args.append(self.finished_since)
        if self.payload is not None:
            sql.append("event_id IN (SELECT e.id FROM {s}.events e WHERE e.payload @> %s::jsonb)")
            args.append(_json(self.payload))
        return " AND ".join(sql) or "true", args


class Tables:
    """The archive in one PostgreSQL schema, through up to ``size`` connections."""

    def __init__(self, dsn: str, schema_name: str, *, size: int = 4) -> None:
        self.dsn = dsn
        self.schema = schema_name
        self.size = size
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._slots = asyncio.Semaphore(size)
        self._days: set[tuple[str, int]] = set()  # partitions known to exist

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self.dsn,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT,
            options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
        )

    @contextlib.asynccontextmanager
    async def conn(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of the pool; one that failed is closed, not given back."""
        async with self._slots:
            try:
                c = self._idle.pop() if self._idle else await self._connect()
            except psycopg.Error as exc:
                raise ArchiveUnavailable(str(exc)) from exc
            try:
                yield c
            except psycopg.Error as exc:
                await c.close()
                if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
                    raise ArchiveUnavailable(str(exc)) from exc
                raise
            except BaseException:
                await c.close()
                raise
            if c.closed or c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                await c.close()
            else:
                self._idle.append(c)

    async def close(self) -> None:
        while self._idle:
            await self._idle.pop().close()

    async def migrate(self) -> int:
        async with self.conn() as c:
            return await schema.migrate(c, self.schema)

    # writes

    async def write(
        self, shard: int, rows: Sequence[tuple[dict[str, Any], int]], events: dict[str, bytes]
    ) -> None:
        """One batch of a shard: ``rows`` of (delivery record with its attempt log, finish
        time ms), and the stored form of their events."""
        wanted = {(f"deliveries_{r['status']}", day_of(at)) for r, at in rows}
        made = [(e, eventrecord.header_of(v), v) for e, v in events.items()]
        created = {e: eventrecord.created(e, h) for e, h, _ in made}
        wanted |= {("events", day_of(c)) for c in created.values()}
        async with self.conn() as c:
            if wanted - self._days:
                await schema.ensure_partitions(c, self.schema, wanted - self._days)
                self._days |= wanted
            async with c.transaction():
                lock = schema.lock_id(self.schema, str(shard))
                await c.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
                await c.execute(
                    q(self.schema, "DELETE FROM {s}.deliveries WHERE id = ANY(%s)"),
                    ([r["id"] for r, _ in rows],),
                )
                async with c.cursor().copy(
                    q(
                        self.schema,
                        "COPY {s}.deliveries (id, status, finished_at, created_at, event_id,"
                        " endpoint_id, app, type, status_code, record, attempt_log) FROM STDIN",
                    )
                ) as copy:
                    for r, at in rows:
                        record = {k: v for k, v in r.items() if k != "attempt_log"}
                        await copy.write_row(
                            (
                                r["id"],
                                r["status"],
                                at,
                                r["created_at"],
                                r["event_id"],
                                r.get("endpoint_id") or "",
                                r.get("app") or "",
                                r.get("type") or "",
                                r.get("last_status_code"),
                                _json(record),
                                _json(r.get("attempt_log", [])),
                            )
                        )
                if made:
                    await c.execute(
                        q(
                            self.schema,
                            "INSERT INTO {s}.events (id, created_at, app, type, stored, payload,"
                            " idempotency_key) SELECT * FROM unnest(%s::text[], %s::bigint[],"
                            " %s::text[], %s::text[], %s::bytea[], %s::jsonb[], %s::text[])"
                            " ON CONFLICT DO NOTHING",
                        ),
                        (
                            [e for e, _, _ in made],
                            [created[e] for e, _, _ in made],
                            [h.get("app", "") for _, h, _ in made],
                            [h.get("type", "") for _, h, _ in made],
                            [v for _, _, v in made],
                            [_payload(v) for _, _, v in made],
                            [h.get("ik") for _, h, _ in made],
                        ),
                    )

    async def drop_expired(self, cutoffs: dict[str, int]) -> list[str]:
        async with self.conn() as c:
            dropped = await schema.drop_expired(c, self.schema, cutoffs)
        self._days = {d for d in self._days if schema.partition_name(*d) not in dropped}
        return dropped

    # reads

    async def delivery(self, delivery_id: str) -> dict[str, Any] | None:
        async with self.conn() as c:
            cur = await c.execute(
                q(self.schema, "SELECT record, attempt_log FROM {s}.deliveries WHERE id = %s"),
                (delivery_id,),
            )
            row = await cur.fetchone()
        if row is None:
            return None
        return {**row[0], "attempt_log": row[1]}

    async def event(self, event_id: str) -> bytes | None:
        """The stored form of an archived event (relay/domain/eventrecord.py)."""
        async with self.conn() as c:
            cur = await c.execute(
                q(self.schema, "SELECT stored FROM {s}.events WHERE id = %s LIMIT 1"),
                (event_id,),
            )
            row = await cur.fetchone()
        return None if row is None else bytes(row[0])

    async def app_of(self, kind: str, ident: str) -> str | None:
        table, column = ("events", "id") if kind == "event" else ("deliveries", "id")
        async with self.conn() as c:
            cur = await c.execute(
                q(self.schema, f"SELECT app FROM {{s}}.{table} WHERE {column} = %s LIMIT 1"),
                (ident,),
            )
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def page(
        self, filters: Filters, *, limit: int, after: tuple[float, str] | None
    ) -> tuple[list[dict[str, Any]], tuple[float, str] | None]:
        """Up to ``limit`` records newest first (by created, then id) before ``after``,
        and the position of the last one when more follow."""
        where, args = filters.where()
        if after is not None:
            where += " AND (created_at, id) < (%s, %s)"
            args += [int(after[0]), after[1]]
        sql = (
            f"SELECT record FROM {{s}}.deliveries WHERE {where}"
            " ORDER BY created_at DESC, id DESC LIMIT %s"
        )
        async with self.conn() as c:
            cur = await c.execute(q(self.schema, sql), [*args, limit + 1])
            rows = [r[0] for r in await cur.fetchall()]
        if len(rows) > limit:
            rows = rows[:limit]
            return rows, (rows[-1]["created_at"], rows[-1]["id"])
        return rows, None

    async def event_page(
        self, filters: Filters, *, limit: int, after: tuple[float, str] | None
    ) -> tuple[list[tuple[str, bytes, list[dict[str, Any]]]], tuple[float, str] | None]:
        """Up to ``limit`` archived events newest first (by created, then id) before
        ``after``: (id, stored form, its archived delivery records); and the position of
        the last one when more follow. ``status`` and ``endpoint_id`` select events with
        an archived delivery of that status, and one to that endpoint."""
        sql: list[str] = ["true"]
        args: list[Any] = []
        for column, text in (("app", filters.app), ("idempotency_key", filters.idempotency_key)):
            if text is not None:
                sql.append(f"e.{column} = %s")
                args.append(text)
        if filters.event_type is not None and filters.event_type.endswith("*"):
            prefix = filters.event_type[:-1]
            sql.append("left(e.type, %s) = %s")
            args += [len(prefix), prefix]
        elif filters.event_type is not None:
            sql.append("e.type = %s")
            args.append(filters.event_type)
        for op, at in ((">=", filters.since), ("<", filters.until)):
            if at is not None:
                sql.append(f"e.created_at {op} %s")
                args.append(at)
        for column, text in (("status", filters.status), ("endpoint_id", filters.endpoint_id)):
            if text is not None:
                sql.append(
                    f"EXISTS (SELECT 1 FROM {{s}}.deliveries d WHERE d.event_id = e.id"
                    f" AND d.{column} = %s)"
                )
                args.append(text)
        if filters.payload is not None:
            sql.append("e.payload @> %s::jsonb")
            args.append(_json(filters.payload))
        if after is not None:
            sql.append("(e.created_at, e.id) < (%s, %s)")
            args += [int(after[0]), after[1]]
        async with self.conn() as c:
            cur = await c.execute(
                q(
                    self.schema,
                    f"SELECT e.id, e.created_at, e.stored FROM {{s}}.events e"
                    f" WHERE {' AND '.join(sql)} ORDER BY e.created_at DESC, e.id DESC LIMIT %s",
                ),
                [*args, limit + 1],
            )
            found = [(str(i), int(at), bytes(v)) for i, at, v in await cur.fetchall()]
            last = None
            if len(found) > limit:
                found = found[:limit]
                last = (float(found[-1][1]), found[-1][0])
            cur = await c.execute(
                q(
                    self.schema,
                    "SELECT event_id, record FROM {s}.deliveries WHERE event_id = ANY(%s)"
                    " ORDER BY id",
                ),
                ([i for i, _, _ in found],),
            )
            rows: dict[str, list[dict[str, Any]]] = {}
            for event_id, record in await cur.fetchall():
                rows.setdefault(event_id, []).append(record)
        return [(i, v, rows.get(i, [])) for i, _, v in found], last

    async def delivery_rows(self, delivery_ids: Sequence[str]) -> list[tuple[dict[str, Any], int]]:
        """Archived deliveries with their attempt logs, and when each finished (ms)."""
        async with self.conn() as c:
            cur = await c.execute(
                q(
                    self.schema,
                    "SELECT record, attempt_log, finished_at FROM {s}.deliveries"
                    " WHERE id = ANY(%s)",
                ),
                (list(delivery_ids),),
            )
            return [({**r, "attempt_log": log}, int(at)) for r, log, at in await cur.fetchall()]

    async def scan(
        self, filters: Filters, *, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[str, int, str, str, str]]:
        """Up to ``limit`` archived deliveries oldest first (by created, then id) after
        ``after``: (id, created, status, type, endpoint id), for a replay job's walk."""
        where, args = filters.where()
        if after is not None:
            where += " AND (created_at, id) > (%s, %s)"
            args += [after[0], after[1]]
        sql = (
            "SELECT id, created_at, status, type, endpoint_id FROM {s}.deliveries"
            f" WHERE {where} ORDER BY created_at, id LIMIT %s"
        )
        async with self.conn() as c:
            cur = await c.execute(q(self.schema, sql), [*args, limit])
            return [(i, int(c_), s, t, e) for i, c_, s, t, e in await cur.fetchall()]

    async def counts(self) -> dict[str, int]:
        """Archived deliveries by status."""
        async with self.conn() as c:
            cur = await c.execute(
                q(self.schema, "SELECT status, count(*) FROM {s}.deliveries GROUP BY status")
            )
            return {str(s): int(n) for s, n in await cur.fetchall()}


def _payload(stored: bytes) -> str | None:
    """The event's payload as JSON text for its ``jsonb`` column; None when it is not
    JSON PostgreSQL takes (a body stored whole by an older layout, say)."""
    try:
        return _json(eventrecord.payload(stored))
    except Exception:
        return None
