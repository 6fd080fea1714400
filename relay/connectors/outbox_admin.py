"""Operator actions on an outbox: apply the DDL, read the backlog, list and replay dead rows.

Short synchronous sessions (the ``relay outbox`` options), each one transaction.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from relay.connectors import outbox_schema as q


def _connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, row_factory=dict_row, application_name="relay-outbox-admin")


def init(dsn: str, table: str) -> None:
    """Create the outbox, its dead table, function and trigger (idempotent)."""
    with _connect(dsn) as conn:
        conn.execute(q.ddl(q.names(table)))


def stats(dsn: str, table: str, *, dead_limit: int = 20) -> dict[str, Any]:
    n = q.names(table)
    with _connect(dsn) as conn:
        row = conn.execute(q.backlog(n)).fetchone()
        assert row is not None
        waiting, oldest, dead = row["waiting"], row["oldest"], row["dead"]
        dead_rows = conn.execute(q.list_dead(n), [dead_limit]).fetchall()
    return {
        "table": table,
        "waiting": waiting,
        "oldest_age_seconds": round(oldest or 0.0, 3),
        "dead": dead,
        "dead_rows": [
            {
                **r,
                "created_at": r["created_at"].isoformat(),
                "failed_at": r["failed_at"].isoformat(),
            }
            for r in dead_rows
        ],
    }


def replay_dead(dsn: str, table: str, ids: list[int] | None = None) -> list[int]:
    """Dead rows (``ids``, or all when None) back into the outbox; the ids moved."""
    with _connect(dsn) as conn:
        rows = conn.execute(
            q.replay_dead(q.names(table)), {"all": ids is None, "ids": ids or []}
        ).fetchall()
    return sorted(r["id"] for r in rows)
