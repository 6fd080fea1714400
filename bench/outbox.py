"""``make bench``, the outbox part: rows/s through one ``relay outbox`` connector, and
commit-to-receipt latency (a backend's COMMIT to the webhook arriving at a receiver).

On 127.0.0.1: a fresh redis-server (no append-only file, like the rest of the bench), a
private PostgreSQL (``tests/helpers/pg.py``; fsync off: this measures the connector, not the
disk), one ``relay outbox`` process, one ``relay worker`` process for the latency part,
and a receiver in this process (so commit and receipt are read on one clock).

1. throughput: ``--rows`` rows committed first, then one connector (batch 500) is
   started; rows/s = rows / time until the table is empty (every row's event and its
   one delivery acknowledged by Redis; the worker sends them afterwards);
2. latency: one-row transactions committed at ``--rate`` per second for ``--seconds``,
   a connector and a worker running; p50/p99/max of COMMIT returned -> POST received.

    python bench/outbox.py [--rows 20000] [--rate 200] [--seconds 5]

Writes ``bench/results/outbox.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import psycopg
from aiohttp import web
from psycopg import sql
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from relay.connectors import outbox_admin, outbox_schema  # noqa: E402
from relay.domain.schema import endpoint_record  # noqa: E402
from relay.queue.store import Store, connect  # noqa: E402
from relay.redisproc import RedisServer, free_port  # noqa: E402
from relay.settings import Settings  # noqa: E402
from tests.helpers.pg import PgServer, pg_bindir  # noqa: E402

TABLE = "bench_outbox"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dir = Path(tempfile.mkdtemp(prefix="relay-bench-outbox-"))
        self.redis = RedisServer(data_dir=self.dir, appendonly=False)
        bindir = pg_bindir()
        if bindir is None:
            sys.exit("no PostgreSQL binaries (initdb, postgres): apt-get install postgresql")
        self.pg = PgServer(bindir)
        self.received: dict[str, float] = {}
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, kind: str, **extra: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env.update(
            RELAY_REDIS_URL=self.redis.url,
            RELAY_KEY_PREFIX="bench",
            RELAY_OUTBOX_DSN=self.pg.dsn,
            RELAY_OUTBOX_TABLE=TABLE,
            RELAY_ALLOW_PRIVATE_NETWORKS="1",
            RELAY_LOG_LEVEL="warning",
            **extra,
        )
        with (self.dir / f"{kind}.log").open("ab") as log:
            p = subprocess.Popen(
                [sys.executable, "-m", "relay", kind], env=env, stdout=log, stderr=log, cwd=ROOT
            )
        self.procs.append(p)
        return p

    def stop(self, p: subprocess.Popen[bytes]) -> None:
        p.terminate()
        p.wait(30)
        self.procs.remove(p)

    async def receive(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.received.setdefault(body["data"]["row"], time.monotonic())
        return web.Response(text="ok")

    async def throughput(self, insert: sql.Composable) -> dict[str, Any]:
        n = self.args.rows
        async with await psycopg.AsyncConnection.connect(self.pg.dsn) as conn:
            for start in range(0, n, 1000):
                async with conn.cursor() as cur:
                    await cur.executemany(
                        insert,
                        [("bench.tp", Jsonb({"row": f"t{i}"})) for i in range(start, start + 1000)],
                    )
                await conn.commit()
        began = time.monotonic()
        con = self.spawn("outbox", RELAY_OUTBOX_BATCH="500")
        while outbox_admin.stats(self.pg.dsn, TABLE)["waiting"] > 0:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        seconds = time.monotonic() - began  # includes the connector's start (~0.5 s)
        self.stop(con)
        return {"rows": n, "seconds": round(seconds, 2), "rows_per_s": round(n / seconds)}

    async def latency(self, insert: sql.Composable) -> dict[str, Any]:
        con = self.spawn("outbox", RELAY_OUTBOX_BATCH="100")
        worker = self.spawn("worker")
        await asyncio.sleep(1.5)  # both started and listening
        deadline = time.monotonic() + 120  # the throughput part's deliveries go out first
        while len(self.received) < self.args.rows and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        committed: dict[str, float] = {}
        total = int(self.args.rate * self.args.seconds)
        async with await psycopg.AsyncConnection.connect(self.pg.dsn) as conn:
            began = time.monotonic()
            for i in range(total):
                await conn.execute(insert, ("bench.lat", Jsonb({"row": f"l{i}"})))
                await conn.commit()
                committed[f"l{i}"] = time.monotonic()
                await asyncio.sleep(max(0.0, began + (i + 1) / self.args.rate - time.monotonic()))
        deadline = time.monotonic() + 30
        while any(m not in self.received for m in committed) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        self.stop(con)
        self.stop(worker)
        ms = [(self.received[m] - t) * 1000 for m, t in committed.items() if m in self.received]
        return {
            "rows": total,
            "received": len(ms),
            "rate_per_s": self.args.rate,
            "p50_ms": round(statistics.median(ms), 1),
            "p99_ms": round(pct(ms, 99), 1),
            "max_ms": round(max(ms), 1),
        }

    async def run(self) -> dict[str, Any]:
        self.redis.start()
        self.pg.start()
        app = web.Application()
        app.router.add_post("/hook", self.receive)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        settings = Settings(redis_url=self.redis.url, key_prefix="bench")
        store = Store(connect(settings), settings)
        try:
            await store.start()
            outbox_admin.init(self.pg.dsn, TABLE)
            await store.put_endpoint(endpoint_record(url=f"http://127.0.0.1:{port}/hook"))
            ident = outbox_schema.names(TABLE).table
            insert = sql.SQL("INSERT INTO {} (type, payload) VALUES (%s, %s)").format(ident)
            return {
                "throughput": await self.throughput(insert),
                "latency": await self.latency(insert),
            }
        finally:
            for p in list(self.procs):
                p.kill()
            await store.close()
            await runner.cleanup()
            self.redis.stop()
            self.pg.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--rate", type=float, default=200.0, help="latency part: commits per second")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--json", default=str(ROOT / "bench" / "results" / "outbox.json"))
    args = p.parse_args()
    result = asyncio.run(Bench(args).run())
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    tp, lat = result["throughput"], result["latency"]
    print(
        f"outbox: {tp['rows_per_s']} rows/s through one connector ({tp['rows']} rows, "
        f"{tp['seconds']} s); commit-to-receipt p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, "
        f"max {lat['max_ms']} ms at {lat['rate_per_s']:.0f} commits/s "
        f"({lat['received']}/{lat['rows']} received); {out}"
    )


if __name__ == "__main__":
    main()
