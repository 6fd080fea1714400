"""The archive's tables, created and migrated by relay under an advisory lock.

Tables live in the schema ``RELAY_ARCHIVE_SCHEMA`` and are partitioned by day, so
retention drops whole partitions instead of deleting rows:

* ``deliveries``: one row per finished delivery (its record as the API shows it, its
  attempt log, and the columns the reads filter on), partitioned by status
  (``succeeded``, ``dead``) and then by the day it finished; ``RELAY_RETENTION`` and
  ``RELAY_DEAD_RETENTION`` bound each;
* ``events``: one row per event (the stored form Redis held, byte for byte, its
  payload as ``jsonb`` for containment searches, its ``Idempotency-Key``), partitioned
  by the day it was created, kept as long as the longer of the two retentions.

Partitions are made when a batch needs them (:func:`ensure_partitions`) and dropped by
:func:`drop_expired`, both under the schema's advisory lock.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Iterable
from typing import Any

import psycopg

DAY_MS = 86_400_000

# Each migration runs once, in order, in one transaction; the version table says how far.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {s}.events (
        id text NOT NULL,
        created_at bigint NOT NULL,
        app text NOT NULL,
        type text NOT NULL,
        stored bytea NOT NULL,
        payload jsonb,
        PRIMARY KEY (id, created_at)
    ) PARTITION BY RANGE (created_at);
    CREATE INDEX ON {s}.events USING gin (payload jsonb_path_ops);
    CREATE TABLE {s}.deliveries (
        id text NOT NULL,
        status text NOT NULL,
        finished_at bigint NOT NULL,
        created_at bigint NOT NULL,
        event_id text NOT NULL,
        endpoint_id text NOT NULL,
        app text NOT NULL,
        type text NOT NULL,
        status_code integer,
        record jsonb NOT NULL,
        attempt_log jsonb NOT NULL
    ) PARTITION BY LIST (status);
    CREATE TABLE {s}.deliveries_succeeded PARTITION OF {s}.deliveries
        FOR VALUES IN ('succeeded') PARTITION BY RANGE (finished_at);
    CREATE TABLE {s}.deliveries_dead PARTITION OF {s}.deliveries
        FOR VALUES IN ('dead') PARTITION BY RANGE (finished_at);
    CREATE INDEX ON {s}.deliveries (id);
    CREATE INDEX ON {s}.deliveries (event_id);
    CREATE INDEX ON {s}.deliveries (created_at DESC, id DESC);
    CREATE INDEX ON {s}.deliveries (endpoint_id, created_at DESC, id DESC);
    CREATE INDEX ON {s}.deliveries (app, created_at DESC, id DESC);
    """,
    """
    ALTER TABLE {s}.events ADD COLUMN idempotency_key text;
    CREATE INDEX ON {s}.events (created_at DESC, id DESC);
    CREATE INDEX ON {s}.events (app, created_at DESC, id DESC);
    CREATE INDEX ON {s}.events (idempotency_key) WHERE idempotency_key IS NOT NULL;
    """,
)

# Partitioned parents and the retention that bounds their partitions' rows.
PARENTS = ("deliveries_succeeded", "deliveries_dead", "events")


def lock_id(schema: str, part: str = "") -> int:
    """The advisory lock key of the schema (or of one part of it: a shard's writes)."""
    return zlib.crc32(f"relay-archive:{schema}:{part}".encode()) - 2**31


def q(schema: str, sql: str) -> str:
    """``sql`` with ``{s}`` as the quoted schema (a plain identifier, checked by settings)."""
    return sql.replace("{s}", f'"{schema}"')


async def migrate(conn: psycopg.AsyncConnection[Any], schema: str) -> int:
    """Create or migrate the archive schema; returns the version it is at. Replicas
    starting together wait on the advisory lock, and find the work done."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id(schema),))
        await conn.execute(q(schema, "CREATE SCHEMA IF NOT EXISTS {s}"))
        await conn.execute(
            q(schema, "CREATE TABLE IF NOT EXISTS {s}.archive_version (version integer)")
        )
        cur = await conn.execute(q(schema, "SELECT version FROM {s}.archive_version"))
        row = await cur.fetchone()
        version = 0 if row is None else int(row[0])
        for sql in MIGRATIONS[version:]:
            await conn.execute(q(schema, sql))
        if row is None:
            await conn.execute(
                q(schema, "INSERT INTO {s}.archive_version VALUES (%s)"), (len(MIGRATIONS),)
            )
        else:
            await conn.execute(
                q(schema, "UPDATE {s}.archive_version SET version = %s"), (len(MIGRATIONS),)
            )
    return len(MIGRATIONS)


def day_of(ms: int) -> int:
    """The day (ms at its start, UTC) that holds ``ms``."""
    return ms - ms % DAY_MS


def partition_name(parent: str, day_ms: int) -> str:
    return f"{parent}_p{dt.datetime.fromtimestamp(day_ms / 1000, dt.UTC):%Y%m%d}"


def _day_from_name(name: str) -> int | None:
    try:
        day = dt.datetime.strptime(name.rsplit("_p", 1)[1], "%Y%m%d").replace(tzinfo=dt.UTC)
    except (IndexError, ValueError):
        return None
    return int(day.timestamp() * 1000)


async def ensure_partitions(
    conn: psycopg.AsyncConnection[Any], schema: str, wanted: Iterable[tuple[str, int]]
) -> None:
    """Create the day partitions ``(parent, day_ms)`` that do not exist yet."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id(schema),))
        for parent, day in sorted(set(wanted)):
            await conn.execute(
                q(
                    schema,
                    f"CREATE TABLE IF NOT EXISTS {{s}}.{partition_name(parent, day)} "
                    f"PARTITION OF {{s}}.{parent} FOR VALUES FROM ({day}) TO ({day + DAY_MS})",
                )
            )


async def partitions(conn: psycopg.AsyncConnection[Any], schema: str) -> dict[str, list[int]]:
    """Each partitioned parent's day partitions (their days, ms)."""
    cur = await conn.execute(
        """SELECT p.relname, c.relname FROM pg_inherits i
           JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
           JOIN pg_namespace n ON n.oid = p.relnamespace
           WHERE n.nspname = %s AND p.relname = ANY(%s)""",
        (schema, list(PARENTS)),
    )
    out: dict[str, list[int]] = {p: [] for p in PARENTS}
    for parent, name in await cur.fetchall():
        day = _day_from_name(name)
        if day is not None:
            out[parent].append(day)
    return out


async def drop_expired(
    conn: psycopg.AsyncConnection[Any], schema: str, cutoffs: dict[str, int]
) -> list[str]:
    """Drop every day partition that ends at or before its parent's cutoff (ms):
    all of its rows are past their retention. Returns the partitions dropped."""
    dropped = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id(schema),))
        for parent, days in (await partitions(conn, schema)).items():
            for day in days:
                if day + DAY_MS <= cutoffs[parent]:
                    name = partition_name(parent, day)
                    await conn.execute(q(schema, f"DROP TABLE IF EXISTS {{s}}.{name}"))
                    dropped.append(name)
    return dropped
