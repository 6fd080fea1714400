"""Write ``tests/data/layout_<vN>.json``: a Redis populated by relay with key layout vN.

Run against the last commit of an older layout, from a checkout of it, so the keys are
exactly what that code wrote (layout v1: b578a53; v2: 2c4c814, before v3):

    git worktree add /tmp/relay-v2 2c4c814
    PYTHONPATH=/tmp/relay-v2 .venv/bin/python scripts/layout_fixture.py

(any path works: the script imports ``relay`` from PYTHONPATH first). It starts its own
``redis-server`` and a loopback receiver, publishes through ``Publisher`` and delivers
through ``Worker`` (succeeded, retried then dead, ordered lanes, pending, an event no
endpoint takes), then dumps every key with its type, TTL and value, and what the v1 code
itself answered for every event and delivery: ``tests/system/test_migrate.py`` holds
``relay migrate`` and today's code to those answers.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

import relay
from relay.delivery.worker import Worker
from relay.domain.schema import EventIn, endpoint_record
from relay.publishing import Publisher
from relay.queue import keys
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer, free_port
from relay.settings import Settings

LAYOUT = getattr(keys, "LAYOUT", "v1")  # v1 had no such constant
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / f"layout_{LAYOUT}.json"


async def dump(store: Store) -> list[dict[str, Any]]:
    r = store.redis
    rows = []
    for key in sorted([k async for k in r.scan_iter(match=store.settings.key_prefix + ":*")]):
        kind = await r.type(key)
        value: Any
        if kind == "string":
            value = await r.get(key)
        elif kind == "hash":
            value = await r.hgetall(key)
        elif kind == "list":
            value = await r.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(await r.smembers(key))
        elif kind == "zset":
            value = await r.zrange(key, 0, -1, withscores=True)
        else:
            raise SystemExit(f"{key}: type {kind} not handled")
        rows.append({"key": key, "type": kind, "pttl": await r.pttl(key), "value": value})
    return rows


async def main() -> None:
    print("relay from", Path(relay.__file__).parent, file=sys.stderr)
    app = web.Application()

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="")

    async def fail(_: web.Request) -> web.Response:
        return web.Response(status=500, text="")

    app.router.add_post("/ok", ok)
    app.router.add_post("/fail", fail)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"

    server = RedisServer(data_dir=Path(tempfile.mkdtemp()) / "redis")
    server.start()
    settings = Settings(
        redis_url=server.url,
        key_prefix="fx",
        shards=2,
        allow_private_networks=True,
        retry_schedule=(0.05,),
        retry_jitter=0.0,
        worker_id="fixture-worker",
        breaker_threshold=1000,
    )
    store = Store(connect(settings), settings)
    await store.start()
    try:
        eps = {}
        for name, path, extra in [
            ("ok", "/ok", {}),
            ("fail", "/fail", {}),
            ("ordered", "/ok", {"ordering": "key"}),
            ("later", "/ok", {"event_types": ["later.*"]}),
        ]:
            rec = endpoint_record(url=url + path, **extra)
            await store.put_endpoint(rec)
            eps[name] = rec["id"]
        pub = Publisher(store)
        first = []
        for i in range(8):  # to ok and fail: one succeeds, one goes dead
            ev = EventIn(type="order.paid", payload={"n": i, "text": "grüße\nzwei"})
            first.append(await pub.publish(ev, idempotency_key=f"k{i}" if i < 2 else None))
        for i in range(3):  # ordered, one key: a lane
            ev = EventIn(type="order.paid", payload={"lane": i}, ordering_key="cust-1")
            first.append(await pub.publish(ev))
        for _ in range(2):  # the failed ones are retried once (50 ms), then dead
            await Worker(store, settings).run(asyncio.Event(), burst=True)
            await asyncio.sleep(0.3)
        later = []
        for i in range(5):  # left pending: no worker runs after these
            later.append(await pub.publish(EventIn(type="later.thing", payload={"m": i})))
        await pub.publish(EventIn(type="nobody.wants", payload={}, app="other"))  # TTL
        events, deliveries = {}, {}
        for p in first + later:
            e = p.answer["id"]
            events[e] = await store.get_event(e)
            for d in p.answer["deliveries"]:
                deliveries[d["id"]] = await store.get_delivery(d["id"])
        pending = [d for d, rec in deliveries.items() if rec["status"] == "pending"]
        out = {
            "written_by": f"relay key layout {LAYOUT} (scripts/layout_fixture.py)",
            "prefix": settings.key_prefix,
            "shards": settings.shards,
            "receiver_paths": {name: eid for name, eid in eps.items()},
            "keys": await dump(store),
            "events": events,
            "deliveries": deliveries,
            "pending": pending,
        }
        OUT.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        statuses: dict[str, int] = {}
        for rec in deliveries.values():
            statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
        print(f"{OUT}: {len(out['keys'])} keys, {statuses}", file=sys.stderr)
    finally:
        await store.close()
        server.stop()
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
