"""Graceful shutdown of a real worker process (guarantee 5), on a real redis-server.

A ``python -m relay worker`` process with 6 send slots is filled with 6 sends (each to
its own endpoint) that the test's receiver holds open: 3 "quick" ones the receiver
answers once the worker has begun draining, and 3 "slow" ones it holds past
``RELAY_SHUTDOWN_GRACE``. 10 more events wait in the queue. On SIGTERM the worker must
claim nothing more (the quick answers free slots while it drains), record the quick
sends, hand the slow ones back to pending with their attempt refunded, and exit 0
within the grace plus a margin.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from relay.queue.store import Store, connect
from relay.redisproc import RedisServer, free_port
from tests.helpers import make_settings

pytestmark = pytest.mark.realredis

GRACE = 1.5
EXIT_MARGIN = 15.0  # generous: process teardown on a loaded 2-core CI box


async def test_sigterm_drains_within_grace_and_hands_back_the_rest(
    make_store: Any, make_api: Any, receiver: Any, redis_server: Any
) -> None:
    """SIGTERM with sends in flight: finish what can finish, hand back the rest uncharged.

    Fails, each edit made in a scratch copy of the repository:
    * with release.lua's ``HINCRBY ... "attempts", -1`` deleted: the handed-back slow
      deliveries keep ``attempts`` 1 ("assert 1 == 0");
    * with ``Leases.hand_back`` not calling ``store.release`` (claims left to their
      leases): the slow deliveries stay 'delivering' ("assert 'delivering' == 'pending'");
    * with ``Worker.run`` leaving the claim loop running during the drain (the loop
      driven by an event that is never set, the hand-back started on ``stop``): the
      slots the quick answers free are refilled from the waiting 'extra' events, which
      reach the receiver ("Extra items in the left set").
    """
    store = await make_store()
    api = await make_api(store)
    sk = store.keys.shard(0)
    release_quick = asyncio.Event()
    release_slow = asyncio.Event()

    async def hold(event: asyncio.Event) -> web.Response:
        await event.wait()
        return web.Response(text="ok")

    # One endpoint per held request: a worker opens only a window of requests to each
    # endpoint at first (slow start), and the test needs all six slots held at once.
    kinds = [f"quick{i}" for i in range(3)] + [f"slow{i}" for i in range(3)]
    for kind in kinds:
        gate = release_quick if kind.startswith("quick") else release_slow
        receiver.responses[f"/{kind}"] = lambda _r, gate=gate: hold(gate)
    for kind in [*kinds, "extra"]:
        spec = {"url": f"{receiver.url}/{kind}", "event_types": [kind]}
        async with api("POST", "/v1/endpoints", json=spec) as r:
            assert r.status == 201

    async def publish(kind: str, n: int) -> list[str]:
        out = []
        for i in range(n):
            event = {"type": kind, "payload": {"i": i}}
            async with api("POST", "/v1/events", json=event) as r:
                assert r.status == 201
                out.append((await r.json())["deliveries"][0]["id"])
        return out

    quick = [(await publish(k, 1))[0] for k in kinds[:3]]
    slow = [(await publish(k, 1))[0] for k in kinds[3:]]

    env = {
        **os.environ,
        "RELAY_REDIS_URL": redis_server.url,
        "RELAY_KEY_PREFIX": store.settings.key_prefix,
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_WORKER_CONCURRENCY": "6",
        "RELAY_SHUTDOWN_GRACE": str(GRACE),
        "RELAY_LEASE_SECONDS": "30",
        "RELAY_HTTP_TIMEOUT": "60",
        # Held sends must keep their slots (a slow send frees its slot after this long).
        "RELAY_SLOW_SEND_AFTER": "60",
        "RELAY_WORKER_ID": "graceful",
        "RELAY_LOG_FORMAT": "json",
        "RELAY_LOG_LEVEL": "info",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relay",
        "worker",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    draining = asyncio.Event()
    lines: list[dict[str, Any]] = []

    async def read_log() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            lines.append(line)
            if line.get("event") == "worker.draining":
                draining.set()

    reader = asyncio.create_task(read_log())
    try:
        await receiver.wait_for(6, within=20)  # every slot holds an open request
        extra = await publish("extra", 10)
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(draining.wait(), 20)
        release_quick.set()  # these finish inside the grace, freeing 3 slots
        rc = await asyncio.wait_for(proc.wait(), GRACE + EXIT_MARGIN)
    finally:
        release_quick.set()
        release_slow.set()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await reader

    assert rc == 0
    seen = {r.headers["x-relay-delivery-id"] for r in receiver.requests}
    assert seen == set(quick) | set(slow)  # nothing was claimed after SIGTERM

    for did in quick:
        row = await store.get_delivery(did)
        assert row is not None
        assert (row["status"], row["attempts"]) == ("succeeded", 1)
        assert [e["status_code"] for e in row["attempt_log"]] == [200]
    for did in slow:
        row = await store.get_delivery(did)
        assert row is not None
        assert row["status"] == "pending"
        assert row["attempts"] == 0  # back to what it was before the claim
        assert row.get("claim") is None
        # its request was made (the receiver holds it open): the log says so
        assert [e["outcome"] for e in row["attempt_log"]] == ["handed_back"]
        assert await store.redis.zscore(sk.due, did) is not None
    for did in extra:
        row = await store.get_delivery(did)
        assert row is not None
        assert (row["status"], row["attempts"], row.get("worker")) == ("pending", 0, None)
    assert await store.redis.zcard(sk.processing) == 0

    handed = [e for e in lines if e.get("event") == "worker.handed_back"]
    assert sum(e["count"] for e in handed) == 3


async def test_worker_started_while_redis_is_down_waits_for_it(
    tmp_path: Path, make_api: Any, receiver: Any
) -> None:
    """A worker (re)started during a Redis outage waits for Redis instead of exiting.

    The crash suite starts replacement workers while redis-server is down; each must come
    up once Redis is back and deliver, and SIGTERM still stops it cleanly.
    Fails with ``runner.serve`` calling ``store.start()`` directly (no wait): the worker
    dies of redis ConnectionError before Redis starts ("worker exited 1").
    """
    server = RedisServer(port=free_port(), data_dir=tmp_path / "redis", appendonly=False)
    settings = make_settings(redis_url=server.url)
    env = {
        **os.environ,
        "RELAY_REDIS_URL": server.url,
        "RELAY_KEY_PREFIX": settings.key_prefix,
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_LOG_FORMAT": "json",
        "RELAY_LOG_LEVEL": "info",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relay",
        "worker",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    events: list[str] = []
    loops: list[str] = []

    async def read_log() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            with contextlib.suppress(orjson.JSONDecodeError):
                line = orjson.loads(raw)
                events.append(line.get("event", ""))
                if line.get("event") == "worker.started":
                    loops.append(line.get("loop"))

    reader = asyncio.create_task(read_log())
    store = None
    try:
        for _ in range(400):  # until it has tried Redis at least twice (bounded)
            if events.count("redis.unavailable") >= 2 or proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        assert proc.returncode is None, f"worker exited {proc.returncode}: {events}"
        assert events.count("redis.unavailable") >= 2
        await asyncio.to_thread(server.start)
        store = Store(connect(settings), settings)
        await store.start()
        api = await make_api(store)
        async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/up"}) as r:
            assert r.status == 201
        async with api("POST", "/v1/events", json={"type": "t", "payload": {}}) as r:
            assert r.status == 201
        await receiver.wait_for(1, within=20)
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), EXIT_MARGIN)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await reader
        if store is not None:
            await store.close()
        server.stop()
    assert rc == 0
    assert "worker.started" in events
    assert loops == ["uvloop"]  # RELAY_EVENT_LOOP's default, in a real worker process
