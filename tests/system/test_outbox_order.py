"""Ordered from the outbox: the rows of one ordering key reach an ``ordering: key``
endpoint in row order, whatever the connector replicas do.

Real processes against a real redis-server and a private PostgreSQL: three ``relay
outbox`` replicas taking small batches: two started with the test hook that exits right
after Redis acknowledged their Nth event, mid-batch, before its row is removed, and the
third SIGKILLed after each quarter of the rows is written, each replaced when it is gone; two
``relay worker`` processes; a receiver on 127.0.0.1. A writer commits rows of 6 keys,
interleaved, in transactions of 1-4 rows of one key; the receiver answers 0-20 ms late.
Every row must arrive once, and each key's rows in the order they were written.

Fails without the claim's rule (``outbox_schema.claim``: a keyed row only once no earlier
row of its key is left): replicas and concurrent publishes in a batch turn a key's rows
into events out of row order, and its lane delivers them in that order.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg
from aiohttp import web
from psycopg import sql
from psycopg.types.json import Jsonb

from relay.connectors import outbox_admin, outbox_schema
from relay.connectors.outbox import OutboxConnector
from relay.domain.schema import EventIn, endpoint_record
from relay.publishing import Publisher
from relay.queue.store import Store
from tests.helpers import event_ids

ROOT = Path(__file__).resolve().parents[2]
TABLE = "ordered_outbox"
KEYS, PER_KEY = 6, 20


def spawn(kind: str, store: Store, dsn: str, logs: Path, **extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env |= {
        "RELAY_REDIS_URL": store.settings.redis_url,
        "RELAY_KEY_PREFIX": store.settings.key_prefix,
        "RELAY_OUTBOX_DSN": dsn,
        "RELAY_OUTBOX_TABLE": TABLE,
        "RELAY_OUTBOX_BATCH": "4",
        "RELAY_OUTBOX_POLL_INTERVAL": "200ms",
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_LEASE_SECONDS": "2",
        "RELAY_RETRY_SCHEDULE": "200ms,200ms,500ms,1s",
        "RELAY_RETRY_JITTER": "0",
        "RELAY_LOG_LEVEL": "warning",
        **extra,
    }
    with (logs / f"{kind}-{time.monotonic_ns()}.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "relay", kind], env=env, stdout=log, stderr=subprocess.STDOUT,
            cwd=ROOT,
        )  # fmt: skip


async def write_rows(
    dsn: str, rng: random.Random, kill: Callable[[], None]
) -> list[tuple[str, int]]:
    """Commit every key's rows in small transactions of 1-4 consecutive rows of one key,
    keys interleaved, over several seconds, calling ``kill`` after each quarter of them;
    (key, seq) in row order."""
    left = {f"k{k}": 0 for k in range(KEYS)}
    insert = sql.SQL("INSERT INTO {} (type, payload, ordering_key) VALUES (%s, %s, %s)")
    table = outbox_schema.names(TABLE).table
    written: list[tuple[str, int]] = []
    quarters = [KEYS * PER_KEY * q // 4 for q in (1, 2, 3)]
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        while left:
            key = rng.choice(sorted(left))
            first = left[key]
            rows = [(key, s) for s in range(first, min(first + rng.randint(1, 4), PER_KEY))]
            left[key] = rows[-1][1] + 1
            if left[key] == PER_KEY:
                del left[key]
            async with conn.cursor() as cur:
                await cur.executemany(
                    insert.format(table),
                    [("order.updated", Jsonb({"key": k, "seq": s}), k) for k, s in rows],
                )
            await conn.commit()
            written += rows
            if quarters and len(written) >= quarters[0]:
                quarters.pop(0)
                kill()
            await asyncio.sleep(rng.uniform(0.1, 0.25))  # connectors publish meanwhile
    return written


async def answer_late(request: Any) -> Any:
    """Each delivery answered 0-20 ms late: sends of one worker overlap."""
    await asyncio.sleep(random.uniform(0, 0.02))
    return web.Response(text="ok")


async def test_outbox_rows_of_a_key_arrive_in_row_order_with_replicas_killed(
    make_store: Any, pg_server: Any, receiver: Any, tmp_path: Path
) -> None:
    rng = random.Random(20261204)
    store = await make_store()
    receiver.responses["/hook"] = answer_late
    outbox_admin.init(pg_server.dsn, TABLE)
    await store.put_endpoint(endpoint_record(url=receiver.url + "/hook", ordering="key"))
    dsn = pg_server.dsn
    procs = [spawn("worker", store, dsn, tmp_path) for _ in range(2)]

    def hooked() -> subprocess.Popen[bytes]:  # exits mid-batch after its Nth event
        return spawn(
            "outbox", store, dsn, tmp_path, RELAY_TEST_OUTBOX_CRASH_AFTER=str(rng.randint(5, 15))
        )

    connectors = [hooked(), hooked(), spawn("outbox", store, dsn, tmp_path)]
    kills, hook_exits, writing = 0, 0, True

    def kill() -> None:
        nonlocal kills
        connectors[2].kill()
        connectors[2].wait()
        kills += 1
        connectors[2] = spawn("outbox", store, dsn, tmp_path)

    async def replace_exited() -> None:
        nonlocal hook_exits
        while writing:
            await asyncio.sleep(0.2)
            for i in (0, 1):
                if connectors[i].poll() is not None:
                    assert connectors[i].returncode == 86, connectors[i].returncode
                    hook_exits += 1
                    connectors[i] = spawn("outbox", store, dsn, tmp_path)

    try:
        replacing = asyncio.create_task(replace_exited())
        written = await write_rows(dsn, rng, kill)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = {r.headers["webhook-id"] for r in receiver.for_path("/hook")}
            if len(got) >= len(written):
                break
            await asyncio.sleep(0.1)
        writing = False
        await replacing
    finally:
        for p in procs + connectors:
            p.kill()
            p.wait()

    arrivals: dict[str, list[int]] = {}
    seen: set[str] = set()
    for r in receiver.for_path("/hook"):
        if r.headers["webhook-id"] in seen:  # a resend after a worker died: at least once
            continue
        seen.add(r.headers["webhook-id"])
        data = orjson.loads(r.body)["data"]
        arrivals.setdefault(data["key"], []).append(data["seq"])
    assert outbox_admin.stats(dsn, TABLE)["dead"] == 0
    assert sorted((k, s) for k, seqs in arrivals.items() for s in seqs) == sorted(written)
    out_of_order = {k: seqs for k, seqs in arrivals.items() if seqs != sorted(seqs)}
    assert not out_of_order, out_of_order
    assert kills == 3 and hook_exits >= 1, (kills, hook_exits)


async def test_a_row_published_before_the_upgrade_without_its_key_is_not_refused(
    make_store: Any, pg_server: Any
) -> None:
    table = "ob_up_" + uuid.uuid4().hex[:8]
    store = await make_store(outbox_dsn=pg_server.dsn, outbox_table=table)
    outbox_admin.init(pg_server.dsn, table)
    await store.put_endpoint(endpoint_record(url="http://127.0.0.1:9/h", ordering="key"))
    names = outbox_schema.names(table)
    async with await psycopg.AsyncConnection.connect(pg_server.dsn) as conn:
        cur = await conn.execute(
            sql.SQL(
                "INSERT INTO {} (type, payload, ordering_key) VALUES (%s, %s, %s) RETURNING id"
            ).format(names.table),
            ("order.updated", Jsonb({"seq": 1}), "order-7"),
        )
        row = await cur.fetchone()
        assert row is not None
        await conn.commit()
    # a connector that left ordering_key out published the row, then died before removing it
    first = await Publisher(store).publish(
        EventIn(type="order.updated", payload={"seq": 1}),
        idempotency_key=names.idempotency_key(row[0]),
    )
    connector = OutboxConnector(store, store.settings)
    try:
        assert await connector.batch() == (1, True)
    finally:
        await connector.close()
    assert (connector.tally.duplicates, connector.tally.dead) == (1, 0)
    assert outbox_admin.stats(pg_server.dsn, table)["waiting"] == 0
    assert await event_ids(store) == [first.answer["id"]]
