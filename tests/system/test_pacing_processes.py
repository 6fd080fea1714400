"""Shared limits measured across real ``python -m relay worker`` processes.

Each test starts worker subprocesses against the session's real redis-server, in its own
key prefix, and a local receiver on 127.0.0.1 that records every arrival (and, where it
matters, the endpoint's breaker state in Redis at that instant). What is asserted are
counts and invariants: requests per window, concurrent requests, the breaker's sequence
of states. The head-of-line tests also bound the publish-to-receipt delay of healthy
deliveries, because that bound is the requirement itself (see their docstrings).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from relay.domain import ids
from relay.endpoints.health import Health
from relay.queue.store import Store
from relay.redisproc import free_port
from tests.helpers.pacing import add_endpoint, publish, until

pytestmark = pytest.mark.realredis

# Head of line: every healthy delivery's publish-to-receipt delay, while a bad endpoint has
# 2,000 deliveries queued ahead of it (one worker process, 16 slots, 2 s HTTP timeout).
# What is left of the delay once the protections work is claiming (and deferring,
# uncharged) the backlog ahead, plus 0.25 s to notice that an endpoint known to answer
# fast has started hanging (docs/performance.md has the figures). 1.5 s keeps a margin on
# a loaded box and stays below the 2 s timeout, which is what an unprotected worker waits
# at the least.
HOL_BOUND = 1.5


# ---------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
async def _forget_keys(make_store: Any) -> AsyncIterator[None]:
    """Delete this test's keys afterwards: thousands of them left in the session's Redis
    would skew the memory measurements of tests that run after these."""
    yield
    store = await make_store()  # the same key prefix as the test's stores
    batch = []
    async for key in store.redis.scan_iter(match=f"{store.settings.key_prefix}:*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            await store.redis.unlink(*batch)
            batch = []
    if batch:
        await store.redis.unlink(*batch)


async def publish_many(store: Store, endpoint_id: str, count: int) -> list[str]:
    """``count`` deliveries to ``endpoint_id``, round robin over the store's shards."""
    shards = store.settings.shards
    out: list[str] = []
    for start in range(0, count, 100):
        out += await asyncio.gather(
            *(
                publish(store, endpoint_id, shard=n % shards)
                for n in range(start, min(start + 100, count))
            )
        )
    return out


@dataclass
class Arrival:
    path: str
    delivery_id: str
    attempt: int
    at: float  # time.time() in this process, when the request arrived
    seen: Any = None  # whatever ``Gauge.on_arrival`` returned


Behaviour = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Gauge:
    """A receiver on 127.0.0.1 that records arrivals and concurrent requests per path.

    ``behave[path]`` answers (default 200 at once); ``on_arrival`` runs before it. Slow
    behaviours wait on ``closing`` so teardown ends them at once instead of waiting.
    """

    url: str = ""
    arrivals: list[Arrival] = field(default_factory=list)
    behave: dict[str, Behaviour] = field(default_factory=dict)
    on_arrival: Callable[[Arrival], Awaitable[Any]] | None = None
    current: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    closing: asyncio.Event = field(default_factory=asyncio.Event)

    def at(self, path: str) -> list[Arrival]:
        return [a for a in self.arrivals if a.path == path]

    def hold(self, seconds: float, status: int = 200) -> Behaviour:
        async def answer(_: web.Request) -> web.StreamResponse:
            try:
                await asyncio.wait_for(self.closing.wait(), seconds)
            except TimeoutError:
                pass
            return web.Response(status=status)

        return answer


def status(code: int) -> Behaviour:
    async def answer(_: web.Request) -> web.StreamResponse:
        return web.Response(status=code)

    return answer


@asynccontextmanager
async def gauge() -> AsyncIterator[Gauge]:
    g = Gauge()

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        arrival = Arrival(
            request.path,
            request.headers.get("x-relay-delivery-id", ""),
            int(request.headers.get("x-relay-attempt", "0")),
            time.time(),
        )
        g.current[request.path] = g.current.get(request.path, 0) + 1
        g.peak[request.path] = max(g.peak.get(request.path, 0), g.current[request.path])
        try:
            if g.on_arrival is not None:
                arrival.seen = await g.on_arrival(arrival)
            g.arrivals.append(arrival)
            behave = g.behave.get(request.path)
            return await behave(request) if behave else web.Response(text="ok")
        finally:
            g.current[request.path] -= 1

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    g.url = f"http://127.0.0.1:{port}"
    try:
        yield g
    finally:
        g.closing.set()  # every held request answers now; nothing waits out its sleep
        await runner.cleanup()


