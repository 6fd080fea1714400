"""A dead-letter flood and the operational events it makes (part of ``make bench``).

2,000 events to one endpoint that answers 410 (dead at once; the breaker threshold is
set out of reach so every send goes), delivered by 2 in-process workers, each with its
ops relay, on a fresh ``redis-server``, with an ops endpoint at the same local receiver.
Reports how many ``delivery.dead`` events the flood became (one per window of
``RELAY_OPS_DEAD_WINDOW``, here 2 s), their counts (which must add up to 2,000) and the
wall time. Writes ``bench/results/ops-flood.json``.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from relay.connectors.opsevents import OpsRelay
from relay.delivery.worker import Worker
from relay.domain.schema import EventIn, endpoint_record
from relay.publishing import Publisher
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer, free_port
from relay.settings import Settings

N = 2000
WINDOW = 2.0
OUT = Path(__file__).resolve().parent / "results" / "ops-flood.json"


async def main() -> dict[str, Any]:
    server = RedisServer(port=free_port(), data_dir=Path(tempfile.mkdtemp()), appendonly=False)
    server.start()
    summaries: list[dict[str, Any]] = []
    all_counted = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        if request.path == "/ops":
            summaries.append(orjson.loads(body))
            if sum(s["data"]["count"] for s in summaries) >= N:
                all_counted.set()
            return web.Response(text="ok")
        return web.Response(status=410)

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    settings = Settings(
        redis_url=server.url,
        key_prefix="b" + uuid.uuid4().hex[:6],
        allow_private_networks=True,
        breaker_threshold=10**6,
        ops_dead_window=WINDOW,
        worker_concurrency=64,
        log_level="warning",
    )
    store = Store(connect(settings), settings)
    await store.start()
    base = f"http://127.0.0.1:{port}"
    await store.put_endpoint(endpoint_record(url=base + "/ops", app="relay-ops"))
    await store.put_endpoint(endpoint_record(url=base + "/d", app="shop"))
    stop = asyncio.Event()
    workers = [Worker(store, settings) for _ in range(2)]
    relays = [OpsRelay(store) for _ in workers]
    for w, r in zip(workers, relays, strict=True):
        w.on_ops = r.poke
    work = [asyncio.create_task(w.run(stop)) for w in workers]
    relaying = [asyncio.create_task(r.run(stop)) for r in relays]
    pub = Publisher(store)
    started = time.monotonic()
    try:
        for first in range(0, N, 100):
            await asyncio.gather(
                *(
                    pub.publish(EventIn(type="order.paid", payload={"i": i}, app="shop"))
                    for i in range(first, first + 100)
                )
            )
        await asyncio.wait_for(all_counted.wait(), 120)
        wall = time.monotonic() - started
    finally:
        stop.set()
        for t in relaying:
            t.cancel()
        await asyncio.gather(*work, *relaying, return_exceptions=True)
        await store.close()
        await runner.cleanup()
        server.stop()
    counts = [s["data"]["count"] for s in summaries]
    return {
        "dead_letters": N,
        "window_s": WINDOW,
        "events": len(summaries),
        "counts": counts,
        "sum": sum(counts),
        "wall_s": round(wall, 2),
    }


if __name__ == "__main__":
    result = asyncio.run(main())
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
