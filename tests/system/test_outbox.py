"""The Postgres outbox connector against a real PostgreSQL (``pg_server``: initdb + postgres
on a free 127.0.0.1 port, started by the test session) and a real redis-server.

What is proved: a committed row becomes exactly one event, a rolled-back row never does;
replicas in parallel never publish one row twice (SKIP LOCKED: no duplicate is even
attempted); a connector SIGKILLed between "Redis acknowledged" and "row removed" leaves
the row, and the next publish of it is absorbed by the row's idempotency key; while
Redis is down rows wait and none is lost; a refused row goes to the dead table without
holding up the rows behind it, and can be replayed; 10,000 rows reach a receiver.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.types.json import Jsonb

from relay.cli import main as cli
from relay.connectors import outbox_admin, outbox_schema
from relay.connectors.outbox import OutboxConnector
from relay.delivery.worker import Worker
from relay.domain import eventrecord
from relay.domain.schema import endpoint_record
from relay.ops import metrics
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer
from relay.settings import Settings, SettingsError
from tests.helpers import Receiver, event_ids, make_settings, waiting
from tests.helpers.hostile import SLOW_FILTER, regex_filter


@dataclass
class Outbox:
    dsn: str
    table: str

    @property
    def ident(self) -> sql.Identifier:
        return outbox_schema.names(self.table).table

    async def insert(
        self, rows: Sequence[dict[str, Any]], *, commit: bool = True, columns: str = ""
    ) -> None:
        """Insert ``rows`` in one transaction, the way a backend would; roll back if not
        ``commit``."""
        async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
            async with conn.cursor() as cur:
                await cur.executemany(
                    sql.SQL(
                        "INSERT INTO {} (type, payload, app, endpoint_ids, idempotency_key)"
                        " VALUES (%s, %s, %s, %s, %s)"
                    ).format(self.ident),
                    [
                        (
                            r.get("type", "order.paid"),
                            Jsonb(r["payload"]),
                            r.get("app"),
                            r.get("endpoint_ids"),
                            r.get("idempotency_key"),
                        )
                        for r in rows
                    ],
                )
            if commit:
                await conn.commit()
            else:
                await conn.rollback()

    def waiting(self) -> int:
        return int(outbox_admin.stats(self.dsn, self.table)["waiting"])


@pytest.fixture
def outbox(pg_server: Any) -> Outbox:
    table = "ob_" + uuid.uuid4().hex[:8]
    outbox_admin.init(pg_server.dsn, table)
    outbox_admin.init(pg_server.dsn, table)  # --init is idempotent
    return Outbox(pg_server.dsn, table)


def rows(tag: str, n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"payload": {"row": f"{tag}-{i}"}, **extra} for i in range(n)]


async def add_endpoint(store: Store, url: str) -> dict[str, Any]:
    ep = endpoint_record(url=url, app="default")
    await store.put_endpoint(ep)
    return ep


async def event_rows(store: Store) -> collections.Counter[str]:
    """How many events carry each row marker (an event per row: every count is 1)."""
    seen: collections.Counter[str] = collections.Counter()
    for n in range(store.settings.shards):
        sk = store.keys.shard(n)
        kept = await event_ids(store, n)
        pipe = store.redis.pipeline(transaction=False)
        for e in kept:
            pipe.get(sk.event(e))
        for raw in await pipe.execute():
            seen[eventrecord.payload(raw)["row"]] += 1
    return seen


until = partial(waiting.until, within=15.0)


@asynccontextmanager
async def connectors(stores: Sequence[Store]) -> AsyncIterator[list[OutboxConnector]]:
    stop = asyncio.Event()
    running = [OutboxConnector(s, s.settings) for s in stores]
    tasks = [asyncio.create_task(c.run(stop)) for c in running]
    try:
        yield running
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)


def outbox_settings(ob: Outbox, **extra: Any) -> dict[str, Any]:
    return {"outbox_dsn": ob.dsn, "outbox_table": ob.table, **extra}


def outbox_env(ob: Outbox, store: Store, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        RELAY_REDIS_URL=store.settings.redis_url,
        RELAY_KEY_PREFIX=store.settings.key_prefix,
        RELAY_OUTBOX_DSN=ob.dsn,
        RELAY_OUTBOX_TABLE=ob.table,
        RELAY_LOG_LEVEL="warning",
        **extra,
    )
    return env


# --- settings, schema, CLI ------------------------------------------------------------


def test_table_name_is_an_identifier_and_the_password_is_redacted() -> None:
    for bad in ("x; DROP TABLE users", 'a"b', "a.b.c", "1abc", "", "a-b", "x" * 59):
        with pytest.raises((SettingsError, ValueError)):
            Settings.from_env({"RELAY_OUTBOX_TABLE": bad or " x y"})
        with pytest.raises(ValueError):
            outbox_schema.names(bad)
    s = Settings.from_env(
        {
            "RELAY_OUTBOX_TABLE": "shop.relay_outbox",
            "RELAY_OUTBOX_DSN": "postgresql://app:s3cret@127.0.0.1:5433/shop",
            "RELAY_OUTBOX_BATCH": "50",
            "RELAY_OUTBOX_POLL_INTERVAL": "500ms",
        }
    )
    assert (s.outbox_table, s.outbox_batch, s.outbox_poll_interval) == (
        "shop.relay_outbox",
        50,
        0.5,
    )
    assert "s3cret" not in repr(s) and "app:***@127.0.0.1:5433" in repr(s)
    kv = Settings(outbox_dsn="host=127.0.0.1 password='p w' dbname=shop")
    assert "p w" not in repr(kv) and "password=***" in repr(kv)
    n = outbox_schema.names("shop.relay_outbox")
    text = outbox_schema.ddl_text(n)
    assert 'CREATE TABLE IF NOT EXISTS "shop"."relay_outbox" (' in text
    assert '"shop"."relay_outbox_dead"' in text and "pg_notify('shop.relay_outbox'" in text
    assert n.idempotency_key(7) == "outbox:shop.relay_outbox:7"


def test_the_outbox_guide_shows_the_ddl_print_schema_prints() -> None:
    guide = Path(__file__).resolve().parents[2] / "docs" / "guides" / "outbox.md"
    assert outbox_schema.ddl_text(outbox_schema.names("relay_outbox")) in guide.read_text()


def test_cli_prints_the_schema_and_shows_stats(outbox: Outbox) -> None:
    runner = CliRunner()
    got = runner.invoke(cli, ["outbox", "--print-schema"], env={"RELAY_OUTBOX_TABLE": "my_box"})
    assert got.exit_code == 0 and 'CREATE TABLE IF NOT EXISTS "my_box"' in got.output
    assert "CREATE TRIGGER" in got.output
    got = runner.invoke(cli, ["outbox"], env={"RELAY_OUTBOX_DSN": ""})
    assert got.exit_code == 2 and "RELAY_OUTBOX_DSN" in got.output
    fresh = {"RELAY_OUTBOX_DSN": outbox.dsn, "RELAY_OUTBOX_TABLE": "cli_" + uuid.uuid4().hex[:8]}
    assert runner.invoke(cli, ["outbox", "--init"], env=fresh).exit_code == 0
    assert runner.invoke(cli, ["outbox", "--init"], env=fresh).exit_code == 0
    env = {"RELAY_OUTBOX_DSN": outbox.dsn, "RELAY_OUTBOX_TABLE": outbox.table}
    got = runner.invoke(cli, ["outbox", "--stats", "--json"], env=env)
    assert got.exit_code == 0, got.output
    assert orjson.loads(got.output)["waiting"] == 0


def test_relay_stats_shows_the_outbox_backlog(outbox: Outbox, redis_server: Any) -> None:
    """``relay stats`` reads the backlog when RELAY_OUTBOX_DSN is set (no connector runs)."""
    with psycopg.connect(outbox.dsn) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} (type, payload) VALUES (%s, %s), (%s, %s)").format(
                outbox.ident
            ),
            ["order.paid", Jsonb({}), "a", Jsonb(1)],
        )
    env = {
        "RELAY_REDIS_URL": redis_server.url,
        "RELAY_KEY_PREFIX": "st" + uuid.uuid4().hex[:8],
        "RELAY_OUTBOX_DSN": outbox.dsn,
        "RELAY_OUTBOX_TABLE": outbox.table,
    }
    got = CliRunner().invoke(cli, ["stats", "--json"], env=env)
    assert got.exit_code == 0, got.output
    backlog = orjson.loads(got.output)["outbox"]
    assert backlog["waiting"] == 2 and backlog["dead"] == 0 and backlog["table"] == outbox.table
    got = CliRunner().invoke(cli, ["stats"], env=env)
    assert got.exit_code == 0 and "outbox rows waiting" in got.output
    # without the setting, no outbox section (and no database is dialled)
    del env["RELAY_OUTBOX_DSN"]
    got = CliRunner().invoke(cli, ["stats", "--json"], env=env)
    assert got.exit_code == 0 and "outbox" not in orjson.loads(got.output)


# --- the guarantee ----------------------------------------------------------------------


async def test_committed_rows_publish_within_ms_rolled_back_never(
    outbox: Outbox, make_store: Any, receiver: Receiver
) -> None:
    # a poll interval this long means only LISTEN/NOTIFY can explain a fast publish
    store = await make_store(**outbox_settings(outbox, outbox_poll_interval=60.0))
    await add_endpoint(store, receiver.url + "/hook")
    async with connectors([store]) as (con,):
        await asyncio.sleep(0.2)  # listening
        await outbox.insert(rows("rolled", 3), commit=False)
        started = time.monotonic()
        await outbox.insert(rows("kept", 1))
        await until(lambda: _has(store, "kept-0"), within=5)
        latency = time.monotonic() - started
        # a transaction still open: its row is invisible to the connector until COMMIT
        async with await psycopg.AsyncConnection.connect(outbox.dsn) as conn:
            await conn.execute(
                sql.SQL("INSERT INTO {} (type, payload) VALUES (%s, %s)").format(outbox.ident),
                ["order.paid", Jsonb({"row": "late-0"})],
            )
            await asyncio.sleep(0.3)
            assert "late-0" not in await event_rows(store)
            await conn.commit()
        await until(lambda: _has(store, "late-0"), within=5)
        await con.refresh_gauges(force=True)
    assert latency < 0.5, f"commit to event took {latency:.3f}s"
    assert await event_rows(store) == {"kept-0": 1, "late-0": 1}
    assert outbox.waiting() == 0 and (con.tally.created, con.tally.duplicates) == (2, 0)
    assert metrics.OUTBOX_BACKLOG._value.get() == 0
    exposed = metrics.generate_latest(metrics.REGISTRY).decode()
    for name in ("relay_outbox_backlog", "relay_outbox_oldest_age_seconds"):
        assert name in exposed
    assert 'relay_outbox_published_total{outcome="created"}' in exposed


async def _has(store: Store, marker: str) -> bool:
    return marker in await event_rows(store)


async def test_the_sweep_catches_rows_no_notification_announced(
    outbox: Outbox, make_store: Any
) -> None:
    store = await make_store(**outbox_settings(outbox, outbox_poll_interval=0.3))
    await add_endpoint(store, "http://127.0.0.1:9/never")
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:  # no NOTIFY any more
        n = outbox_schema.names(outbox.table)
        conn.execute(sql.SQL("DROP TRIGGER {} ON {}").format(n.trigger, n.table))
    async with connectors([store]):
        await asyncio.sleep(0.2)
        await outbox.insert(rows("quiet", 3))
        await until(lambda: _count(store, 3), within=3)


async def test_connections_killed_under_the_connector_are_reopened(
    outbox: Outbox, make_store: Any
) -> None:
    store = await make_store(**outbox_settings(outbox, outbox_poll_interval=0.3))
    await add_endpoint(store, "http://127.0.0.1:9/never")
    async with connectors([store]) as (con,):
        await outbox.insert(rows("a", 5))
        await until(lambda: _count(store, 5))
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'relay-outbox'"
            ).fetchall()
        assert len(killed) == 2  # the claiming and the listening connection
        await outbox.insert(rows("b", 5))
        await until(lambda: _count(store, 10))
    seen = await event_rows(store)
    assert len(seen) == 10 and set(seen.values()) == {1} and outbox.waiting() == 0
    assert con.tally.errors >= 1  # it noticed, and went on


@pytest.mark.parametrize("replicas", [2, 3])
async def test_replicas_in_parallel_publish_each_row_once(
    outbox: Outbox, make_store: Any, replicas: int
) -> None:
    stores = [
        await make_store(**outbox_settings(outbox, outbox_batch=25, outbox_poll_interval=0.2))
        for _ in range(replicas)
    ]
    await add_endpoint(stores[0], "http://127.0.0.1:9/never")  # nobody delivers here

    async def writer(w: int) -> None:
        for t in range(25):
            await outbox.insert(rows(f"w{w}t{t}", 20), commit=t % 5 != 4)

    async with connectors(stores) as running:
        await asyncio.gather(*(writer(w) for w in range(4)))
        committed = 4 * 20 * 20
        await until(lambda: _count(stores[0], committed), within=20)
        await asyncio.sleep(0.3)  # anything extra would show up now
    seen = await event_rows(stores[0])
    assert len(seen) == committed and set(seen.values()) == {1}
    assert not any(m.split("-")[0].endswith(("t4", "t9", "t14", "t19", "t24")) for m in seen)
    assert outbox.waiting() == 0
    # SKIP LOCKED: no replica ever published a row another one held (no duplicate tried)
    assert sum(c.tally.duplicates for c in running) == 0
    assert sum(c.tally.created for c in running) == committed
    assert all(c.tally.created > 0 for c in running), [c.tally for c in running]


async def _count(store: Store, n: int) -> bool:
    return sum((await event_rows(store)).values()) >= n


async def test_a_row_another_replica_holds_is_skipped_not_waited_on(
    outbox: Outbox, make_store: Any
) -> None:
    store = await make_store(**outbox_settings(outbox))
    await add_endpoint(store, "http://127.0.0.1:9/never")
    await outbox.insert(rows("s", 5))
    names = outbox_schema.names(outbox.table)
    con = OutboxConnector(store, store.settings)
    async with await psycopg.AsyncConnection.connect(outbox.dsn) as other:
        held = await (await other.execute(outbox_schema.claim(names), [1])).fetchall()
        # plain FOR UPDATE would wait here for the other replica's transaction
        taken, settled = await asyncio.wait_for(con.batch(), 3)
        assert (taken, settled) == (4, True)
        await other.rollback()  # that replica died: its row is free again
    assert await con.batch() == (1, True)
    seen = await event_rows(store)
    assert len(seen) == 5 and set(seen.values()) == {1} and f"s-{held[0][0] - 1}" in seen
    await con._drop_connection()


async def test_sigkill_between_published_and_removed_is_absorbed(
    outbox: Outbox, make_store: Any
) -> None:
    store = await make_store(**outbox_settings(outbox))
    await add_endpoint(store, "http://127.0.0.1:9/never")
    await outbox.insert(rows("k", 40))
    # the test hook: exit 86 once the 5th event is acknowledged, before any row is removed
    env = outbox_env(outbox, store, RELAY_OUTBOX_BATCH="10", RELAY_TEST_OUTBOX_CRASH_AFTER="5")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "relay", "outbox", env=env)
    assert await asyncio.wait_for(proc.wait(), 30) == 86
    published = await event_rows(store)
    assert 5 <= len(published) <= 10 and outbox.waiting() == 40  # the batch rolled back
    # a fresh connector process takes the same rows again; SIGTERM stops it cleanly
    env = outbox_env(outbox, store, RELAY_OUTBOX_BATCH="10")
    proc2 = await asyncio.create_subprocess_exec(sys.executable, "-m", "relay", "outbox", env=env)
    try:
        await until(lambda: _waiting_is(outbox, 0), within=15)
    finally:
        proc2.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc2.wait(), 10) == 0
    seen = await event_rows(store)
    assert len(seen) == 40 and set(seen.values()) == {1}, "a row became two events"


async def _waiting_is(ob: Outbox, n: int) -> bool:
    return await asyncio.to_thread(ob.waiting) == n


async def test_redis_down_rows_wait_none_lost(
    outbox: Outbox, tmp_path: Any, make_store: Any
) -> None:
    server = RedisServer(data_dir=tmp_path, appendonly=True, appendfsync="always")
    server.start()
    settings = make_settings(
        redis_url=server.url, **outbox_settings(outbox, outbox_poll_interval=0.2)
    )
    store = Store(connect(settings), settings)
    await store.start()
    try:
        await add_endpoint(store, "http://127.0.0.1:9/never")
        async with connectors([store]) as (con,):
            await outbox.insert(rows("before", 10))
            await until(lambda: _count(store, 10))
            server.stop()
            await outbox.insert(rows("during", 30))
            await asyncio.sleep(1.0)
            assert outbox.waiting() == 30 and con.tally.errors > 0
            server.start()  # same port, same append-only file
            await until(lambda: _waiting_is(outbox, 0), within=15)
        seen = await event_rows(store)
        assert len(seen) == 40 and set(seen.values()) == {1}
    finally:
        await store.close()
        server.stop()


async def test_poison_rows_go_dead_without_blocking_and_replay(
    outbox: Outbox, make_store: Any
) -> None:
    store = await make_store(**outbox_settings(outbox, max_payload_bytes=1000))
    await add_endpoint(store, "http://127.0.0.1:9/never")
    await outbox.insert(
        [
            {"payload": {"row": "ok-0"}},
            {"type": "not a type!", "payload": {"row": "bad-type"}},
            {"payload": {"row": "too-big", "pad": "x" * 2000}},
            {"payload": {"row": "no-endpoint"}, "endpoint_ids": ["ep_missing"]},
            {"payload": {"row": "bad-app"}, "app": ""},
            {"payload": {"row": "ok-1"}},
        ]
    )
    async with connectors([store]) as (con,):
        await until(lambda: _waiting_is(outbox, 0))
    assert set(await event_rows(store)) == {"ok-0", "ok-1"}
    stats = outbox_admin.stats(outbox.dsn, outbox.table)
    errors = [r["error"] for r in stats["dead_rows"]]
    assert stats["dead"] == 4 and con.tally.dead == 4
    assert any(e.startswith("invalid row: type:") for e in errors)
    assert any(e.startswith("invalid row: app:") for e in errors)
    assert any("payload_too_large" in e for e in errors)
    assert any("unknown_endpoint" in e and "ep_missing" in e for e in errors)
    # after the fix (here: a higher limit), the dead rows go back and are published;
    # the still-invalid ones simply die again
    store2 = await make_store(**outbox_settings(outbox, max_payload_bytes=10_000))
    too_big = next(r["id"] for r in stats["dead_rows"] if "payload_too_large" in r["error"])
    runner = CliRunner()
    env = {"RELAY_OUTBOX_DSN": outbox.dsn, "RELAY_OUTBOX_TABLE": outbox.table}
    got = runner.invoke(cli, ["outbox", "--replay-dead", str(too_big), "--json"], env=env)
    assert got.exit_code == 0 and orjson.loads(got.output) == {"replayed": [too_big]}
    assert outbox_admin.replay_dead(outbox.dsn, outbox.table) != []  # all the others
    async with connectors([store2]):
        await until(lambda: _has(store2, "too-big"))
        await until(lambda: _waiting_is(outbox, 0))
    assert outbox_admin.stats(outbox.dsn, outbox.table)["dead"] == 3
    assert (await event_rows(store))["too-big"] == 1


async def test_a_row_for_the_ops_app_goes_dead_and_reaches_no_one(
    outbox: Outbox, make_store: Any, receiver: Receiver
) -> None:
    """The ops app (``relay-ops``) takes relay's own operational events only: a row
    naming it is refused like any invalid row. Seen failing: the row was published and
    its forged ``endpoint.failing`` delivered, validly signed, to the ops endpoint."""
    store = await make_store(**outbox_settings(outbox))
    ops = endpoint_record(url=receiver.url + "/ops", app="relay-ops", event_types=["*"])
    await store.put_endpoint(ops)
    await add_endpoint(store, receiver.url + "/hook")
    forged = {"endpoint_id": "ep_victim", "failures": 5, "row": "forged"}
    await outbox.insert(
        [
            {"type": "endpoint.failing", "payload": forged, "app": "relay-ops"},
            {"payload": {"row": "ok"}},
        ]
    )
    async with connectors([store]) as (con,):
        await until(lambda: _waiting_is(outbox, 0))
    await Worker(store, store.settings).run(asyncio.Event(), burst=True)
    assert set(await event_rows(store)) == {"ok"}
    assert [r.path for r in receiver.requests] == ["/hook"]
    stats = outbox_admin.stats(outbox.dsn, outbox.table)
    assert stats["dead"] == 1 and con.tally.dead == 1
    (dead,) = stats["dead_rows"]
    assert dead["error"].startswith("app_reserved: ") and "relay-ops" in dead["error"]


@pytest.mark.parametrize("n", [1_000, pytest.param(10_000, marks=pytest.mark.long)])
async def test_thousands_of_rows_reach_the_receiver(
    outbox: Outbox, make_store: Any, receiver: Receiver, n: int
) -> None:
    store = await make_store(
        **outbox_settings(outbox, outbox_batch=500), worker_concurrency=128, claim_batch=256
    )
    await add_endpoint(store, receiver.url + "/hook")
    for chunk in range(10):
        await outbox.insert(rows(f"c{chunk}", n // 10))
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(store, store.settings).run(stop))
    started = time.monotonic()
    try:
        async with connectors([store]) as (con,):
            await receiver.wait_for(n, within=40)
            elapsed = time.monotonic() - started
    finally:
        stop.set()
        await worker
    await asyncio.sleep(0.2)
    markers = collections.Counter(orjson.loads(r.body)["data"]["row"] for r in receiver.requests)
    assert len(markers) == n and set(markers.values()) == {1}
    assert len({r.headers["webhook-id"] for r in receiver.requests}) == n
    assert outbox.waiting() == 0 and con.tally.created == n
    print(f"{n:,} rows outbox -> receiver in {elapsed:.1f}s")


# --- hostile filters: rows complete, and no batch outlives its transaction -------------
# Seen failing before the sandbox: the connector evaluated filters inline, so the run's
# regex filter (stored before the write check existed) held each of its rows for ~22 s
# and the rows were still waiting at the deadline; a batch of four rows with the slow
# filter took ~26 s (Postgres ends a transaction idle for 60 s, after which the batch's
# rows are taken again: the loop the adversarial run saw).


async def add_filtered(
    store: Store, app: str, text: str | None, types: list[str] | None = None
) -> str:
    """An endpoint written straight to the store: a filter stored before the write checks
    that refuse it now behaves as it would."""
    ep = endpoint_record(url="http://127.0.0.1:9/x", app=app, event_types=types or ["*"])
    ep["filter"] = text
    await store.put_endpoint(ep)
    return str(ep["id"])


async def events_by_app(store: Store) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for event_id in await event_ids(store):
        event = await store.get_event(event_id)
        assert event is not None
        found.setdefault(event["app"], []).append(event)
    return found


async def test_rows_of_an_app_with_hostile_filters_complete(
    outbox: Outbox, make_store: Any
) -> None:
    store = await make_store(**outbox_settings(outbox, outbox_poll_interval=0.2))
    slow = await add_filtered(store, "H", SLOW_FILTER, ["order.*"])
    stored = await add_filtered(store, "H", regex_filter(100), ["invoice.*"])
    plain = await add_filtered(store, "H", None)
    other = await add_filtered(store, "B", "payload.n >= 0")
    await outbox.insert(
        [
            {"type": "order.paid", "app": "H", "payload": {"n": 1}},
            {"type": "order.paid", "app": "B", "payload": {"n": 2}},
            {"type": "invoice.paid", "app": "H", "payload": {"n": 3}},
            {"type": "order.paid", "app": "H", "payload": {"n": 4}},
        ]
    )
    async with connectors([store]) as (con,):
        await until(lambda: _waiting_is(outbox, 0), within=20)
    assert (con.tally.created, con.tally.dead) == (4, 0)
    events = await events_by_app(store)
    assert [d["endpoint_id"] for d in events["B"][0]["deliveries"]] == [other]
    assert len(events["H"]) == 3
    for event in events["H"]:
        assert [d["endpoint_id"] for d in event["deliveries"]] == [plain]
        (left_out,) = event["filtered"]
        if event["type"] == "order.paid":
            assert left_out["endpoint_id"] == slow
            assert left_out["reason"].startswith("filter exceeded its time budget (1 s")
        else:
            assert left_out["endpoint_id"] == stored
            assert "too large for RE2" in left_out["reason"]


async def test_a_batch_stops_publishing_at_its_time(outbox: Outbox, make_store: Any) -> None:
    store = await make_store(**outbox_settings(outbox))
    await add_filtered(store, "H", SLOW_FILTER)
    await add_filtered(store, "H", None)
    await outbox.insert([{"type": "order.paid", "app": "H", "payload": {"n": n}} for n in range(4)])
    con = OutboxConnector(store, store.settings)
    con.batch_seconds = 2.0  # BATCH_SECONDS is 20 s: a third of the idle transaction timeout
    try:
        taken, settled = await asyncio.wait_for(con.batch(), 10)
        # H's rows take a second each (its filter's budget), one after the other: the
        # four of them outlast the batch's time, which leaves the last ones for later
        assert (taken, settled) == (4, True) and con.left_late >= 1, con.left_late
        assert outbox.waiting() == con.left_late
        while outbox.waiting():
            await asyncio.wait_for(con.batch(), 10)
    finally:
        await con.close()
    assert con.tally.dead == 0 and con.tally.created + con.tally.duplicates == 4
    (events,) = (await events_by_app(store)).values()
    assert sorted(e["payload"]["n"] for e in events) == [0, 1, 2, 3]  # one event per row
