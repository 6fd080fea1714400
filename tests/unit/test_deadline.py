"""A send's time limit without aiohttp's timer per request (relay/delivery/sender.py): the
worker's watcher (``watch_slow``) cancels a request past its ``Deadline`` and the send
answers ``timeout``; a request inside its limit, or a send whose task is also being
cancelled for another reason (a shutdown), is never turned into one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from relay.delivery import sender
from relay.delivery.inflight import InFlight, watch_slow
from relay.domain import signing
from relay.queue.keys import Keys
from relay.queue.store import Claimed

SK = Keys("t", 1).shard(0)


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def hook(request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("sleep", "0")))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[Any]:
    s = sender.make_session(timeout=None, limit=8, allow_private=True)
    try:
        yield s
    finally:
        await s.close()


def send(session: Any, url: str, deadline: sender.Deadline) -> Any:
    ep = {"id": "ep_1", "url": url, "secret": signing.generate_secret()}
    return sender.send(
        session,
        endpoint=ep,
        event_id="evt_1",
        delivery_id="dlv_1",
        attempt=1,
        body=b"{}",
        deadline=deadline,
    )


async def test_a_request_past_its_deadline_is_a_timeout(server: str, session: Any) -> None:
    """Fails with the watcher's cancel removed (the answer comes after 1 s: 200).
    Cut by the watcher, not sooner than its time (no upper bound on the clock: the 200
    that comes after 1 s would show a cancel that never came)."""
    inflight = InFlight(4, request_timeout=0.2)
    f = inflight.add(SK, Claimed("dlv_1", "tok_1", 1, 3, "evt_1", "ep_1", b"{}"), None)
    watcher = asyncio.create_task(watch_slow(inflight, tick=0.01))
    started = time.monotonic()
    try:
        f.task = asyncio.create_task(send(session, server + "?sleep=1", f.deadline))
        got = await f.task
    finally:
        watcher.cancel()
    took = time.monotonic() - started
    assert (got.status, got.error) == (None, "timeout")
    assert got.detail == "TimeoutError"
    assert took >= 0.2 and f.deadline.hit
    assert f.deadline.at == float("inf")  # disarmed: no request under way


async def test_a_request_inside_its_deadline_is_answered(server: str, session: Any) -> None:
    """Fails with the deadline armed without its seconds."""
    inflight = InFlight(4, request_timeout=2.0)
    f = inflight.add(SK, Claimed("dlv_1", "tok_1", 1, 3, "evt_1", "ep_1", b"{}"), None)
    watcher = asyncio.create_task(watch_slow(inflight, tick=0.01))
    try:
        f.task = asyncio.create_task(send(session, server + "?sleep=0.2", f.deadline))
        got = await f.task
    finally:
        watcher.cancel()
    assert (got.status, got.error, got.body) == (200, "", "ok")
    assert not f.deadline.hit


async def test_a_shutdown_is_not_swallowed_by_a_deadline(server: str, session: Any) -> None:
    """A task cancelled by the watcher and by a shutdown at once is cancelled: the send
    must not answer timeout and carry on (fails with ``uncancel() > 0`` left out)."""
    deadline = sender.Deadline(0.05)
    task = asyncio.create_task(send(session, server + "?sleep=1", deadline))
    await asyncio.sleep(0.2)
    assert deadline.overdue(time.monotonic())
    task.cancel()  # the watcher's
    task.cancel()  # a shutdown's
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancel_without_a_deadline_passed_is_a_cancel(server: str, session: Any) -> None:
    """Fails with the ``deadline.hit`` check left out (a shutdown's cancel answers as a
    timeout)."""
    deadline = sender.Deadline(60.0)
    task = asyncio.create_task(send(session, server + "?sleep=1", deadline))
    await asyncio.sleep(0.1)
    assert not deadline.overdue(time.monotonic())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_deadline_is_overdue_once() -> None:
    """Fails with the ``hit`` check left out of ``overdue``."""
    deadline = sender.Deadline()
    assert not deadline.overdue(time.monotonic())  # no request under way
    deadline.at = 10.0
    assert not deadline.overdue(9.99)
    assert deadline.overdue(10.0)
    assert not deadline.overdue(11.0)  # cancelled once, not again
