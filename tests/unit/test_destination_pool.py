"""The broker connection pool: one connection per url, opened once for every send that
waits for it, dropped when broken, closed when idle, all closed at the end."""

from __future__ import annotations

import asyncio
import time

import pytest

from relay.delivery.destinations.base import Message
from relay.delivery.destinations.pool import Pool


class FakePublisher:
    def __init__(self, url: str) -> None:
        self.url = url
        self.closed = False

    async def publish(self, message: Message) -> str:
        return "ok"

    async def close(self) -> None:
        self.closed = True


class Opener:
    def __init__(self, fail: bool = False) -> None:
        self.opened: list[FakePublisher] = []
        self.fail = fail
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, url: str) -> FakePublisher:
        await self.gate.wait()
        if self.fail:
            raise ConnectionRefusedError("refused")
        self.opened.append(FakePublisher(url))
        return self.opened[-1]


async def test_concurrent_sends_share_one_connection_per_url() -> None:
    opener = Opener()
    opener.gate.clear()
    pool = Pool(opener, idle=60)
    waiting = [asyncio.create_task(pool.get(u)) for u in ["a"] * 10 + ["b"] * 5]
    await asyncio.sleep(0)
    opener.gate.set()
    got = await asyncio.gather(*waiting)
    assert len(opener.opened) == 2 and len({id(p) for p in got}) == 2
    await pool.close()
    assert all(p.closed for p in opener.opened)


async def test_a_failed_open_reaches_every_waiter_and_the_next_send_tries_again() -> None:
    opener = Opener(fail=True)
    pool = Pool(opener, idle=60)
    with pytest.raises(ConnectionRefusedError):
        await pool.get("a")
    assert len(pool) == 0
    opener.fail = False
    assert (await pool.get("a")).url == "a"


async def test_a_broken_or_dropped_connection_is_replaced() -> None:
    opener = Opener()
    pool = Pool(opener, idle=60)
    first = await pool.get("a")
    first.closed = True  # the broker went away
    second = await pool.get("a")
    assert second is not first
    pool.drop("a", first)  # a late drop of the old one leaves the new one alone
    assert await pool.get("a") is second
    pool.drop("a", second)
    await asyncio.sleep(0)
    assert second.closed and len(pool) == 0


async def test_an_idle_connection_is_closed() -> None:
    opener = Opener()
    pool = Pool(opener, idle=5)
    old = await pool.get("a")
    fresh = await pool.get("b")
    assert pool.sweep(now=time.monotonic() + 1) == 0  # used a second ago: kept
    assert pool.sweep(now=time.monotonic() + 10) == 2  # unused for 5 s and more
    await asyncio.sleep(0)
    assert old.closed and fresh.closed and len(pool) == 0
