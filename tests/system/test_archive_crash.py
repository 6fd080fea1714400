"""The history archive with ``relay worker`` processes: Redis memory per moved delivery, a
worker SIGKILLed while it moves, PostgreSQL stopped while events are published, and the
operational event ``archive.behind`` of a backlog past its alert threshold.

Each test runs real worker processes (RELAY_HOT_RETENTION=2s) against the session's Redis
and a private PostgreSQL, and reads through an in-process API with the archive on."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson

from relay.ops import metrics
from tests.helpers.api import call
from tests.helpers.archive import archive_overrides, list_all, tables_of
from tests.helpers.ordering_kit import start_workers, stop_workers, until, worker_env
from tests.helpers.pg import PgServer, pg_bindir
from tests.helpers.worker import add_endpoint, publish

CRASH_ROUND = 3000


def env_of(store: Any, redis_url: str) -> dict[str, str]:
    s = store.settings
    return worker_env(
        store,
        redis_url,
        RELAY_ARCHIVE_URL=s.archive_url,
        RELAY_ARCHIVE_SCHEMA=s.archive_schema,
        RELAY_HOT_RETENTION="2s",
        RELAY_ARCHIVE_INTERVAL="100ms",
        RELAY_ARCHIVE_BATCH="200",
        RELAY_WORKER_CONCURRENCY="64",
        # A killed worker's holds (its shard while it moves, the deliveries it sends) run
        # out in seconds, so the next worker takes over without waiting the default 30 s.
        RELAY_ARCHIVE_LEASE="2s",
        RELAY_LEASE_SECONDS="3s",
    )


async def publish_many(store: Any, endpoint_id: str, count: int) -> list[str]:
    made: list[str] = []
    for start in range(0, count, 100):
        batch = await asyncio.gather(
            *(
                publish(store, endpoint_id, payload={"n": start + i, "blob": "x" * 64})
                for i in range(min(100, count - start))
            )
        )
        made += [d for _, ds in batch for d in ds]
    return made


async def moved(store: Any, tables: Any, total: int) -> bool:
    """Every one of ``total`` deliveries archived and none finished left in Redis."""
    counts = await tables.counts()
    left = await store.finished_before(store.keys.shard(0), 10**13, 1)
    return sum(counts.values()) >= total and not left


async def test_moved_deliveries_leave_a_few_bytes_of_redis_each(
    make_store: Any, make_api: Any, receiver: Any, pg_server: Any, redis_server: Any, tmp_path: Path
) -> None:
    store = await make_store(**archive_overrides(pg_server))
    tables = tables_of(store)
    await tables.migrate()
    ep = await add_endpoint(store, receiver.url + "/ok")
    base = await data_memory(store)
    delivery_ids = await publish_many(store, ep["id"], 3030)
    workers = await start_workers(env_of(store, redis_server.url), 1, tmp_path)
    try:
        await until(lambda: moved(store, tables, 3030))
    finally:
        await stop_workers(workers)
    used = await data_memory(store)
    per_delivery = (used - base) / 3030
    assert per_delivery <= 150, per_delivery
    api = await make_api(store)
    for d in random.Random(3).sample(delivery_ids, 20):
        status, row = await call(api, "GET", f"/v1/deliveries/{d}")
        assert status == 200 and row["status"] == "succeeded"
    await tables.close()


async def test_a_worker_killed_twice_while_moving_loses_and_duplicates_nothing(
    make_store: Any, make_api: Any, receiver: Any, pg_server: Any, redis_server: Any, tmp_path: Path
) -> None:
    store = await make_store(**archive_overrides(pg_server))
    tables = tables_of(store)
    await tables.migrate()
    ep = await add_endpoint(store, receiver.url + "/ok")
    env = env_of(store, redis_server.url)
    first = await publish_many(store, ep["id"], CRASH_ROUND)
    workers = await start_workers(env, 1, tmp_path, "calm")
    try:
        await until(lambda: moved(store, tables, CRASH_ROUND))
    finally:
        await stop_workers(workers)
    second = await publish_many(store, ep["id"], CRASH_ROUND)
    workers = await start_workers({**env, "RELAY_ARCHIVE_BATCH": "50"}, 1, tmp_path, "kill")
    chance = random.Random(11)
    for kill in range(2):
        before = sum((await tables.counts()).values())
        await until(lambda b=before: archived_past(tables, b))  # moves are under way
        await asyncio.sleep(chance.uniform(0, 0.3))  # anywhere in a batch: read, write, drop
        workers[0].send_signal(signal.SIGKILL)
        await workers[0].wait()
        workers = await start_workers(env, 1, tmp_path, f"after-{kill}")
    try:
        await until(lambda: moved(store, tables, 2 * CRASH_ROUND))
    finally:
        await stop_workers(workers)
    api = await make_api(store)
    listed = [r["id"] for r in await list_all(api, limit=500)]
    assert len(listed) == 2 * CRASH_ROUND
    assert sorted(listed) == sorted(first + second)  # each once, none missing
    assert sum((await tables.counts()).values()) == 2 * CRASH_ROUND
    await tables.close()


async def data_memory(store: Any) -> int:
    """The bytes Redis's keys hold (``MEMORY USAGE`` of each, summed): the data a moved
    delivery leaves. ``used_memory`` also counts the keyspace's hash table, which Redis
    shrinks on its own schedule after a mass delete, and the Lua VM's garbage, so it reads
    from about 0 to over 200 B a delivery for the same data."""
    total = 0
    async for key in store.redis.scan_iter(count=1000):
        total += int(await store.redis.memory_usage(key, samples=0) or 0)
    return total


async def archived_past(tables: Any, count: int) -> bool:
    return sum((await tables.counts()).values()) > count


@contextlib.asynccontextmanager
async def paused_archive(make_store: Any) -> AsyncIterator[tuple[PgServer, Any, Any]]:
    """A PostgreSQL of the test's own (the test stops it), a store archiving into it, and
    its tables, migrated; the server is paused when the test starts."""
    bindir = pg_bindir()
    assert bindir is not None
    pg = PgServer(bindir)
    pg.start()
    try:
        store = await make_store(**archive_overrides(pg))
        tables = tables_of(store)
        await tables.migrate()
        await tables.close()
        pg.pause()
        yield pg, store, tables
    finally:
        pg.stop()


async def test_postgresql_stopped_blocks_nothing_and_the_backlog_moves_later(
    make_store: Any, make_api: Any, receiver: Any, redis_server: Any, tmp_path: Path
) -> None:
    async with paused_archive(make_store) as (pg, store, tables):
        api = await make_api(store)
        await add_endpoint(store, receiver.url + "/ok")
        for n in range(500):
            status, _ = await call(
                api, "POST", "/v1/events", json={"type": "t.x", "payload": {"n": n}}
            )
            assert status == 201
        workers = await start_workers(env_of(store, redis_server.url), 1, tmp_path)
        try:
            await receiver.wait_for(500, within=120)

            async def behind() -> bool:
                backlog, _ = await metrics.archive_behind(store)
                return backlog == 500

            await until(behind)  # finished, past the hot retention, waiting in Redis
            status, _ = await call(api, "GET", "/readyz")
            assert status == 200  # publishing does not need PostgreSQL
            assert len(await list_all(api, path="/v1/deliveries", status="pending")) == 0
            pg.start_again()
            await until(lambda: moved(store, tables, 500))
        finally:
            await stop_workers(workers)
        assert await tables.counts() == {"succeeded": 500}
        assert len(await list_all(api, limit=500)) == 500
        await tables.close()


async def test_a_backlog_past_its_alert_publishes_archive_behind_to_the_ops_app(
    make_store: Any, receiver: Any, redis_server: Any, tmp_path: Path
) -> None:
    """PostgreSQL stopped, 120 deliveries finish and wait in Redis past
    RELAY_ARCHIVE_BACKLOG_ALERT=100: the worker publishes one ``archive.behind`` into the
    ops app, delivered to its endpoint there, with the backlog and the threshold."""
    async with paused_archive(make_store) as (_pg, store, _tables):
        ops = await add_endpoint(
            store, receiver.url + "/ops", app=store.settings.ops_app, event_types=["archive.*"]
        )
        ep = await add_endpoint(store, receiver.url + "/ok")
        await publish_many(store, ep["id"], 120)
        env = {**env_of(store, redis_server.url), "RELAY_ARCHIVE_BACKLOG_ALERT": "100"}
        workers = await start_workers(env, 1, tmp_path)
        try:
            await receiver.wait_for(1, within=60, path="/ops")
        finally:
            await stop_workers(workers)
        (got,) = receiver.for_path("/ops")  # one report for the hour, not one per pass
        body = orjson.loads(got.body)
        assert body["type"] == "archive.behind", body
        assert body["data"]["backlog"] >= 100 and body["data"]["threshold"] == 100, body
        assert ops["app"] == store.settings.ops_app
