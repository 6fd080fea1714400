"""Redis round trips per delivery on the success path, counted (not timed).

One worker (concurrency 64) delivers 500 events to one endpoint on a private
``redis-server``, so nothing else talks to it. ``CONFIG RESETSTAT`` before and
``INFO commandstats`` after give every command the server ran. Commandstats also counts
the commands a Lua script runs inside itself (one EVALSHA of claim.lua shows up as
dozens of ZREM/HSET/... calls), which are not round trips; a ``MONITOR`` connection
tells them apart (Redis tags them ``[0 lua]``), and the two counts are cross-checked.
Counted: every command a client sent (EVALSHA, HMGET of endpoints, SUBSCRIBE, CLIENT
SETINFO of new connections, ...); left out: the measuring commands (CONFIG, INFO, the
ECHO that marks the end, MONITOR). ``pytest -s`` prints the breakdown.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from relay.delivery.worker import Worker
from relay.domain.schema import endpoint_record
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer
from tests.helpers import make_settings, publish_event

pytestmark = pytest.mark.realredis

EVENTS = 500
LIMIT = 3.0  # publish + claim + record + endpoint read, amortised
MEASURING = {"config|resetstat", "config", "info", "echo", "monitor"}


async def commandstats(store: Store) -> dict[str, int]:
    raw = await store.redis.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in raw.items()}


class Monitor:
    """A raw MONITOR connection: counts client-sent and in-script commands by name."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.client: Counter[str] = Counter()
        self.lua: Counter[str] = Counter()
        self.marker = f"rt-end-{uuid.uuid4().hex}"

    async def __aenter__(self) -> Monitor:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(b"MONITOR\r\n")
        await self.writer.drain()
        assert await self.reader.readline() == b"+OK\r\n"
        return self

    async def finish(self, store: Store) -> None:
        """Read the stream up to an ECHO of our marker, so nothing is still in flight."""
        await store.redis.echo(self.marker)
        while True:
            line = (await asyncio.wait_for(self.reader.readline(), 30)).decode()
            source, _, rest = line.partition("] ")
            name = rest.split(" ", 1)[0].strip().strip('"').lower()
            if self.marker in rest:
                return
            (self.lua if source.endswith(" lua") else self.client)[name] += 1

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def publish(store: Store, endpoint_id: str, n: int) -> None:
    await publish_event(store, [endpoint_id], event_type="rt.test", payload=b'{"n":%d}' % n)


async def measure(
    store: Store, port: int, receiver: Any, endpoint_id: str, live: bool
) -> dict[str, Any]:
    """Deliver EVENTS; ``live`` publishes while the worker runs, else all first."""
    async with Monitor(port) as monitor:
        await store.redis.config_resetstat()
        result = await _deliver(store, receiver, endpoint_id, live)
        calls = await commandstats(store)
        await monitor.finish(store)
    counted = {k: v for k, v in calls.items() if k not in MEASURING}
    client = {k: v for k, v in monitor.client.items() if k not in MEASURING}
    # cross-check: what commandstats saw == what clients sent + what scripts ran
    assert sum(counted.values()) == sum(client.values()) + sum(monitor.lua.values())
    trips = sum(client.values())
    return {
        **result,
        "mode": "live" if live else "backlog",
        "per_delivery": trips / EVENTS,
        "round_trips": trips,
        "client": dict(sorted(client.items(), key=lambda kv: -kv[1])),
        "in_scripts": sum(monitor.lua.values()),
    }


async def _deliver(store: Store, receiver: Any, endpoint_id: str, live: bool) -> dict[str, Any]:
    received = len(receiver.requests)
    stop = asyncio.Event()
    worker = Worker(store, store.settings)
    task = None
    if live:
        task = asyncio.create_task(worker.run(stop))
    for start in range(0, EVENTS, 50):
        await asyncio.gather(*(publish(store, endpoint_id, n) for n in range(start, start + 50)))
    if task is None:
        task = asyncio.create_task(worker.run(stop))
    await receiver.wait_for(received + EVENTS, within=60.0)
    stop.set()
    await task  # shutdown drains the recorder: every outcome is written before this
    return {"claim_batches": worker.stats.claim_batches}


async def test_round_trips_per_delivery(receiver: Any, tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path, appendonly=False)
    server.start()
    try:
        settings = make_settings(redis_url=server.url, worker_concurrency=64)
        store = Store(connect(settings), settings)
        await store.start()
        try:
            endpoint = endpoint_record(url=receiver.url + "/rt")
            endpoint_id = endpoint["id"]
            await store.put_endpoint(endpoint)
            runs = []
            for live in (False, True):
                runs.append(await measure(store, server.port, receiver, endpoint_id, live))
            succeeded = (await store.stats())["counts"]["succeeded"]
        finally:
            await store.close()
    finally:
        server.stop()
    for run in runs:
        print(
            f"\n[{run['mode']}] {run['round_trips']} client commands for {EVENTS} deliveries"
            f" = {run['per_delivery']:.3f} per delivery ({run['in_scripts']} more ran inside"
            f" scripts); claim batches with work: {run['claim_batches']}\n  "
            + ", ".join(f"{k}={v}" for k, v in run["client"].items())
        )
    assert succeeded == 2 * EVENTS
    for run in runs:
        assert run["client"].get("evalsha", 0) >= EVENTS  # one publish script per event
        assert "eval" not in run["client"]  # scripts are never re-sent inline
        assert run["per_delivery"] <= LIMIT, run