@asynccontextmanager
async def workers(
    redis_url: str, store: Store, logs: Path, count: int, **env: str
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """``count`` ``python -m relay worker`` processes on ``store``'s key prefix, started.

    Info-level logs (JSON) go to files in ``logs``: "worker.started" says a worker is up;
    warnings and errors are printed at the end.
    """
    base = {
        **os.environ,
        "RELAY_REDIS_URL": redis_url,
        "RELAY_KEY_PREFIX": store.settings.key_prefix,
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_LOG_LEVEL": "info",
        "RELAY_LOG_FORMAT": "json",
        "RELAY_SHUTDOWN_GRACE": "0.5s",
        **{f"RELAY_{k.upper()}": v for k, v in env.items()},
    }
    procs: list[asyncio.subprocess.Process] = []
    files = []
    paths: list[Path] = []
    try:
        for _ in range(count):
            name = "pw-" + uuid.uuid4().hex[:6]
            paths.append(logs / f"{name}.log")
            err = paths[-1].open("wb")
            files.append(err)
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "relay",
                    "worker",
                    env={**base, "RELAY_WORKER_ID": name},
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=err,
                )
            )
        await until(lambda: _started(paths, procs), within=30)
        yield procs
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGCONT)  # in case a test paused it
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                await asyncio.wait_for(p.wait(), 10)
            except TimeoutError:
                p.kill()
                await p.wait()
        for f in files:
            f.close()
        for path in paths:
            bad = [ln for ln in path.read_text(errors="replace").splitlines() if '"info"' not in ln]
            if bad:
                print(f"--- {path.name}", *bad[-20:], sep="\n")


async def _started(paths: list[Path], procs: list[asyncio.subprocess.Process]) -> bool:
    for p in procs:
        assert p.returncode is None, f"a worker exited with {p.returncode}"
    return all(b'"worker.started"' in path.read_bytes() for path in paths)


# ---------------------------------------------------------------------- head of line


async def _healthy_delays(
    g: Gauge, store: Store, healthy: dict[str, Any], count: int, every: float
) -> list[float]:
    """Publish ``count`` healthy deliveries ``every`` seconds apart; their delays."""
    published: dict[str, float] = {}
    for _ in range(count):
        t = time.time()
        published[await publish(store, healthy["id"])] = t
        await asyncio.sleep(every)
    await until(lambda: _arrived(g, "/healthy", count), within=20)
    got = {a.delivery_id: a.at for a in g.at("/healthy")}
    return [got[d] - t for d, t in published.items()]


async def _arrived(g: Gauge, path: str, count: int) -> bool:
    return len({a.delivery_id for a in g.at(path)}) >= count


