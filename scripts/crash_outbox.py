"""The outbox round of the crash-injection suite (``make crash``; a short one in ``make test``).

Everything on 127.0.0.1 in a temporary directory: a redis-server (append-only file,
fsync always), a private PostgreSQL (``tests/helpers/pg.py``: initdb + postgres on a free port),
``--connectors`` ``relay outbox`` processes, ``--workers`` ``relay worker`` processes and
a recording receiver in this process. A writer commits transactions of 1-10 outbox rows
and rolls back about one in five, while a random connector or worker is SIGKILLed every
few hundred milliseconds and replaced; some connectors are started with the test hook
``RELAY_TEST_OUTBOX_CRASH_AFTER`` (exit 86 right after Redis acknowledged an event,
before its row is removed), so the window between "published" and "removed" is hit on
purpose, not only by chance. Once the writer is done, the outbox is empty and every
event is received, the round compares:

* committed rows, events created (Redis), deliveries received (unique ``webhook-id``);
* **lost**: committed rows with no event; **duplicate events**: rows with two or more;
  **rolled back published**: rows of rolled-back transactions that became events.

All three must be 0. Duplicate *sends* (a worker killed mid-send: at-least-once delivery,
the receiver dedupes on ``webhook-id``) are reported, not failed.

    python scripts/crash_outbox.py --rows 2000 --connectors 3 --workers 2 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import shutil
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
from relay.domain import eventrecord  # noqa: E402
from relay.domain.schema import endpoint_record  # noqa: E402
from relay.queue.store import Store, connect  # noqa: E402
from relay.redisproc import RedisServer, free_port  # noqa: E402
from relay.settings import Settings  # noqa: E402
from tests.helpers.pg import PgServer, pg_bindir  # noqa: E402

TABLE = "crash_outbox"
PREFIX = "crashob"


class Round:
    def __init__(self, args: argparse.Namespace, rng: random.Random) -> None:
        self.args = args
        self.rng = rng
        self.dir = Path(tempfile.mkdtemp(prefix="relay-crash-outbox-"))
        self.redis = RedisServer(data_dir=self.dir / "redis", appendonly=True)
        bindir = pg_bindir()
        if bindir is None:
            sys.exit("no PostgreSQL binaries (initdb, postgres): apt-get install postgresql")
        self.pg = PgServer(bindir)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.spawned = 0
        self.kills: collections.Counter[str] = collections.Counter()
        self.hook_exits = 0
        self.unexpected: list[str] = []
        self.committed: set[str] = set()
        self.rolled_back: set[str] = set()
        self.received: list[tuple[str, str]] = []  # (webhook-id, row marker)
        self.writing = True

    # -- processes -------------------------------------------------------------------
    def _env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env.update(
            RELAY_REDIS_URL=self.redis.url,
            RELAY_KEY_PREFIX=PREFIX,
            RELAY_OUTBOX_DSN=self.pg.dsn,
            RELAY_OUTBOX_TABLE=TABLE,
            RELAY_OUTBOX_BATCH="20",
            RELAY_OUTBOX_POLL_INTERVAL="500ms",
            RELAY_ALLOW_PRIVATE_NETWORKS="1",
            RELAY_LEASE_SECONDS="1.5",
            RELAY_RETRY_SCHEDULE="200ms,500ms,1s,1s,1s,1s,1s,1s",
            RELAY_RETRY_JITTER="0",
            RELAY_LOG_LEVEL="warning",
            **extra,
        )
        return env

    def spawn(self, kind: str) -> None:
        self.spawned += 1
        name = f"{kind}-{self.spawned}"
        extra = {}
        if kind == "outbox" and self.rng.random() < 0.4:
            extra["RELAY_TEST_OUTBOX_CRASH_AFTER"] = str(self.rng.randint(1, 60))
        log = open(self.dir / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "relay", kind],
            env=self._env(**extra),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        log.close()

    def reap(self) -> None:
        """Replace processes that exited: 86 is the test hook, anything else unexpected."""
        for name, p in list(self.procs.items()):
            rc = p.poll()
            if rc is None:
                continue
            del self.procs[name]
            if rc == 86:
                self.hook_exits += 1
            elif rc != -9:
                self.unexpected.append(f"{name} exited {rc}")
            self.spawn(name.split("-")[0])

    async def killer(self) -> None:
        lo, hi = self.args.kill_every
        while self.writing:
            await asyncio.sleep(self.rng.uniform(lo, hi))
            self.reap()
            name = self.rng.choice(sorted(self.procs))
            self.procs[name].kill()
            self.procs[name].wait()
            self.kills[name.split("-")[0]] += 1
            self.reap()

    # -- the backend -----------------------------------------------------------------
    async def writer(self) -> None:
        ident = outbox_schema.names(TABLE).table
        insert = sql.SQL("INSERT INTO {} (type, payload) VALUES (%s, %s)").format(ident)
        async with await psycopg.AsyncConnection.connect(self.pg.dsn) as conn:
            n = 0
            while len(self.committed) < self.args.rows:
                size = self.rng.randint(1, 10)
                markers = [f"r{n + i}" for i in range(size)]
                n += size
                async with conn.cursor() as cur:
                    await cur.executemany(
                        insert, [("order.paid", Jsonb({"row": m})) for m in markers]
                    )
                if self.rng.random() < 0.2:
                    await conn.rollback()
                    self.rolled_back.update(markers)
                else:
                    await conn.commit()
                    self.committed.update(markers)
                await asyncio.sleep(self.rng.uniform(0, 0.004))

    async def receive(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.received.append((request.headers["webhook-id"], body["data"]["row"]))
        await asyncio.sleep(self.rng.uniform(0, 0.02))  # sends in flight when a worker dies
        return web.Response(text="ok")

    # -- the round -------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        self.redis.start()
        self.pg.start()
        app = web.Application()
        app.router.add_post("/hook", self.receive)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        settings = Settings(redis_url=self.redis.url, key_prefix=PREFIX)
        store = Store(connect(settings), settings)
        try:
            await store.start()
            outbox_admin.init(self.pg.dsn, TABLE)
            await store.put_endpoint(endpoint_record(url=f"http://127.0.0.1:{port}/hook"))
            for _ in range(self.args.connectors):
                self.spawn("outbox")
            for _ in range(self.args.workers):
                self.spawn("worker")
            started = time.monotonic()
            killer = asyncio.create_task(self.killer())
            await self.writer()
            self.writing = False
            await killer
            drained = await self._drain(store)
            elapsed = time.monotonic() - started
            events = await self._events(store)
        finally:
            for p in self.procs.values():
                p.terminate()
            for p in self.procs.values():
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
            await store.close()
            await runner.cleanup()
            self.redis.stop()
            self.pg.stop()
            if not self.args.keep:
                shutil.rmtree(self.dir, ignore_errors=True)
        got = collections.Counter(events.values())
        ids = {w for w, _ in self.received}
        result = {
            "committed_rows": len(self.committed),
            "rolled_back_rows": len(self.rolled_back),
            "events_created": len(events),
            "deliveries_received": len(ids),
            "duplicate_sends": len(self.received) - len(ids),
            "lost": len(self.committed - set(got)),
            "duplicate_events": sum(1 for c in got.values() if c > 1),
            "rolled_back_published": len(self.rolled_back & set(got)),
            "connector_kills": self.kills["outbox"],
            "worker_kills": self.kills["worker"],
            "hook_exits": self.hook_exits,
            "unexpected_exits": self.unexpected,
            "drained": drained,
            "seconds": round(elapsed, 1),
        }
        result["ok"] = (
            drained
            and result["lost"] == 0
            and result["duplicate_events"] == 0
            and result["rolled_back_published"] == 0
            and result["deliveries_received"] == len(self.committed)
            and not self.unexpected
        )
        return result

    async def _events(self, store: Store) -> dict[str, str]:
        """event id -> row marker, for every event in Redis."""
        sk = store.keys.shard(0)
        prefix = sk.event_prefix  # layout v2 keeps no events index: the keys are the events
        event_ids = [k[len(prefix) :] async for k in store.redis.scan_iter(match=prefix + "*")]
        pipe = store.redis.pipeline(transaction=False)
        for e in event_ids:
            pipe.get(sk.event(e))
        payloads = [eventrecord.payload(raw) for raw in await pipe.execute()]
        return {e: p["row"] for e, p in zip(event_ids, payloads, strict=True)}

    async def _drain(self, store: Store) -> bool:
        deadline = time.monotonic() + self.args.drain_timeout
        while time.monotonic() < deadline:
            self.reap()
            waiting = outbox_admin.stats(self.pg.dsn, TABLE)["waiting"]
            ids = {w for w, _ in self.received}
            if waiting == 0 and len(ids) >= len(self.committed):
                return True
            await asyncio.sleep(0.1)
        return False


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2000, help="committed rows to write")
    p.add_argument("--connectors", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--kill-every", type=float, nargs=2, default=(0.2, 0.6), metavar=("LO", "HI"))
    p.add_argument("--drain-timeout", type=float, default=60.0)
    p.add_argument("--seed", type=int)
    p.add_argument("--json", help="write the result here")
    p.add_argument("--keep", action="store_true", help="keep the round's directory (logs)")
    return p.parse_args(argv)


def run_round(args: argparse.Namespace) -> dict[str, Any]:
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    result = {"seed": seed, **asyncio.run(Round(args, random.Random(seed)).run())}
    print(
        f"outbox round (seed {seed}): {result['committed_rows']} committed, "
        f"{result['rolled_back_rows']} rolled back, {result['events_created']} events, "
        f"{result['deliveries_received']} received; lost {result['lost']}, duplicate events "
        f"{result['duplicate_events']}, rolled back published {result['rolled_back_published']}; "
        f"{result['connector_kills']} connector and {result['worker_kills']} worker kills, "
        f"{result['hook_exits']} exits between published and removed; "
        f"{result['duplicate_sends']} duplicate sends; {'ok' if result['ok'] else 'FAILED'}",
        flush=True,
    )
    return result


def main() -> None:
    args = parse()
    result = run_round(args)
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
