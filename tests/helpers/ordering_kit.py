"""Ordered delivery test kit: a receiver that records every request's lane,
number, start and end, worker processes, ordered publishing, and the lane checks.

The receiver answers at random: about a third of the requests fail (500), and about a
third answer slowly (up to 40 ms), from a seeded generator. Each event's payload says
its lane (``lane``) and its place in it (``n``, publish order), so the receiver needs
no lookup. :func:`lane_problems` holds the received requests to the contract:

* per lane, the requests arrive in publish order: the numbers never go down, and each
  number's requests are one unbroken run (a retry of n is never after n+1);
* never two requests of a lane at once: each starts after the previous one ended (the
  receiver also counts the requests of a lane open at the same moment);
* a lane moves from n to n+1 only once n was resolved: its last request succeeded, or
  the delivery is dead (asked of the store: ``dead`` when given).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from relay.publishing import Publisher
from relay.queue.store import Outcome, Store
from relay.redisproc import free_port
from tests.helpers import waiting

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Hit:
    lane: str
    n: int
    start: float
    end: float
    status: int
    delivery: str


@dataclass
class LaneReceiver:
    """An HTTP receiver on 127.0.0.1 that records :class:`Hit` per request."""

    fail: float = 1 / 3
    slow: float = 1 / 3
    seed: int = 14
    url: str = ""
    hits: list[Hit] = field(default_factory=list)
    open_now: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    overlaps: list[tuple[str, int]] = field(default_factory=list)
    # (lane, n) -> status to answer instead of the random one (e.g. 410: dead at once)
    fixed: dict[tuple[str, int], int] = field(default_factory=dict)
    # called with each request's (lane, n) before it answers; awaited (to hold a request)
    before: Callable[[str, int], Awaitable[None]] | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None

    async def start(self) -> LaneReceiver:
        rng = random.Random(self.seed)
        loop = asyncio.get_running_loop()

        async def handle(request: web.Request) -> web.Response:
            data = orjson.loads(await request.read())["data"]
            lane, n = str(data["lane"]), int(data["n"])
            start = loop.time()
            self.open_now[lane] += 1
            if self.open_now[lane] > 1:
                self.overlaps.append((lane, n))
            try:
                if self.before is not None:
                    await self.before(lane, n)
                if rng.random() < self.slow:
                    await asyncio.sleep(rng.random() * 0.04)
                status = self.fixed.get((lane, n)) or (500 if rng.random() < self.fail else 200)
            finally:
                self.open_now[lane] -= 1
            delivery = request.headers.get("x-relay-delivery-id", "")
            self.hits.append(Hit(lane, n, start, loop.time(), status, delivery))
            self.arrived.set()
            return web.Response(status=status, text="x")

        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def succeeded(self) -> set[tuple[str, int]]:
        return {(h.lane, h.n) for h in self.hits if 200 <= h.status < 300}


def lane_problems(
    hits: list[Hit],
    expected: dict[str, list[int]],
    dead: set[str] = frozenset(),  # type: ignore[assignment]
) -> list[str]:
    """What breaks the ordering contract in ``hits`` (module docstring); ``expected``:
    lane -> its numbers in publish order; ``dead``: delivery ids that are dead."""
    out: list[str] = []
    by_lane: dict[str, list[Hit]] = defaultdict(list)
    for h in hits:
        by_lane[h.lane].append(h)
    for lane, want in expected.items():
        got = sorted(by_lane.get(lane, []), key=lambda h: h.start)
        runs = [h.n for i, h in enumerate(got) if i == 0 or got[i - 1].n != h.n]
        if runs != want:
            out.append(f"{lane}: runs of numbers {runs[:60]} != publish order {want[:60]}")
        for prev, h in itertools.pairwise(got):
            if h.start < prev.end:
                out.append(f"{lane}: n={h.n} started while n={prev.n} was still open")
            if h.n != prev.n and not (200 <= prev.status < 300) and prev.delivery not in dead:
                out.append(f"{lane}: n={h.n} sent after n={prev.n} answered {prev.status}")
    return out


async def publish_lanes(
    publisher: Publisher,
    lanes: dict[str, str],
    per_lane: int,
    *,
    event_type: str = "lane.test",
    keyed: bool = True,
) -> dict[str, list[int]]:
    """Publish ``per_lane`` events into each lane (lane name -> app), the lanes
    concurrently, each lane's events one after another (publish order = n)."""
    from relay.domain.schema import EventIn

    async def one_lane(lane: str, app: str) -> None:
        for n in range(per_lane):
            event = EventIn(
                type=event_type,
                payload={"lane": lane, "n": n},
                app=app,
                ordering_key=lane if keyed else None,
            )
            await publisher.publish(event)

    await asyncio.gather(*(one_lane(lane, app) for lane, app in lanes.items()))
    return {lane: list(range(per_lane)) for lane in lanes}