async def test_hanging_endpoint_with_deep_backlog_does_not_block_healthy(
    make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    """An endpoint that never answers (until the 2 s timeout) with 2,000 queued, new to
    the worker: it gets a quarter of the slots (its window grows only as it succeeds),
    the rest claim past its backlog, deferring it. Fails without per-endpoint windows
    (the slots that slow sends free go to the same backlog, until the timeouts open the
    breaker); slow start (a window that grows with successes) keeps it well inside.
    """
    store = await make_store()
    async with gauge() as g:
        g.behave["/hang"] = g.hold(30)
        bad = await add_endpoint(store, g.url + "/hang")
        healthy = await add_endpoint(store, g.url + "/healthy")
        await publish_many(store, bad["id"], 2000)
        async with workers(
            redis_server.url, store, tmp_path, 1, http_timeout="2", worker_concurrency="16"
        ):
            await until(lambda: _arrived(g, "/hang", 1))
            delays = await _healthy_delays(g, store, healthy, 45, 0.1)
        print("hang: worst", max(delays), "delays", [round(d, 2) for d in delays])
        print("hang: bad arrivals", len(g.at("/hang")), "peak", g.peak)
        assert max(delays) < HOL_BOUND


async def test_rate_limited_endpoint_with_deep_backlog_does_not_block_healthy(
    make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    """An endpoint limited to 1 request/s with 2,000 queued: its claims over the limit go
    back to due (uncharged, spread out) instead of waiting in a slot, and it still gets
    no more than its rate. Fails with each wait spent holding a worker slot: the healthy
    deliveries have not all arrived 20 s later.
    """
    store = await make_store()
    async with gauge() as g:
        bad = await add_endpoint(store, g.url + "/paced", rate_limit=1)
        healthy = await add_endpoint(store, g.url + "/healthy")
        await publish_many(store, bad["id"], 2000)
        async with workers(
            redis_server.url, store, tmp_path, 1, http_timeout="2", worker_concurrency="16"
        ):
            await until(lambda: _arrived(g, "/paced", 1))
            delays = await _healthy_delays(g, store, healthy, 30, 0.1)
        paced = g.at("/paced")
        print("paced: worst", max(delays), "delays", [round(d, 2) for d in delays])
        print("paced: bad arrivals", len(paced), "peak", g.peak)
        assert max(delays) < HOL_BOUND
        assert len(paced) <= paced[-1].at - paced[0].at + 2  # 1/s (and a burst of 1)


async def test_warm_endpoint_that_starts_hanging(
    make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    """An endpoint that answered 100 times (its window is every slot) starts hanging with
    2,000 queued at once. Its sends count as slow after 10x its usual time (0.25 s here)
    rather than slow_send_after (1 s), freeing the slots for the others; without that the
    delay comes close to the bound.
    """
    store = await make_store()
    health = Health(store)
    async with gauge() as g:
        bad = await add_endpoint(store, g.url + "/turns")
        healthy = await add_endpoint(store, g.url + "/healthy")
        async with workers(
            redis_server.url, store, tmp_path, 1, http_timeout="2", worker_concurrency="16"
        ):
            await publish_many(store, bad["id"], 100)
            await until(lambda: _arrived(g, "/turns", 100))
            # A deep backlog appears at once: parked while disabled, then resumed.
            await store.put_endpoint({**bad, "enabled": False})
            held = await publish_many(store, bad["id"], 2000)
            sk = store.keys.shard(0)
            await until(lambda: _count(store.redis.zcard(sk.held(bad["id"])), len(held)))
            g.behave["/turns"] = g.hold(30)
            await store.put_endpoint(bad)
            assert await health.resume(bad["id"]) == 2000
            await until(lambda: _arrived(g, "/turns", 101))
            delays = await _healthy_delays(g, store, healthy, 30, 0.1)
        print("warm: worst", max(delays), "delays", [round(d, 2) for d in delays])
        print("warm: bad arrivals", len(g.at("/turns")), "peak", g.peak)
        assert max(delays) < HOL_BOUND


async def _count(pending: Awaitable[int], want: int) -> bool:
    return await pending >= want


# ---------------------------------------------------------------------- shared limits


async def _breaker_seen(store: Store, endpoint_id: str) -> tuple[dict[str, str], int]:
    """The endpoint's breaker hash and Redis's clock (ms), read together."""
    async with store.redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(store.keys.endpoint_state(endpoint_id).breaker)
        pipe.time()
        raw, (sec, usec) = await pipe.execute()
    return raw, int(sec) * 1000 + int(usec) // 1000


async def test_breaker_opens_at_threshold_across_processes_then_one_probe_per_window(
    make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    """Three worker processes, an endpoint answering 500 (then, from the third probe, 200).

    The first two failures are sent by two different processes (the others are paused
    with SIGSTOP while one sends), so a count kept per process would not reach the
    threshold of 3. The receiver records the breaker hash and Redis's clock at every
    arrival: closed with 0, 1, 2 failures, then nothing until the reopen time, then one
    probe per half-open window (failures 3, 4, 5), cooldown doubling and capped, then
    closed. Fails with settle.lua opening at ``failures > threshold`` (the fourth arrival
    comes closed, ``('closed', 3)``), and with admit.lua's half-open branch letting every
    token through (several requests arrive in one half-open window).
    """
    store = await make_store()
    env = {
        "breaker_threshold": "3",
        "breaker_cooldown": "500ms",
        "breaker_cooldown_max": "750ms",
        "retry_schedule": "60s",  # a failed delivery is not retried inside the test
        "retry_jitter": "0",
        "http_timeout": "1",
    }
    async with gauge() as g:
        ep = await add_endpoint(store, g.url + "/flaky")
        g.on_arrival = lambda _: _breaker_seen(store, ep["id"])
        answers = iter([500] * 5)  # then 200 for good

        async def flaky(_: web.Request) -> web.StreamResponse:
            return web.Response(status=next(answers, 200))

        g.behave["/flaky"] = flaky

        async def failures_are(n: int) -> bool:
            raw, _ = await _breaker_seen(store, ep["id"])
            return int(raw.get("failures", 0)) == n

        first: list[str] = []
        async with workers(redis_server.url, store, tmp_path, 3, **env) as procs:
            for n, sender in ((1, 0), (2, 1)):  # one failure from each of two processes
                for i, proc in enumerate(procs):
                    proc.send_signal(signal.SIGCONT if i == sender else signal.SIGSTOP)
                first.append(await publish(store, ep["id"]))
                await until(lambda n=n: failures_are(n))  # type: ignore[misc]
                raw, _ = await _breaker_seen(store, ep["id"])
                assert raw.get("state", "closed") == "closed"
            for proc in procs:
                proc.send_signal(signal.SIGCONT)
            first.append(await publish(store, ep["id"]))
            await until(lambda: failures_are(3))
            opened, _ = await _breaker_seen(store, ep["id"])
            rest = await publish_many(store, ep["id"], 8)  # published while it is open
            await until(lambda: _succeeded(store, rest, 6), within=20)
        final, _ = await _breaker_seen(store, ep["id"])

    seq = [
        (a.seen[0].get("state", "closed"), int(a.seen[0].get("failures", 0))) for a in g.arrivals
    ]
    print("breaker sequence", seq, [round(a.at - g.arrivals[0].at, 2) for a in g.arrivals])
    assert (opened.get("state"), opened.get("opened")) == ("open", "1")
    # Opened on exactly the third consecutive failure, counted over the processes.
    assert seq[:3] == [("closed", 0), ("closed", 1), ("closed", 2)]
    senders = [(await store.get_delivery(d))["attempt_log"][0]["worker"] for d in first]  # type: ignore[index]
    assert senders[0] != senders[1]
    # Then one probe per half-open window: two fail (reopening it), the third succeeds.
    assert seq[3:6] == [("half_open", 3), ("half_open", 4), ("half_open", 5)]
    assert seq[6:] == [("closed", 0)] * 5
    assert final["state"] == "closed"
    # Nothing reached the receiver while it was open: each probe came at or after the
    # reopen time in force, and the cooldown doubled after a failed probe, capped.
    probes = [a.seen for a in g.arrivals[3:6]]
    assert [int(raw["cooldown"]) for raw, _ in probes] == [500, 750, 750]
    for raw, now in probes:
        assert now >= int(raw["open_until"]) == int(raw["opened_at"]) + int(raw["cooldown"])
    # Deferred (while open, while a probe was out) but never charged for it.
    for d in first + rest:
        row = await store.get_delivery(d)
        assert row is not None
        codes = [e["status_code"] for e in row["attempt_log"]]
        assert row["attempts"] == len(codes) == 1, (row["attempts"], codes)
        assert codes == ([200] if row["status"] == "succeeded" else [500])


async def _rows(store: Store, delivery_ids: list[str]) -> list[dict[str, Any]]:
    """The deliveries of ``delivery_ids``, whatever shards they are on."""
    rows: list[dict[str, Any]] = []
    for sk in store.keys.all_shards():
        mine = [d for d in delivery_ids if ids.shard_of(d) == sk.shard]
        rows += await store.get_deliveries(sk, mine)
    return rows


async def _succeeded(store: Store, delivery_ids: list[str], want: int) -> bool:
    rows = await _rows(store, delivery_ids)
    return sum(r["status"] == "succeeded" for r in rows) >= want


@pytest.mark.parametrize("shards", [1, 12])
async def test_rate_limit_and_max_in_flight_hold_across_four_processes(
    make_store: Any, redis_server: Any, tmp_path: Path, shards: int
) -> None:
    """Four worker processes drain two limited endpoints at once, each endpoint's
    deliveries on one shard, or round robin over 12 (``RELAY_SHARDS=12``: the limits are
    the endpoint's own, ``{ep_X}``, one for all shards and workers).

    ``/paced`` (rate_limit 20/s, a backlog of 400): the arrivals in a 10 s window that
    starts one second after the first are counted; they must be within 10% of 200.
    ``/capped`` (max_in_flight 2, 60 deliveries, each held 200 ms by the receiver): the
    receiver never sees a third concurrent request, sees two at some point, and all 60
    arrive. Every delivery is charged exactly the requests it made, however often it was
    deferred. Fails with admit.lua's ``ZADD`` of the in-flight slot removed (the receiver
    sees many concurrent requests), and with the GCRA check removed (all arrive in the
    first second, none in the window).
    """
    rate = 20
    store = await make_store(shards=shards)
    async with gauge() as g:
        g.behave["/capped"] = g.hold(0.2)
        paced = await add_endpoint(store, g.url + "/paced", rate_limit=rate)
        capped = await add_endpoint(store, g.url + "/capped", max_in_flight=2)
        paced_dlv = await publish_many(store, paced["id"], 400)  # more than 11 s can take
        capped_dlv = await publish_many(store, capped["id"], 60)
        async with workers(redis_server.url, store, tmp_path, 4, shards=str(shards)):
            await until(lambda: _arrived(g, "/paced", 1))
            start = g.at("/paced")[0].at + 1.0  # a 10 s window after the first second
            await asyncio.sleep(start + 10.0 - time.time())
            counted = [a for a in g.at("/paced") if start <= a.at < start + 10.0]
            await until(lambda: _succeeded(store, capped_dlv, 60), within=20)
        paced_seen = len(g.at("/paced"))
    capped_at = [round(a.at - g.at("/capped")[0].at, 2) for a in g.at("/capped")]
    print("rate: arrivals in the 10 s window:", len(counted), "target", 10 * rate)
    print("in-flight: peak concurrent requests", g.peak["/capped"], "arrivals at", capped_at)
    assert abs(len(counted) - 10 * rate) <= rate  # within 10% of R over 10 s
    assert g.peak["/capped"] == 2
    assert len(g.at("/capped")) == 60
    assert {ids.shard_of(d) for d in paced_dlv + capped_dlv} == set(range(shards))
    rows = await _rows(store, capped_dlv)
    assert [r["attempts"] for r in rows] == [1] * 60
    rows = await _rows(store, paced_dlv)
    assert sum(r["attempts"] for r in rows) == paced_seen  # deferral is never charged


# ---------------------------------------------------------------------- auto-disable


async def test_failing_endpoint_is_disabled_held_and_resumed(
    make_store: Any, make_api: Any, redis_server: Any, tmp_path: Path
) -> None:
    store = await make_store(retry_schedule=(0.1,) * 30)  # attempts never run out here
    api = await make_api(store)
    sk = store.keys.shard(0)
    env = {
        "disable_after": "1s",
        "breaker_threshold": "3",
        "breaker_cooldown": "200ms",
        "breaker_cooldown_max": "400ms",
        "retry_schedule": ",".join(["100ms"] * 30),
        "retry_jitter": "0",
    }
    async with gauge() as g:
        g.behave["/down"] = status(500)
        async with api("POST", "/v1/endpoints", json={"url": g.url + "/down"}) as r:
            ep = await r.json()

        async def read() -> dict[str, Any]:
            async with api("GET", f"/v1/endpoints/{ep['id']}") as r:
                assert r.status == 200
                return await r.json()  # type: ignore[no-any-return]

        async def disabled() -> bool:
            return not (await read())["enabled"]

        async def all_held(ids: list[str]) -> bool:
            return await store.redis.zcard(sk.held(ep["id"])) == len(ids)

        dlv = await publish_many(store, ep["id"], 5)
        async with workers(redis_server.url, store, tmp_path, 2, **env):
            await until(disabled)
            seen = await read()
            late = await publish(store, ep["id"])  # published while disabled
            await until(lambda: all_held([*dlv, late]))
            arrivals = len(g.at("/down"))
            held = {d: await store.get_delivery(d) for d in [*dlv, late]}
            g.behave["/down"] = status(200)
            async with api("PATCH", f"/v1/endpoints/{ep['id']}", json={"enabled": True}) as r:
                assert r.status == 200
            await until(lambda: _succeeded(store, [*dlv, late], 6))
        after = await read()

    assert seen["disabled_reason"].startswith("auto-disabled")
    assert seen["breaker"]["failing_since"] is not None
    print("auto-disable: requests before disabling", arrivals)
    for row in held.values():
        assert row is not None
        assert (row["status"], row["held"]) == ("held", "endpoint_disabled")
        assert row["attempts"] == len(row["attempt_log"])  # holding charged nothing
        assert all(e["status_code"] == 500 for e in row["attempt_log"])
    assert held[late]["attempts"] == 0
    assert await store.redis.zcard(sk.dead) == 0
    assert after["enabled"] is True and "disabled_reason" not in after
    assert after["breaker"]["state"] == "closed"
    for d in [*dlv, late]:
        row = await store.get_delivery(d)
        assert row is not None and "held" not in row
        codes = [e["status_code"] for e in row["attempt_log"]]
        assert row["attempts"] == len(codes) and codes[-1] == 200 and codes.count(200) == 1
