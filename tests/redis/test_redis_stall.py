"""Guarantee 2 through a Redis stall shorter than the lease: no duplicate send.

A real ``redis-server`` started here is frozen with SIGSTOP for a few seconds while
sends are in flight to a local receiver (the lease is several times longer than the
stall, the client's socket timeout shorter: each write in the stall fails with redis-py's
``TimeoutError``), then resumed with SIGCONT. Every event must be received exactly once: an
outcome that could not be written during the stall is retried until it is written
(its lease is still good), never dropped to be sent again after the lease runs out.

Fails with outcomes whose write timed out dropped (``delivery.crashed``): their leases
run out and the events are sent a second time.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer
from tests.helpers import Receiver, make_settings
from tests.helpers.worker import add_endpoint, publish, until

pytestmark = pytest.mark.realredis

EVENTS = 40
STALL = 4.0
LEASE = 12.0


async def test_redis_stall_shorter_than_the_lease_sends_nothing_twice(
    tmp_path: Path, receiver: Receiver
) -> None:
    server = RedisServer(data_dir=tmp_path, appendonly=False)
    server.start()
    settings = make_settings(
        redis_url=server.url + "?socket_timeout=1",
        lease_seconds=LEASE,
        http_timeout=10.0,
        worker_concurrency=64,
    )
    store = Store(connect(settings), settings)
    await store.start()
    release = asyncio.Event()
    answered = itertools.count()

    async def slow(_request: web.Request) -> web.Response:
        await release.wait()  # held open until Redis is frozen: the sends are in flight
        # answers spread over the stall: outcomes come in several group-commit batches,
        # some on a connection made while Redis is frozen (their write never leaves)
        await asyncio.sleep(min(next(answered) * 0.15, STALL - 1.0))
        return web.Response(text="ok")

    receiver.responses["/hook"] = slow
    stop = asyncio.Event()
    task = None
    try:
        ep = await add_endpoint(store, receiver.url + "/hook")
        published = [await publish(store, ep["id"]) for _ in range(EVENTS)]
        events = [e for e, _ in published]
        worker = Worker(store, settings)
        task = asyncio.create_task(worker.run(stop))
        await receiver.wait_for(10, within=10.0)  # a window of them held open
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        try:
            release.set()  # the answers come while Redis cannot take their outcomes
            await asyncio.sleep(STALL)
        finally:
            os.kill(server.pid, signal.SIGCONT)

        async def all_succeeded() -> bool:
            stats = await store.stats()
            return bool(stats["counts"].get("succeeded") == EVENTS)

        await until(all_succeeded, within=LEASE * 2)
        # past the leases the stall could have lost: a dropped outcome would resend now
        await asyncio.sleep(LEASE - STALL + 2.0)
        got = Counter(r.headers["webhook-id"] for r in receiver.requests)
        assert set(got) == set(events)
        assert [e for e, n in got.items() if n > 1] == []
        assert worker.stats.reclaimed == 0
        # a write retried after its reply was lost is not logged twice (record.lua)
        for _, (delivery_id,) in published:
            d = await store.get_delivery(delivery_id)
            assert d is not None
            assert [e.get("fenced") for e in d["attempt_log"]] == [None], d["attempt_log"]
    finally:
        stop.set()
        if task is not None:
            await asyncio.wait_for(task, 30)
        await store.close()
        server.stop()