def worker_env(store: Store, redis_url: str, **extra: str) -> dict[str, str]:
    s = store.settings
    env = {
        **os.environ,
        "RELAY_REDIS_URL": redis_url,
        "RELAY_KEY_PREFIX": s.key_prefix,
        "RELAY_SHARDS": str(s.shards),
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_WORKER_CONCURRENCY": "16",
        "RELAY_RETRY_SCHEDULE": "5ms,10ms,20ms,20ms,20ms,20ms,20ms,20ms,20ms,20ms",
        "RELAY_RETRY_JITTER": "0.2",
        "RELAY_BREAKER_THRESHOLD": "6",
        "RELAY_BREAKER_COOLDOWN": "50ms",
        "RELAY_BREAKER_COOLDOWN_MAX": "200ms",
        "RELAY_LOG_LEVEL": "warning",
    }
    env.update(extra)
    return env


async def start_workers(
    env: dict[str, str], count: int, logs: Path, name: str = "worker"
) -> list[asyncio.subprocess.Process]:
    procs = []
    for n in range(count):
        log = (logs / f"{name}-{n}.log").open("wb")
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable, "-m", "relay", "worker", env=env, cwd=ROOT, stderr=log
            )
        )
    return procs


async def wait_listening(store: Store, count: int, procs: list[Any]) -> None:
    """Until ``count`` subscribers listen on every shard's wake channel (workers up)."""
    deadline = time.monotonic() + 30
    for sk in store.keys.all_shards():
        while dict(await store.redis.pubsub_numsub(sk.wake)).get(sk.wake, 0) < count:
            assert all(p.returncode is None for p in procs), "a worker process exited"
            assert time.monotonic() < deadline, "worker processes did not come up"
            await asyncio.sleep(0.05)


async def stop_workers(procs: list[asyncio.subprocess.Process]) -> list[int | None]:
    for p in procs:
        if p.returncode is None:
            p.send_signal(signal.SIGTERM)
    try:
        return [await asyncio.wait_for(p.wait(), 30) for p in procs]
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()


until = partial(waiting.until, within=120.0, every=0.05)


async def settled(store: Store) -> bool:
    """Nothing due, scheduled or in flight: whatever is left waits for an operator."""
    counts = (await store.stats())["counts"]
    return counts["pending"] == 0 and counts["delivering"] == 0


async def dead_ids(store: Store) -> set[str]:
    ids: set[str] = set()
    cursor = None
    while True:
        rows, cursor = await store.list_deliveries(status="dead", limit=500, cursor=cursor)
        ids |= {r["id"] for r in rows}
        if cursor is None:
            return ids


async def dead_head(store: Store) -> None:
    sk = store.keys.shard(0)
    (h,) = (await store.claim(sk, limit=9, lease_ms=60_000, token_prefix="o", worker="w")).items
    entry = orjson.dumps({"attempt": h.attempts, "at": 1, "status_code": 410})
    assert await store.record(sk, [Outcome(h.id, h.token, "dead", 0, 410, "", entry)]) == [1]
