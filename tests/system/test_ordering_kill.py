"""Ordered delivery: a worker SIGKILLed, or stopped, while it holds a lane's head.

One ``relay worker`` process (1 s lease) claims the head of a 5-event lane; the
receiver holds that request open, and the process is killed with SIGKILL while it
waits. Another process then starts. The head is sent again once its lease ran out
(reclaim puts it back in due, still the head) and only after it succeeded does the
next one go: the lane's requests are 0 (read and answered by the receiver, to a worker
that is gone), 0, 1, 2, 3, 4, never two at once: the receiver sees the head twice, one
duplicate for the one lease reclaimed (at-least-once; receivers dedupe on webhook-id).

Fails in a scratch copy of the tree whose claim.lua pops the lane and makes the next one
due at claim time (the lane advancing on claim, not on the outcome): the lane runs ahead
of its held head, the requests received being [0, 2, 3, 4, 0, 1], not [0, 0, 1, 2, 3, 4].

The same with SIGTERM (``test_a_handed_back_head_is_not_overtaken``): the request is
held past the 0.3 s shutdown grace, so the worker cancels it and hands the head back
(``release.lua``, uncharged); the next process sends the head again, then the rest.
With the lane advancing at claim, the requests are [0, 1, 2, 3, 0, 4].
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from relay.domain.schema import endpoint_record
from relay.publishing import Publisher
from relay.queue.store import Store
from tests.helpers.ordering_kit import (
    LaneReceiver,
    lane_problems,
    publish_lanes,
    start_workers,
    stop_workers,
    until,
    wait_listening,
    worker_env,
)

pytestmark = pytest.mark.realredis


async def held_head(
    make_store: Any, tmp_path: Path, redis_url: str, stop: signal.Signals
) -> tuple[LaneReceiver, Store, dict[str, list[int]]]:
    """Five events in one lane; the first request of n=0 is held until the worker that
    sent it was stopped with ``stop``; then a second worker delivers the lane."""
    store = await make_store(retry_schedule=(0.01, 0.02, 0.05))
    held, release = asyncio.Event(), asyncio.Event()
    first = True

    async def hold_the_first(lane: str, n: int) -> None:
        nonlocal first
        if first and n == 0:
            first = False
            held.set()
            await release.wait()

    rec = await LaneReceiver(fail=0, slow=0, before=hold_the_first).start()
    ep = endpoint_record(url=rec.url + "/k", ordering="key")
    await store.put_endpoint(ep)
    env = worker_env(store, redis_url, RELAY_LEASE_SECONDS="1", RELAY_SHUTDOWN_GRACE="300ms")
    (victim,) = await start_workers(env, 1, tmp_path, "victim")
    await wait_listening(store, 1, [victim])
    expected = await publish_lanes(Publisher(store), {"k": "default"}, 5)
    await asyncio.wait_for(held.wait(), 30)
    victim.send_signal(stop)
    code = await victim.wait()
    assert code == (-signal.SIGKILL if stop == signal.SIGKILL else 0)
    release.set()  # the stopped worker's request ends; nobody hears its answer
    survivors = await start_workers(env, 1, tmp_path, "survivor")
    try:
        await until(lambda: done(store))
    finally:
        assert await stop_workers(survivors) == [0]
    return rec, store, expected


async def test_a_handed_back_head_is_not_overtaken(
    make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    rec, store, expected = await held_head(make_store, tmp_path, redis_server.url, signal.SIGTERM)
    try:
        assert [h.n for h in sorted(rec.hits, key=lambda h: h.start)] == [0, 0, 1, 2, 3, 4]
        assert lane_problems(rec.hits, expected) == []
        assert rec.overlaps == []
        log = [
            e["outcome"]
            for h in rec.hits
            if h.n == 0
            for e in ((await store.get_delivery(h.delivery)) or {}).get("attempt_log", [])
        ]
        assert "handed_back" in log
        assert (await store.stats())["reclaimed_total"] == 0
    finally:
        await rec.stop()


async def done(store: Store) -> bool:
    counts = (await store.stats())["counts"]
    return counts["pending"] == counts["delivering"] == counts["queued"] == 0


async def test_a_killed_head_holder_is_not_overtaken(
    make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    rec, store, expected = await held_head(make_store, tmp_path, redis_server.url, signal.SIGKILL)
    try:
        assert [h.n for h in sorted(rec.hits, key=lambda h: h.start)] == [0, 0, 1, 2, 3, 4]
        assert lane_problems(rec.hits, expected) == []
        assert rec.overlaps == []
        # the killed worker's request was processed all the same: the same delivery twice
        heads = [h for h in rec.hits if h.n == 0]
        assert [h.status for h in heads] == [200, 200]
        assert heads[0].delivery == heads[1].delivery
        assert (await store.stats())["reclaimed_total"] == 1
    finally:
        await rec.stop()
