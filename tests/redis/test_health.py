"""Endpoint health and pacing on a real Redis: the scripts, and the worker around them.

``lua/admit.lua`` and ``lua/settle.lua`` are called here through
:class:`relay.endpoints.health.Health` (from many concurrent callers where exclusivity is
the point), and an in-process :class:`relay.delivery.worker.Worker` shows deferral, holding
and auto-disabling end to end. The measurements across several worker processes are in
``test_pacing_processes.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from relay.endpoints.health import Health, Settled, Windows, burst_for
from relay.endpoints.lifecycle import should_disable
from relay.queue.store import Store
from tests.helpers.pacing import add_endpoint, publish, until

pytestmark = pytest.mark.realredis


@asynccontextmanager
async def running(store: Store) -> AsyncIterator[Worker]:
    stop = asyncio.Event()
    worker = Worker(store, store.settings)
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await task


async def row(store: Store, delivery_id: str) -> dict[str, Any]:
    got = await store.get_delivery(delivery_id)
    assert got is not None
    return got


# ---------------------------------------------------------------------- breaker


async def test_half_open_lets_exactly_one_probe_through_concurrent_admits(
    make_store: Any,
) -> None:
    """Thirty callers (separate connections) admit three sends each as the cooldown ends.

    Exactly one of the ninety tokens may go. Protection: admit.lua's ``probe_until``
    check; without it, 30 tokens are told to send.
    """
    stores = [await make_store() for _ in range(30)]
    ep = await add_endpoint(stores[0], "http://127.0.0.1:9/")
    breaker = stores[0].keys.endpoint_state(ep["id"]).breaker
    await stores[0].redis.hset(breaker, mapping={"state": "open", "open_until": 0, "failures": 5})
    answers = await asyncio.gather(
        *(Health(s).admit(ep, [f"c{i}:{j}" for j in range(3)], 50) for i, s in enumerate(stores))
    )
    waits = [w for _, ws in answers for w in ws]
    assert waits.count(0) == 1
    assert all(w > 0 for w in waits if w != 0)
    raw = await stores[0].redis.hgetall(breaker)
    assert raw["state"] == "half_open"
    assert raw["probe"] in {f"c{i}:0" for i in range(30)}


async def test_settle_counts_every_failure_and_opens_once(make_store: Any) -> None:
    """Forty concurrent failures from forty connections: none lost, opened exactly once."""
    stores = [await make_store(breaker_threshold=5) for _ in range(40)]
    ep = await add_endpoint(stores[0], "http://127.0.0.1:9/")
    settled = await asyncio.gather(
        *(Health(s).settle(ep["id"], [(f"t{i}", "0")]) for i, s in enumerate(stores))
    )
    assert sorted(s.failures for s in settled) == list(range(1, 41))
    assert {s.failures: s.state for s in settled if s.failures <= 5} == {
        1: "closed",
        2: "closed",
        3: "closed",
        4: "closed",
        5: "open",
    }
    raw = await stores[0].redis.hgetall(stores[0].keys.endpoint_state(ep["id"]).breaker)
    assert (raw["opened"], raw["failures"]) == ("1", "40")


async def test_neutral_results_do_not_count_and_free_the_probe(make_store: Any) -> None:
    store = await make_store(breaker_threshold=2)
    health = Health(store)
    ep = await add_endpoint(store, "http://127.0.0.1:9/")
    assert (await health.settle(ep["id"], [("a", "-"), ("b", "-"), ("c", "-")])).failures == 0
    assert (await health.settle(ep["id"], [("d", "0"), ("e", "0")])).state == "open"
    breaker = store.keys.endpoint_state(ep["id"]).breaker
    await store.redis.hset(breaker, "open_until", 0)
    _, waits = await health.admit(ep, ["p1", "x"], 50)
    assert waits[0] == 0 and waits[1] > 0  # p1 is the probe
    _, waits = await health.admit(ep, ["y"], 50)
    assert waits[0] > 0  # the probe is out: nobody else
    await health.settle(ep["id"], [("p1", "-")])  # a 429: no verdict, the next may probe
    _, waits = await health.admit(ep, ["p2"], 50)
    assert waits == [0]
    assert (await health.settle(ep["id"], [("p2", "1")])).state == "closed"


async def test_refailing_after_reenable_starts_a_new_failing_streak(make_store: Any) -> None:
    """An operator re-enables an endpoint that still fails: it can be disabled again.

    Fails with settle.lua setting ``failing_since`` only when the failure count is 1:
    re-enabling clears ``failing_since`` but not the count, so the endpoint is never
    auto-disabled again (failing_since stays 0).
    """
    store = await make_store()
    health = Health(store)
    ep = await add_endpoint(store, "http://127.0.0.1:9/")
    first = await health.settle(ep["id"], [("a", "0"), ("b", "0")])
    assert first.failing_since > 0
    await health.reset_failing(ep["id"])
    again = await health.settle(ep["id"], [("c", "0")])
    assert again.failures == 3 and again.failing_since >= first.failing_since
    assert (await health.settle(ep["id"], [("d", "1")])).failing_since == 0


async def test_a_failure_sent_before_the_last_success_is_not_counted(make_store: Any) -> None:
    store = await make_store(breaker_threshold=2)
    health = Health(store)
    ep = await add_endpoint(store, "http://127.0.0.1:9/")
    before = await store.now_ms() - 1000
    assert (await health.settle(ep["id"], [("ok", "1")])).state == "closed"
    stale = [(f"s{i}", f"0@{before}") for i in range(5)]
    got = await health.settle(ep["id"], stale)
    assert (got.state, got.failures, got.failing_since) == ("closed", 0, 0)
    after = await store.now_ms() + 1
    got = await health.settle(ep["id"], [("n1", f"0@{after}"), ("n2", f"0@{after}")])
    assert got.state == "open" and got.failures == 2  # sent after it: counted


async def test_hung_requests_timing_out_after_the_successes_do_not_open_the_breaker(
    make_store: Any, receiver: Any
) -> None:
    """1% of a receiver's requests hang past the timeout: their timeouts land together,
    after the successes sent beside them, and read as consecutive failures.

    Fails with settle.lua ignoring when a failed request was sent: the five timeouts
    open the breaker (threshold 5) and their retries wait out its 30 s cooldown."""
    store = await make_store(breaker_threshold=5, http_timeout=0.5, retry_schedule=(0.05,))
    arrived = itertools.count()

    async def tail(_: web.Request) -> web.Response:
        if next(arrived) < 5:
            await asyncio.sleep(2.0)  # past the 0.5 s timeout
        return web.Response(text="ok")

    receiver.responses["/tail"] = tail
    ep = await add_endpoint(store, receiver.url + "/tail")
    delivered = [await publish(store, ep["id"]) for _ in range(60)]
    async with running(store):
        await receiver.wait_for(65, within=10, path="/tail")  # 60, and the 5 retried
        await until(lambda: all_succeeded(store, delivered))
    breaker = await store.redis.hgetall(store.keys.endpoint_state(ep["id"]).breaker)
    assert breaker.get("state") == "closed" and "opened" not in breaker, breaker


async def all_succeeded(store: Store, delivery_ids: list[str]) -> bool:
    rows = [await row(store, d) for d in delivery_ids]
    return all(r["status"] == "succeeded" for r in rows)


# ---------------------------------------------------------------------- pacing


async def test_rate_limit_admits_the_burst_then_spaces_the_rest(make_store: Any) -> None:
    store = await make_store()
    ep = await add_endpoint(store, "http://127.0.0.1:9/", rate_limit=20)
    assert burst_for(20) == 2 and burst_for(5) == 1 and burst_for(1000) == 100
    _, waits = await Health(store).admit(ep, [f"t{i}" for i in range(5)], 50)
    assert waits[:2] == [0, 0]
    gaps = [b - a for a, b in itertools.pairwise(waits[2:])]
    assert all(w > 0 for w in waits[2:]) and all(45 <= g <= 55 for g in gaps), waits


async def test_in_flight_slot_of_a_dead_worker_frees_itself(make_store: Any) -> None:
    """A slot taken and never settled (its worker died) expires after the send timeout
    plus a margin, and the next send may go; a settled slot frees at once."""
    store = await make_store(http_timeout=0.1)  # slot hold = 0.1 s + 2 s margin
    health = Health(store)
    ep = await add_endpoint(store, "http://127.0.0.1:9/", max_in_flight=1)
    assert (await health.admit(ep, ["dead-worker"], 50))[1] == [0]
    _, (wait,) = await health.admit(ep, ["other"], 50)
    assert wait > 0
    inflight = store.keys.endpoint_state(ep["id"]).inflight
    expiry = await store.redis.zscore(inflight, "dead-worker")

    async def admitted() -> bool:
        return (await health.admit(ep, ["other"], 50))[1] == [0]

    await until(admitted, within=5)
    now_s, now_us = await store.redis.time()
    assert now_s * 1000 + now_us // 1000 >= expiry
    await health.settle(ep["id"], [("other", "1")])
    assert (await health.admit(ep, ["third"], 50))[1] == [0]


def test_windows_start_small_grow_on_success_and_spread_what_waits() -> None:
    w = Windows(concurrency=16, http_timeout=2.0, slow_send_after=1.0)
    assert (w.window("a"), w.room("a", 3), w.room("a", 9)) == (4, 1, 0)
    for _ in range(20):
        w.succeeded("a")
    assert (w.window("a"), w.window("b")) == (16, 4)
    waits = [w.wait_ms("b", 100.0, 1_000_000.0) for _ in range(200)]
    assert waits[:3] == [25, 50, 75]  # a few over the window come back soon
    assert max(waits) <= 2000 and len(set(waits)) == 80  # the rest spread over a timeout
    assert w.slow_after(None) == 1.0 and w.slow_after(5.0) == 0.25 and w.slow_after(60) == 0.6
    assert Windows(concurrency=1, http_timeout=1, slow_send_after=1).window("x") == 1


def test_waits_drain_at_the_pace_the_endpoint_is_found_to_have() -> None:
    """Sends deferred while an endpoint was taken to be slow do not hold back the next
    ones once it answers fast: those go after what is left at the new pace, not behind
    every wait handed out before (fails where each wait goes after the last one)."""
    w = Windows(concurrency=16, http_timeout=10.0, slow_send_after=1.0)
    first = [w.wait_ms("a", 100.0, 0.0) for _ in range(40)]
    assert first[:2] == [25, 50] and first[-1] == 1000
    # 2 ms a send through a window of 4: 30 ms later the 40 ahead have gone
    assert w.wait_ms("a", 2.0, 30.0) == 1
    assert w.wait_ms("a", 100.0, 30.0) == 50  # back to 100 ms a send: one is ahead


def test_auto_disable_policy_needs_disable_after_of_failing_without_a_success() -> None:
    def settled(failing_since: int) -> Settled:
        return Settled("open", 9, 0, failing_since, 0)

    assert not should_disable(settled(0), 10.0, 10**13)  # not failing
    assert not should_disable(settled(1_000), 10.0, 10_999)
    assert should_disable(settled(1_000), 10.0, 11_000)


# ---------------------------------------------------------------------- worker


async def test_deferral_while_open_keeps_attempts_and_slots(make_store: Any) -> None:
    store = await make_store()
    ep = await add_endpoint(store, "http://127.0.0.1:9/")
    breaker = store.keys.endpoint_state(ep["id"]).breaker
    reopen = int(time.time() * 1000) + 60_000
    await store.redis.hset(breaker, mapping={"state": "open", "open_until": reopen})
    dlv = [await publish(store, ep["id"]) for _ in range(3)]
    async with running(store) as worker:
        await until(lambda: _all_deferred(store, dlv, reopen))
        assert not worker._inflight  # deferred sends hold no slot
        assert worker.stats.deferred >= 3 and worker.stats.sent == 0
    for d in dlv:
        got = await row(store, d)
        assert (got["status"], got["attempts"], got["attempt_log"]) == ("pending", 0, [])
        assert got["next_attempt_at"] >= reopen
        assert await store.redis.zscore(store.keys.shard(0).due, d) == got["next_attempt_at"]


async def _all_deferred(store: Store, ids: list[str], until_ms: int) -> bool:
    rows = await store.get_deliveries(store.keys.shard(0), ids)
    return all(r["status"] == "pending" and r["next_attempt_at"] >= until_ms for r in rows)


async def test_auto_disabled_again_when_still_failing_after_reenable(
    make_store: Any, receiver: Any
) -> None:
    store = await make_store(disable_after=0.3, breaker_threshold=100, retry_schedule=(0.05,) * 50)
    health = Health(store)
    receiver.responses["/down"] = lambda _: web.Response(status=500)
    ep = await add_endpoint(store, receiver.url + "/down")
    d = await publish(store, ep["id"])

    async def disabled() -> bool:
        got = await store.get_endpoint(ep["id"])
        return got is not None and not got["enabled"]

    async with running(store):
        await until(disabled)
        sent = len(receiver.requests)
        current = await store.get_endpoint(ep["id"])
        assert current is not None
        await store.put_endpoint({**current, "enabled": True})  # what PATCH does
        await health.reset_failing(ep["id"])
        await health.resume(ep["id"])
        await until(disabled)
    assert len(receiver.requests) > sent  # it was tried again, then disabled again
    got = await row(store, d)
    assert got["status"] == "pending" and got["attempts"] == len(got["attempt_log"])


async def test_reenable_racing_a_hold_does_not_strand_the_delivery(
    make_store: Any, receiver: Any, monkeypatch: Any
) -> None:
    """The endpoint is re-enabled (and held deliveries resumed) after a worker saw it
    disabled but before its hold ran: the delivery must not stay parked.

    Fails without the re-check in ``Lifecycle.hold``: the delivery stays in the held set,
    pending, and is never sent.
    """
    store = await make_store()
    ep = await add_endpoint(store, receiver.url + "/back", enabled=False)
    d = await publish(store, ep["id"])
    real_hold = Health.hold
    raced = []

    async def hold_after_reenable(self: Health, *args: Any) -> int:
        if not raced:  # the operator's PATCH lands between the read and the hold
            raced.append(True)
            await store.put_endpoint({**ep, "enabled": True})
            await Health(store).resume(ep["id"])
        return await real_hold(self, *args)

    monkeypatch.setattr(Health, "hold", hold_after_reenable)
    async with running(store):
        await receiver.wait_for(1, within=10, path="/back")
    assert raced
    got = await row(store, d)
    assert "held" not in got
    assert await store.redis.zcard(store.keys.shard(0).held(ep["id"])) == 0


async def test_shutdown_frees_the_endpoint_slots_of_handed_back_sends(
    make_store: Any, receiver: Any
) -> None:
    """Sends handed back at shutdown free their max_in_flight slots at once.

    Fails without the neutral settle in ``Leases.hand_back``: both slots stay
    in the endpoint's in-flight set until they expire (timeout + 2 s), holding other
    workers off the endpoint.
    """
    store = await make_store(shutdown_grace=0.1, http_timeout=30.0)
    release = asyncio.Event()

    async def hold(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="late")

    receiver.responses["/hold"] = hold
    ep = await add_endpoint(store, receiver.url + "/hold", max_in_flight=2)
    for _ in range(2):
        await publish(store, ep["id"])
    inflight = store.keys.endpoint_state(ep["id"]).inflight
    try:
        async with running(store):
            await receiver.wait_for(2, path="/hold")
            assert await store.redis.zcard(inflight) == 2
        assert await store.redis.zcard(inflight) == 0
    finally:
        release.set()
    sk = store.keys.shard(0)
    assert await store.redis.zcard(sk.processing) == 0  # handed back, uncharged
