"""Hardening, the worker's and the queue's side: Redis failure classes, the
time-based retry of outcome writes, admission that fails closed, the rate clamp in
admit.lua, and JSON logs whose tracebacks are one structured field. The real-parts
proof of guarantee 2 through a Redis stall is ``tests/redis/test_redis_stall.py``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import orjson
import pytest
import structlog
from redis.exceptions import (
    BusyLoadingError,
    ConnectionError,
    MasterDownError,
    ReadOnlyError,
    ResponseError,
    TimeoutError,
)

from relay.delivery.admission import Admission
from relay.delivery.groupcommit import GroupCommit, log_failed, with_retries
from relay.delivery.inflight import InFlight
from relay.delivery.stats import Stats
from relay.endpoints.health import Health, Windows
from relay.queue.errors import is_transient, is_unavailable
from relay.queue.keys import Keys
from relay.queue.store import Claimed, Store
from tests.helpers.worker import add_endpoint

REFUSALS = [
    TimeoutError("Timeout reading from 127.0.0.1:6379"),  # redis-py's, not the builtin
    ConnectionError("Connection closed by server."),
    ReadOnlyError("You can't write against a read only replica."),
    MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
    BusyLoadingError("Redis is loading the dataset in memory"),
    ResponseError("BUSY Redis is busy running a script. You can only call SCRIPT KILL"),
    ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's failing"),
    ResponseError("TRYAGAIN Multiple keys request during rehashing of slot"),
    ResponseError("CLUSTERDOWN The cluster is down"),
    ResponseError("NOREPLICAS Not enough good replicas to write."),
]


@pytest.mark.parametrize("exc", REFUSALS, ids=lambda e: type(e).__name__ + ":" + str(e)[:12])
def test_redis_refusals_are_transient_and_unavailable(exc: Exception) -> None:
    """redis-py's TimeoutError, READONLY, BUSY, MISCONF, MASTERDOWN are retried by the
    worker and answered 503 by the API (unguarded: a 500, and the outcome dropped)."""
    assert is_transient(exc)
    assert is_unavailable(exc)


@pytest.mark.parametrize(
    "exc", [ResponseError("ERR wrong number of arguments"), ValueError("bug"), KeyError("x")]
)
def test_real_errors_are_not_transient(exc: Exception) -> None:
    assert not is_transient(exc)
    assert not is_unavailable(exc)


async def test_a_write_is_retried_until_its_deadline_then_raised() -> None:
    calls: list[float] = []

    async def write(key: Any, items: list[Any]) -> list[int]:
        calls.append(time.monotonic())
        if len(calls) < 4:
            raise ReadOnlyError("You can't write against a read only replica.")
        return [1] * len(items)

    assert await with_retries(write, "k", [1, 2], lambda: time.monotonic() + 5) == [1, 1]
    assert len(calls) == 4

    async def never(key: Any, items: list[Any]) -> list[int]:
        raise TimeoutError("Timeout reading from 127.0.0.1:6379")

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await with_retries(never, "k", [1], lambda: started + 0.3)
    assert 0.3 <= time.monotonic() - started < 1.5  # stopped at the deadline, not before


async def test_a_failed_write_nobody_waits_for_is_logged() -> None:
    """A settle that fails (its result never awaited) is logged as write.failed, once, and
    leaves nothing behind (no future whose exception nobody retrieves)."""

    async def broken(key: Any, items: list[Any]) -> list[Any]:
        raise ValueError("not transient")

    gc_commit = GroupCommit(broken, "test", budget=0.1)
    gc_commit.start()
    with structlog.testing.capture_logs() as logs:
        gc_commit.submit_then("k", 1, log_failed)
        await gc_commit.drain()
    await gc_commit.stop()
    assert [(e["event"], e["error"]) for e in logs] == [("write.failed", "not transient")]


async def test_a_key_whose_write_is_retried_holds_back_only_its_own_items() -> None:
    """Shard 0's outcome write stuck retrying (its slot moving, its node failing over)
    must not stop shard 1's from being written, or every send of the worker stays
    tracked and it stops claiming from every shard. Each key's items are still written
    in order, one write at a time. Fails with the keys written one after the other
    (shard 1's write waits for shard 0's, the wait below times out), and with a writer
    started for every key with items, busy or not (s0's item 3 written beside its first
    write)."""
    gate = asyncio.Event()
    writes: list[tuple[str, list[int]]] = []
    running: dict[str, int] = {"s0": 0, "s1": 0}

    async def write(key: str, items: list[int]) -> list[int]:
        running[key] += 1
        assert running[key] == 1, "two writes of one key at once"
        try:
            if key == "s0":
                await gate.wait()
            writes.append((key, items))
            return items
        finally:
            running[key] -= 1

    commit = GroupCommit(write, "test", budget=5)
    commit.start()
    got: list[tuple[str, int]] = []
    for i in range(3):
        commit.submit_then("s0", i, lambda r, e: got.append(("s0", r)))
    await asyncio.sleep(0)
    for i in range(3):
        commit.submit_then("s1", i, lambda r, e: got.append(("s1", r)))
    for _ in range(200):
        if ("s1", 2) in got:
            break
        await asyncio.sleep(0.005)
    assert got == [("s1", 0), ("s1", 1), ("s1", 2)]  # written while shard 0's waits
    commit.submit_then("s0", 3, lambda r, e: got.append(("s0", r)))
    await asyncio.sleep(0.02)  # time for a second writer of s0 to start, if one would
    assert writes == [("s1", [0, 1, 2])]  # s0's next item waits for its write in flight
    gate.set()
    await asyncio.wait_for(commit.drain(), 5)
    await commit.stop()
    assert [i for k, i in got if k == "s0"] == [0, 1, 2, 3]
    assert [items for k, items in writes if k == "s0"] == [[0, 1, 2], [3]]  # in order


class _Recorder:
    def __init__(self) -> None:
        self.submitted: list[Any] = []

    def submit_then(self, key: Any, item: Any, done: Any, deadline: Any = None) -> None:
        self.submitted.append(item)
        done(1, None)


class _BrokenHealth:
    async def admit(self, endpoint: Any, tokens: Any, spread_ms: int) -> Any:
        raise ResponseError("ERR value is not an integer or out of range script: admit")


async def test_admission_that_fails_defers_instead_of_sending() -> None:
    """A failing admit.lua (e.g. a rate_limit of 1e-17) defers the sends (unguarded:
    every send goes, with neither the rate limit nor max_in_flight applied)."""
    spawned: list[Claimed] = []
    recorder = _Recorder()
    admission = Admission(
        health=_BrokenHealth(),  # type: ignore[arg-type]
        lifecycle=None,  # type: ignore[arg-type]
        windows=Windows(64, 10.0, 1.0),
        inflight=InFlight(64),
        avg_ms={},
        recorder=recorder,  # type: ignore[arg-type]
        stats=Stats(),
        spawn=lambda sk, c, ep: spawned.append(c),
    )
    claims = [Claimed(f"dlv_{i}", f"tok{i}", 1, 3, "evt_x", "ep_x", "{}") for i in range(3)]
    sk = Keys("t", 1).shard(0)
    await admission.admit(sk, {"id": "ep_x", "max_in_flight": 1}, claims)
    assert spawned == []
    assert [o.outcome for o in recorder.submitted] == ["defer"] * 3
    assert all(o.delay_ms >= 1000 for o in recorder.submitted)


async def test_a_burst_before_the_first_answer_waits_as_long_as_the_endpoint_has() -> None:
    """Before an endpoint's first answer in this worker, sends over its window wait
    spread by how long its oldest open request has been open (at least 10 ms): a burst
    to a fast endpoint comes back within milliseconds, one to an endpoint that hangs
    waits longer each time (fails with a fixed first guess of 100 ms a send)."""
    recorder = _Recorder()
    inflight = InFlight(64)
    admission = Admission(
        health=_BrokenHealth(),  # type: ignore[arg-type]
        lifecycle=None,  # type: ignore[arg-type]
        windows=Windows(64, 10.0, 1.0),  # a first window of 16
        inflight=inflight,
        avg_ms={},
        recorder=recorder,  # type: ignore[arg-type]
        stats=Stats(),
        spawn=lambda sk, c, ep: None,
    )
    sk = Keys("t", 1).shard(0)
    endpoint = {"id": "ep_x"}
    flights = [
        inflight.add(sk, Claimed(f"dlv_o{i}", f"o{i}", 1, 3, "evt_x", "ep_x", "{}"), endpoint)
        for i in range(16)
    ]
    claims = [Claimed(f"dlv_{i}", f"tok{i}", 1, 3, "evt_x", "ep_x", "{}") for i in range(48)]
    await admission.admit(sk, endpoint, claims)
    burst = [o.delay_ms for o in recorder.submitted]
    assert [o.outcome for o in recorder.submitted] == ["defer"] * 48
    assert max(burst) <= 48 * 10 / 16 + 1, burst
    for f in flights:  # open for 2 s now, no answer yet
        f.started -= 2.0
    recorder.submitted.clear()
    await admission.admit(sk, endpoint, claims[:4])
    hanging = [o.delay_ms for o in recorder.submitted]
    assert min(hanging) >= 2000 / 16, hanging


@pytest.mark.realredis
async def test_admit_lua_clamps_a_tiny_rate(store: Store) -> None:
    """A record with rate_limit 1e-17 (written before validation refused it): before,
    admit.lua failed on SET ... PX 1e+20 ("value is not an integer")."""
    ep = await add_endpoint(store, "http://127.0.0.1:9/h", rate_limit=1e-17, max_in_flight=2)
    state, waits = await Health(store).admit(ep, ["a", "b", "c"], 10)
    assert state == "closed"
    assert waits[0] == 0 and all(w > 0 for w in waits[1:])
    ttl = await store.redis.pttl(store.keys.endpoint_state(ep["id"]).rate)
    assert 0 < ttl <= 86_400_000


def test_json_logs_hold_a_traceback_as_one_structured_field() -> None:
    """Unguarded: structlog's traceback is a multi-line string, and the standard library's
    loggers (aiohttp, asyncio) write plain text lines into the JSON stream."""
    code = """
import logging, structlog
from relay import logs
logs.configure("json")
try:
    1 / 0
except ZeroDivisionError:
    structlog.get_logger("relay.test").exception("boom", secret_local="x")
    logging.getLogger("aiohttp.server").exception("Error handling request")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    lines = run.stderr.decode().splitlines()
    assert len(lines) == 2, run.stderr.decode()
    for line in lines:
        record = orjson.loads(line)
        (exc,) = record["exception"]
        assert exc["exc_type"] == "ZeroDivisionError" and exc["frames"]
        assert all("locals" not in f for f in exc["frames"])  # no local variables
    assert orjson.loads(lines[1])["logger"] == "aiohttp.server"
