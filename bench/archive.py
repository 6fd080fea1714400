"""The history archive's costs: Redis memory per archived delivery, PostgreSQL bytes per
delivery (1 KiB payloads), archive throughput against the workers' delivery rate, and the
latency of the archive's list and search reads at --rows archived deliveries.

A private redis-server and PostgreSQL; a local receiver; figures printed and written as
JSON (bench/results/archive.json). The delivery rate is measured in the same process, just
before the move, as the baseline of the throughput ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]


from relay.archive.tables import Filters, Tables  # noqa: E402
from relay.delivery.worker import Worker  # noqa: E402
from relay.domain import ids, signing  # noqa: E402
from relay.domain.schema import endpoint_record  # noqa: E402
from relay.ops.archiving import Mover  # noqa: E402
from relay.queue.store import Store, connect  # noqa: E402
from relay.redisproc import RedisServer, free_port  # noqa: E402
from relay.settings import Settings  # noqa: E402
from tests.helpers.pg import PgServer, pg_bindir  # noqa: E402

FAR = 10**13
PAYLOAD = orjson.dumps({"customer_id": 42, "blob": "x" * 990})  # 1 KiB


def p99(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))]


async def data_memory(store: Store) -> int:
    info = await store.redis.info("memory")
    vm = info.get("used_memory_vm_eval", info.get("used_memory_lua", 0))
    return int(info["used_memory"]) - int(vm) - int(info.get("mem_clients_normal", 0))


async def receiver() -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/{t:.*}", lambda r: web.Response(text="ok"))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def move_round(store: Store, tables: Tables, n: int) -> dict[str, Any]:
    runner, url = await receiver()
    ep = endpoint_record(url=url + "/ok", app="default")
    await store.put_endpoint(ep)
    base = await data_memory(store)
    for start in range(0, n, 200):

        async def one(i: int) -> None:
            now = int(time.time() * 1000)
            e = ids.new_event_id(0, now)
            await store.publish(
                shard=0, event_id=e, event_type="order.paid", app="default",
                body=signing.build_body(e, "order.paid", now, PAYLOAD), created_ms=now,
                deliveries=[(ids.delivery_id(e, 0), ep["id"])], idempotency=None,
            )  # fmt: skip

        await asyncio.gather(*(one(i) for i in range(start, min(n, start + 200))))
    t0 = time.perf_counter()
    await Worker(store, store.settings).run(asyncio.Event(), burst=True)
    deliver = time.perf_counter() - t0
    mover = Mover(store, tables)
    t0 = time.perf_counter()
    moved = await mover.once(now_ms=FAR)
    move = time.perf_counter() - t0
    left = await data_memory(store)
    await runner.cleanup()
    async with tables.conn() as c:
        cur = await c.execute(
            """SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
               JOIN pg_namespace s ON s.oid = c.relnamespace
               WHERE s.nspname = %s AND c.relkind = 'r'""",
            (tables.schema,),
        )
        row = await cur.fetchone()
    pg_bytes = int(row[0]) if row else 0
    return {
        "deliveries": moved,
        "redis_bytes_per_archived": round((left - base) / max(moved, 1), 1),
        "pg_bytes_per_delivery": round(pg_bytes / max(moved, 1)),
        "delivery_rate": round(n / deliver),
        "archive_rate": round(moved / move),
        "archive_vs_delivery": round((moved / move) / (n / deliver), 2),
    }


GENERATE = """
INSERT INTO {s}.deliveries (id, status, finished_at, created_at, event_id, endpoint_id, app,
    type, status_code, record, attempt_log)
SELECT 'dlv_' || lpad(g::text, 26, '0'), CASE WHEN g %% 10 = 0 THEN 'dead' ELSE 'succeeded' END,
    %(t0)s + g, %(t0)s + g, 'evt_' || lpad(g::text, 26, '0'), 'ep_' || (g %% 100), 'default',
    'order.paid', CASE WHEN g %% 10 = 0 THEN 500 ELSE 200 END,
    jsonb_build_object('id', 'dlv_' || lpad(g::text, 26, '0'), 'created_at', %(t0)s + g,
        'status', 'succeeded', 'attempts', 1),
    '[]'::jsonb
FROM generate_series(1, %(rows)s) g;
INSERT INTO {s}.events (id, created_at, app, type, stored, payload)
SELECT 'evt_' || lpad(g::text, 26, '0'), %(t0)s + g, 'default', 'order.paid', '\\x00',
    jsonb_build_object('customer_id', g %% 1000)
FROM generate_series(1, %(rows)s) g;
ANALYZE {s}.deliveries;
ANALYZE {s}.events;
"""


async def reads(tables: Tables, rows: int, samples: int) -> dict[str, float]:
    from relay.archive import schema

    t0 = int(time.time() * 1000) - rows - 60_000
    days = {(p, schema.day_of(t0 + d)) for p in schema.PARENTS for d in (0, rows)}
    async with tables.conn() as c:
        await schema.ensure_partitions(c, tables.schema, days)
        await c.execute("SET statement_timeout = 0")  # a million rows take longer than 30 s
        for statement in GENERATE.split(";")[:-1]:
            await c.execute(schema.q(tables.schema, statement), {"t0": t0, "rows": rows})
    kinds = {
        "by_endpoint": lambda i: Filters(endpoint_id=f"ep_{i % 100}"),
        "by_status": lambda i: Filters(status="dead"),
        "by_time_range": lambda i: Filters(since=t0 + i * 100, until=t0 + i * 100 + 50_000),
        "search_payload": lambda i: Filters(payload={"customer_id": i % 1000}),
    }
    out = {}
    for name, make in kinds.items():
        took = []
        for i in range(samples):
            s = time.perf_counter()
            await tables.page(make(i), limit=100, after=None)
            took.append((time.perf_counter() - s) * 1000)
        out[f"{name}_p99_ms"] = round(p99(took), 2)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    bindir = pg_bindir()
    if bindir is None:
        sys.exit("no PostgreSQL binaries (initdb, postgres): apt-get install postgresql")
    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer(data_dir=Path(tmp), appendonly=False)
        redis.start()
        pg = PgServer(bindir)
        pg.start()
        try:
            settings = Settings(
                redis_url=redis.url, archive_url=pg.dsn, allow_private_networks=True,
                worker_concurrency=64, archive_batch=1000, api_tokens=("bench",),
            )  # fmt: skip
            store = Store(connect(settings), settings)
            await store.start()
            tables = Tables(pg.dsn, "bench_move")
            await tables.migrate()
            result = {"move": await move_round(store, tables, args.deliveries)}
            await tables.close()
            big = Tables(pg.dsn, "bench_reads")
            await big.migrate()
            result["reads"] = {"rows": args.rows, **await reads(big, args.rows, args.samples)}
            await big.close()
            await store.close()
            return result
        finally:
            pg.stop()
            redis.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--deliveries", type=int, default=20_000)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--json", default=str(ROOT / "bench" / "results" / "archive.json"))
    args = p.parse_args()
    result = asyncio.run(run(args))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
