"""Many workers at once: no delivery is lost and none is sent twice by healthy workers.

Three ``python -m relay worker`` processes and two in-process Worker tasks share one
real Redis while ~3,000 events (two endpoints each) are published in concurrent
batches. Every (webhook-id, endpoint) pair must arrive exactly once.

Fails with the ``ZREM`` line deleted from ``claim.lua``: pairs arrive twice. To see it:
copy ``lua/``, delete the ZREM line of the copy's claim.lua and call ``run_fleet`` with
``lua_dir`` = the copy (the in-process workers load it through ``Scripts(client,
lua_dir=copy)``, so the shared file is never touched).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from relay.delivery.worker import Worker
from relay.domain.schema import endpoint_record
from relay.queue.scripts import Scripts
from relay.queue.store import Store
from tests.helpers import publish_event

pytestmark = pytest.mark.realredis

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 3000
PROCESSES = 3
IN_PROCESS = 2


async def add_endpoint(store: Store, url: str) -> dict[str, Any]:
    ep = endpoint_record(url=url, app="default")
    await store.put_endpoint(ep)
    return ep


async def publish_all(store: Store, endpoint_ids: list[str], total: int) -> list[str]:
    """Publish in concurrent batches of 50 while the workers are already delivering."""
    published: list[str] = []

    async def one(n: int) -> None:
        payload = b'{"n":%d}' % n
        event_id, _, _ = await publish_event(
            store, endpoint_ids, event_type="load.test", payload=payload
        )
        published.append(event_id)

    # 50 at a time: redis-py's asyncio pool refuses (rather than queues) past 100
    # connections, and this client is shared with the in-process workers.
    for start in range(0, total, 50):
        await asyncio.gather(*(one(n) for n in range(start, min(total, start + 50))))
    return published


async def run_fleet(
    make_store: Any, receiver: Any, redis_url: str, tmp_path: Path, lua_dir: Path | None = None
) -> dict[str, Any]:
    store = await make_store(worker_concurrency=32)
    eps = [await add_endpoint(store, receiver.url + p) for p in ("/a", "/b")]
    env = {
        **os.environ,
        "RELAY_REDIS_URL": redis_url,
        "RELAY_KEY_PREFIX": store.settings.key_prefix,
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_WORKER_CONCURRENCY": "16",
        "RELAY_LOG_LEVEL": "warning",
    }
    procs = []
    for n in range(PROCESSES):
        log = (tmp_path / f"worker-{n}.log").open("wb")
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable, "-m", "relay", "worker", env=env, cwd=ROOT, stderr=log
            )
        )
    if lua_dir is not None:
        store.scripts = Scripts(store.redis, lua_dir)
        await store.scripts.load()
    stop = asyncio.Event()
    workers = [Worker(store, store.settings) for _ in range(IN_PROCESS)]
    tasks = [asyncio.create_task(w.run(stop)) for w in workers]
    try:
        # Publish only once every worker listens on the wake channel: the processes are
        # then up (signal handlers installed), so all of them take part and exit cleanly.
        wake = store.keys.shard(0).wake
        deadline = time.monotonic() + 30
        while dict(await store.redis.pubsub_numsub(wake)).get(wake, 0) < PROCESSES + IN_PROCESS:
            assert all(p.returncode is None for p in procs), "a worker process exited"
            assert time.monotonic() < deadline, "worker processes did not come up"
            await asyncio.sleep(0.05)
        published = await publish_all(store, [e["id"] for e in eps], EVENTS)
        expected = len(published) * len(eps)
        await receiver.wait_for(expected, within=120.0)
        # a duplicate may land just after the last expected request: drain what is due
        stats = await store.stats()
        while stats["counts"]["pending"] or stats["counts"]["delivering"]:
            await asyncio.sleep(0.05)
            stats = await store.stats()
    finally:
        stop.set()
        try:
            await asyncio.gather(*tasks)
        finally:
            for p in procs:
                if p.returncode is None:
                    p.send_signal(signal.SIGTERM)
            try:
                codes = [await asyncio.wait_for(p.wait(), 30) for p in procs]
            finally:
                for p in procs:
                    if p.returncode is None:
                        p.kill()
                        await p.wait()
    return {
        "published": published,
        "endpoints": eps,
        "codes": codes,
        "stats": stats,
        "in_process_sent": sum(w.stats.sent for w in workers),
        "logs": [(tmp_path / f"worker-{n}.log").read_text() for n in range(PROCESSES)],
    }


async def test_fleet_delivers_every_event_exactly_once(
    make_store: Any, receiver: Any, redis_server: Any, tmp_path: Path
) -> None:
    run = await run_fleet(make_store, receiver, redis_server.url, tmp_path)
    assert run["codes"] == [0] * PROCESSES, run["logs"]
    pairs = Counter((r.headers["webhook-id"], r.path) for r in receiver.requests)
    duplicates = {k: v for k, v in pairs.items() if v > 1}
    assert duplicates == {}, f"{len(duplicates)} pairs received more than once"
    expected = {(e, p) for e in run["published"] for p in ("/a", "/b")}
    assert set(pairs) == expected
    assert len(receiver.requests) == 2 * EVENTS
    assert run["stats"]["counts"]["succeeded"] == 2 * EVENTS
    assert run["stats"]["reclaimed_total"] == 0
    # both kinds of worker took part: the processes sent what the tasks did not
    assert 0 < run["in_process_sent"] < 2 * EVENTS
