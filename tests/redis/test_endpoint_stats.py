"""Endpoint counters: kept by settle.lua for every attempt a worker makes, bounded (one hash
an hour, with a TTL), and read back by ``GET /v1/endpoints/{id}/stats``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from relay.domain import endpointstats
from relay.queue.store import Store
from tests.helpers.api import assert_error, call, new_endpoint
from tests.helpers.worker import until

pytestmark = pytest.mark.realredis


@asynccontextmanager
async def running(store: Store) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        yield
    finally:
        stop.set()
        await task


async def test_settle_counts_attempts_per_minute_with_a_ttl(store: Store) -> None:
    at = 1_000 * endpointstats.HOUR_MS + 7 * 60_000 + 1
    results = [
        ("t1", "1", "ok 2"),
        ("t2", "0", "s503 4"),
        ("t3", "0", "etimeout"),
        ("t4", "-"),  # a neutral hand-back: counts nothing
    ]
    await store.settle(
        "ep_x", results, threshold=5, cooldown_ms=1000, cooldown_max_ms=9000, at_ms=at
    )
    key = store.keys.endpoint_stats("ep_x", "1000")
    assert await store.redis.hgetall(key) == {
        "7:n": "3",
        "7:ok": "1",
        "7:l2": "1",
        "7:s503": "1",
        "7:l4": "1",
        "7:etimeout": "1",
    }
    ttl = await store.redis.pttl(key)
    assert endpointstats.RETAIN_MS - 60_000 < ttl <= endpointstats.RETAIN_MS
    # only neutral results: the counters are not touched (nor created)
    later = at + endpointstats.HOUR_MS
    await store.settle(
        "ep_x", [("t5", "-")], threshold=5, cooldown_ms=1000, cooldown_max_ms=9000, at_ms=later
    )
    assert not await store.redis.exists(store.keys.endpoint_stats("ep_x", "1001"))
    # a deleted endpoint's late settle counts nothing either
    await store.redis.set(store.keys.endpoint_state("ep_y").deleted, "1")
    await store.settle(
        "ep_y", results, threshold=5, cooldown_ms=1000, cooldown_max_ms=9000, at_ms=at
    )
    assert not await store.redis.exists(store.keys.endpoint_stats("ep_y", "1000"))


async def test_the_stats_route_reads_what_workers_counted(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    store = await make_store(breaker_threshold=3, retry_schedule=(3600.0,))
    api = await make_api(store)
    calls = {"n": 0}

    def flaky(_: web.Request) -> web.Response:
        calls["n"] += 1
        return web.Response(status=200 if calls["n"] % 2 else 503, text="x")

    receiver.responses["/flaky"] = flaky
    receiver.responses["/down"] = lambda _: web.Response(status=500, text="down")
    ok_ep = await new_endpoint(api, url=receiver.url + "/flaky", app="a")
    down = await new_endpoint(api, url=receiver.url + "/down", app="b")
    for _ in range(6):
        await call(api, "POST", "/v1/events", json={"type": "x", "app": "a", "payload": {}})
    for _ in range(4):
        await call(api, "POST", "/v1/events", json={"type": "x", "app": "b", "payload": {}})

    async def counted(ep: str, n: int) -> dict[str, Any] | None:
        status, got = await call(api, "GET", f"/v1/endpoints/{ep}/stats")
        assert status == 200, got
        return got if got["attempts"] >= n else None

    async with running(store):
        flaky_stats = await until(lambda: counted(ok_ep["id"], 6))
        down_stats = await until(lambda: counted(down["id"], 3))
    assert flaky_stats["attempts"] == 6 and flaky_stats["successes"] == 3
    assert flaky_stats["success_rate"] == 0.5 and flaky_stats["failures_by"] == [
        {"status_code": 503, "error": None, "count": 3}
    ]
    assert flaky_stats["latency_ms"]["p50"] is not None
    assert sum(b["count"] for b in flaky_stats["latency_ms"]["buckets"]) == 6
    assert sum(p["attempts"] for p in flaky_stats["series"]) == 6
    assert len(flaky_stats["series"]) == 60 and flaky_stats["why"] is None
    assert down_stats["successes"] == 0 and down_stats["breaker"]["state"] == "open"
    failures = down_stats["breaker"]["consecutive_failures"]
    assert f"the breaker is open after {failures} consecutive failures" in down_stats["why"]
    status, day = await call(
        api, "GET", f"/v1/endpoints/{down['id']}/stats", params={"window": "24h"}
    )
    assert status == 200 and day["attempts"] == down_stats["attempts"] and len(day["series"]) == 144
    got = await call(api, "GET", f"/v1/endpoints/{down['id']}/stats", params={"window": "7d"})
    assert_error(*got, 422, "validation_error")
    assert_error(*await call(api, "GET", "/v1/endpoints/ep_nope/stats"), 404, "not_found")


async def test_two_workers_count_every_attempt_exactly_once(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    """Counters are settled in Redis by the script every worker calls: with two workers
    sending at once, the counts are the attempts made, no more, no fewer."""
    store = await make_store(claim_batch=4, worker_concurrency=4)
    api = await make_api(store)
    ep = await new_endpoint(api, url=receiver.url + "/ok")
    for _ in range(40):
        await call(api, "POST", "/v1/events", json={"type": "x", "payload": {}})
    stop = asyncio.Event()
    workers = [Worker(store, store.settings) for _ in range(2)]
    tasks = [asyncio.create_task(w.run(stop)) for w in workers]
    try:
        await receiver.wait_for(40)

        async def settled() -> dict[str, Any] | None:
            _, got = await call(api, "GET", f"/v1/endpoints/{ep['id']}/stats")
            return got if got["attempts"] >= 40 else None

        got = await until(settled)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    assert sum(w.stats.sent for w in workers) == len(receiver.requests) == 40
    _, got = await call(api, "GET", f"/v1/endpoints/{ep['id']}/stats")
    assert (got["attempts"], got["successes"], got["failures"]) == (40, 40, 0)
    assert sum(b["count"] for b in got["latency_ms"]["buckets"]) == 40
