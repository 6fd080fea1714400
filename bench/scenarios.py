"""The measured scenarios. Each one starts its own fresh redis-server and child processes
and stops them again; all of them deliver to the one shared receiver.

Times: ``drain`` rates run from the receiver's first arrival to its last (process
start-up excluded, the same for every system); relay's ``e2e`` rates run from the first
publish to the last arrival, with the workers already up and idle.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench import load, memory, payloads
from bench.common import (
    BENCH,
    HOST,
    CpuMeter,
    Procs,
    Receiver,
    RedisMeter,
    check_alive,
    drain_rate,
    drain_with_cpu,
)
from bench.payloads import SECRET
from relay.queue.keys import Keys
from relay.redisproc import RedisServer, free_port

TOKEN = "bench-token"  # the API token of a throwaway API on loopback, not a credential
SHARD = Keys("relay", 1).shard(0)


@dataclass
class Cfg:
    n: int
    concurrency: int
    clients: int
    rate: float
    seconds: float
    event_loop: str = ""  # RELAY_EVENT_LOOP of relay's processes ("": relay's default, uvloop)


def relay_argv(command: str) -> list[str]:
    return [sys.executable, "-m", "relay", command]


def _timeout(n: int) -> float:
    return 60 + n / 100


@dataclass
class Relay:
    """One relay deployment: a fresh Redis, one API process, its endpoints and workers."""

    procs: Procs
    cfg: Cfg
    name: str
    redis: RedisServer
    api_port: int
    env: dict[str, str]
    api: Any
    endpoint_ids: list[str] = field(default_factory=list)
    workers: list[Any] = field(default_factory=list)

    def start_workers(self, k: int) -> None:
        for _ in range(k):
            name = f"{self.name}-worker{len(self.workers)}"
            self.workers.append(self.procs.spawn(name, relay_argv("worker"), self.env))

    def watch(self) -> list[tuple[Any, str]]:
        return [(self.api, f"{self.name}-api")] + [
            (w, f"{self.name}-worker{i}") for i, w in enumerate(self.workers)
        ]

    async def wait_subscribed(self, meter: RedisMeter, k: int) -> None:
        """Workers are up once they listen on the wake channel."""
        deadline = time.monotonic() + 30
        while dict(meter.client.pubsub_numsub(SHARD.wake)).get(SHARD.wake, 0) < k:
            for proc, name in self.watch():
                check_alive(proc, name)
            if time.monotonic() > deadline:
                raise TimeoutError("relay workers did not subscribe within 30s")
            await asyncio.sleep(0.05)

    def stop_workers(self) -> None:
        for w in self.workers:
            self.procs.stop(w)


@asynccontextmanager
async def relay(
    receiver: Receiver,
    name: str,
    cfg: Cfg,
    endpoints: int = 1,
    extra_env: dict[str, str] | None = None,
    redis_delay_ms: float = 0.0,
    redis_binary: Path | None = None,
) -> AsyncIterator[Relay]:
    procs = Procs()
    try:
        srv = procs.fresh_redis(name, str(redis_binary) if redis_binary else None)
        redis_url = srv.url
        if redis_delay_ms > 0:  # relay reaches its Redis through a delaying proxy
            redis_url = await _delay_proxy(procs, name, srv, redis_delay_ms)
        port = free_port()
        env = {
            "RELAY_REDIS_URL": redis_url,
            "RELAY_API_TOKENS": TOKEN,
            "RELAY_HOST": HOST,
            "RELAY_PORT": str(port),
            "RELAY_LOG_LEVEL": "warning",
            "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
            "RELAY_WORKER_CONCURRENCY": str(cfg.concurrency),
            **({"RELAY_EVENT_LOOP": cfg.event_loop} if cfg.event_loop else {}),
            **(extra_env or {}),
        }
        api = procs.spawn(f"{name}-api", relay_argv("api"), env)
        r = Relay(procs, cfg, name, srv, port, env, api)
        base = f"http://{HOST}:{port}"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(headers=auth) as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    async with http.get(base + "/readyz") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                check_alive(api, f"{name}-api")
                if time.monotonic() > deadline:
                    raise TimeoutError("relay api not ready within 30s")
                await asyncio.sleep(0.05)
            for _ in range(endpoints):
                spec = {"url": receiver.url, "secret": SECRET}
                async with http.post(base + "/v1/endpoints", json=spec) as resp:
                    if resp.status != 201:
                        raise RuntimeError(f"endpoint create: {resp.status} {await resp.text()}")
                    r.endpoint_ids.append((await resp.json())["id"])
        yield r
    finally:
        procs.close()


async def _delay_proxy(procs: Procs, name: str, srv: RedisServer, delay_ms: float) -> str:
    """Start bench/delay_proxy.py in front of ``srv``; its URL once it accepts."""
    listen = free_port()
    argv = [sys.executable, str(BENCH / "delay_proxy.py"), "--listen", str(listen)]
    proxy = procs.spawn(
        f"{name}-proxy", [*argv, "--to", str(srv.port), "--delay-ms", str(delay_ms)]
    )
    deadline = time.monotonic() + 10
    while True:
        check_alive(proxy, f"{name}-proxy")
        try:
            _, w = await asyncio.open_connection(HOST, listen)
            w.close()
            return f"redis://{HOST}:{listen}/0"
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError("delay proxy did not listen within 10s") from None
            await asyncio.sleep(0.05)


# ---------------------------------------------------------------------------- limit


async def limit(receiver: Receiver, cfg: Cfg) -> dict[str, Any]:
    await receiver.reset()
    pids = {"client": os.getpid(), "receiver": receiver.proc.pid}
    client = asyncio.create_task(load.limit(receiver.url, cfg.n, cfg.concurrency))
    st, cpu = await drain_with_cpu(receiver, cfg.n, _timeout(cfg.n), pids)
    done = await client
    return {**drain_rate(st), "client_seconds": done["client_seconds"], "cpu_ms": cpu}


async def limit_uvloop(receiver: Receiver, cfg: Cfg) -> dict[str, Any]:
    """The same raw client on uvloop's event loop (relay's default since issue 17), in a
    process of its own: the limit on the loop relay runs on."""
    await receiver.reset()
    code = (
        "import uvloop; from bench import load; "
        f"uvloop.run(load.limit({receiver.url!r}, {cfg.n}, {cfg.concurrency}))"
    )
    procs = Procs()
    try:
        client = procs.spawn("limit-uvloop", [sys.executable, "-c", code])
        pids = {"client": client.pid, "receiver": receiver.proc.pid}
        watch = [(client, "limit-uvloop")]
        st, cpu = await drain_with_cpu(receiver, cfg.n, _timeout(cfg.n), pids, watch)
    finally:
        procs.close()
    return {**drain_rate(st), "cpu_ms": cpu}


# ---------------------------------------------------------------------------- relay


def _pids(r: Relay, receiver: Receiver, api: bool = False) -> dict[str, int]:
    pids = {f"worker{i}": w.pid for i, w in enumerate(r.workers)}
    pids |= {"redis": r.redis.pid or 0, "receiver": receiver.proc.pid}
    return pids | ({"api": r.api.pid, "publisher": os.getpid()} if api else {})


async def _publish(r: Relay, receiver: Receiver, cfg: Cfg, events: int) -> dict[str, Any]:
    """Publish with no worker running: ingest rate and CPU per event of API, Redis, client."""
    cpu = CpuMeter({"api": r.api.pid, "redis": r.redis.pid or 0, "publisher": os.getpid()})
    cpu.begin()
    pub = await load.publish(r.api_port, TOKEN, events, cfg.clients)
    keep = ("events", "deliveries", "clients", "seconds", "per_s")
    return {**{k: pub[k] for k in keep}, "cpu_ms": cpu.per_unit_ms(events)}


async def relay_e2e(receiver: Receiver, cfg: Cfg, workers: int) -> dict[str, Any]:
    """Workers up and idle; publish N over HTTP; first publish to last receipt."""
    async with relay(receiver, f"e2e{workers}", cfg) as r:
        meter = RedisMeter(r.redis.url)
        try:
            r.start_workers(workers)
            await r.wait_subscribed(meter, workers)
        finally:
            meter.close()
        await receiver.reset()
        pub = asyncio.create_task(load.publish(r.api_port, TOKEN, cfg.n, cfg.clients))
        pids = _pids(r, receiver, api=True)
        st, cpu = await drain_with_cpu(receiver, cfg.n, _timeout(cfg.n), pids, r.watch())
        published = await pub
    span = st["last"] - published["started"]
    return {
        **drain_rate(st),
        "e2e_seconds": round(span, 3),
        "e2e_per_s": round(cfg.n / span, 1),
        "publish_per_s": published["per_s"],
        "cpu_ms": cpu,
    }


async def relay_drain(
    receiver: Receiver,
    cfg: Cfg,
    workers: int,
    redis_delay_ms: float = 0.0,
    structures: bool = False,
    name: str = "",
) -> dict[str, Any]:
    """Publish N with no worker (ingest, memory per pending delivery), then start workers:
    drain rate, Redis cost (commands, round trips, CPU) per delivery and memory per
    retained succeeded delivery. ``redis_delay_ms``: relay talks to Redis through a proxy
    adding that much each way. ``structures``: also ``memory.scan`` pending and retained,
    outside the drain window (the scans' own Redis CPU is not in the drain's)."""
    name = name or f"drain{workers}" + (f"-rtt{2 * redis_delay_ms:g}" if redis_delay_ms else "")
    async with relay(receiver, name, cfg, redis_delay_ms=redis_delay_ms) as r:
        meter = RedisMeter(r.redis.url)
        try:
            s0 = meter.snapshot()
            m0 = await memory.scan(r.redis.url) if structures else {}
            ingest = await _publish(r, receiver, cfg, cfg.n)
            m1 = await memory.scan(r.redis.url) if structures else {}
            await receiver.reset()
            s1 = meter.snapshot()
            r.start_workers(workers)
            pids = _pids(r, receiver)
            st, cpu = await drain_with_cpu(receiver, cfg.n, _timeout(cfg.n), pids, r.watch())
            await asyncio.sleep(0.5)  # the last group commit lands
            s2 = meter.snapshot()
            succeeded = meter.client.zcard(SHARD.succeeded)
            m2 = await memory.scan(r.redis.url) if structures else {}
        finally:
            meter.close()
    if succeeded != cfg.n:
        raise RuntimeError(f"relay drain: {succeeded} succeeded of {cfg.n}")
    out = {
        **drain_rate(st),
        "cpu_ms": cpu,
        "ingest": ingest,
        "redis": RedisMeter.delta(s1, s2, cfg.n),
        "memory_pending_bytes": round((s1["used_memory"] - s0["used_memory"]) / cfg.n),
        "memory_succeeded_bytes": round((s2["used_memory"] - s0["used_memory"]) / cfg.n),
    }
    if structures:
        out["memory_breakdown"] = {
            "deliveries": cfg.n,
            "pending": memory.breakdown(m0, m1, cfg.n),
            "retained": memory.breakdown(m0, m2, cfg.n),
        }
    return out


async def relay_drain_random(receiver: Receiver, cfg: Cfg) -> dict[str, Any]:
    """``relay_drain`` of one worker, memory per structure included, with payloads of
    random bytes (base64'd): the memory figures for bodies deflate can barely shrink."""
    kind = payloads.KIND
    payloads.KIND = "random"
    try:
        return await relay_drain(receiver, cfg, 1, 0.0, True, name="drain1-random")
    finally:
        payloads.KIND = kind


def percentiles(values: list[float]) -> dict[str, float]:
    v = sorted(values)

    def rank(p: float) -> float:
        return round(v[min(len(v) - 1, max(0, int(p / 100 * len(v) + 0.5) - 1))], 2)

    return {"p50": rank(50), "p95": rank(95), "p99": rank(99), "max": round(v[-1], 2)}


async def relay_latency(receiver: Receiver, cfg: Cfg) -> dict[str, Any]:
    """Steady offered load with one worker: publish-to-receipt percentiles."""
    async with relay(receiver, "latency", cfg) as r:
        meter = RedisMeter(r.redis.url)
        try:
            r.start_workers(1)
            await r.wait_subscribed(meter, 1)
        finally:
            meter.close()
        await receiver.reset(record=True)
        cpu = CpuMeter(_pids(r, receiver, api=True))
        meter = RedisMeter(r.redis.url)
        try:
            s1 = meter.snapshot()
            cpu.begin()
            sent = await load.steady(r.api_port, TOKEN, cfg.rate, cfg.seconds)
            await receiver.wait_for("unique_ids", sent["events"], 60, r.watch())
            busy = cpu.per_unit_ms(sent["events"])
            await asyncio.sleep(0.5)
            s2 = meter.snapshot()
        finally:
            meter.close()
        arrivals = await receiver.arrivals()
    lat = [(a[1] - a[2]) * 1000 for a in arrivals if a[2] is not None]
    return {
        "rate": cfg.rate,
        "seconds": cfg.seconds,
        "events": sent["events"],
        "offered_per_s": sent["offered_per_s"],
        "receipt_ms": percentiles(lat),
        "publish_answer_ms": percentiles(sent["answer_ms"]),
        "cpu_ms": busy,
        # publish and delivery together, per event: at a steady trickle little is batched
        "redis": RedisMeter.delta(s1, s2, sent["events"]),
    }


async def relay_retry(receiver: Receiver, cfg: Cfg) -> dict[str, Any]:
    """An endpoint failing a deterministic half of all requests, 100 ms retry delays."""
    events = max(500, cfg.n // 2)
    schedule = "100ms,100ms,100ms"
    # The circuit breaker would open on 5 failures in a row (1 in 32 at a 50% failure
    # rate) and hold the endpoint for 30 s: this run measures the retry path itself.
    env = {"RELAY_RETRY_SCHEDULE": schedule, "RELAY_BREAKER_THRESHOLD": "1000000"}
    async with relay(receiver, "retry", cfg, extra_env=env) as r:
        meter = RedisMeter(r.redis.url)
        try:
            await load.publish(r.api_port, TOKEN, events, cfg.clients)
            await receiver.reset(fail_pct=50, max_attempts=4)
            s1 = meter.snapshot()
            r.start_workers(1)
            pids = _pids(r, receiver)
            within = _timeout(events * 2)
            st, cpu = await drain_with_cpu(receiver, events, within, pids, r.watch(), "finished")
            await asyncio.sleep(0.5)
            s2 = meter.snapshot()
            succeeded = meter.client.zcard(SHARD.succeeded)
            dead = meter.client.zcard(SHARD.dead)
        finally:
            meter.close()
    if succeeded + dead != events or succeeded != st["ok"]:
        raise RuntimeError(f"retry: {succeeded}+{dead} finished of {events}; receiver {st}")
    rate = drain_rate(st)
    return {
        "events": events,
        "schedule": schedule,
        "attempts": st["count"],
        "failed_attempts": st["failed"],
        "succeeded": succeeded,
        "dead": dead,
        "seconds": rate["seconds"],
        "attempts_per_s": rate["per_s"],
        "redis": RedisMeter.delta(s1, s2, st["count"]),
        "cpu_ms": cpu,
    }
