"""The coalescer: calls of one loop turn sent together, each answered on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from relay.queue.coalesce import Coalescer


async def test_calls_of_one_turn_go_in_one_send_each_with_its_reply() -> None:
    sent: list[list[int]] = []

    async def send(calls: Sequence[int]) -> list[Any]:
        sent.append(list(calls))
        return [ValueError(c) if c == 2 else c * 10 for c in calls]

    group: Coalescer[int] = Coalescer(send)
    got = await asyncio.gather(*(group(c) for c in (1, 2, 3)), return_exceptions=True)
    assert sent == [[1, 2, 3]]
    assert got[0] == 10 and got[2] == 30
    assert isinstance(got[1], ValueError)
    assert await group(4) == 40  # a later turn: a group of its own
    assert sent[-1] == [4]


async def test_a_send_that_fails_fails_each_call_of_its_group() -> None:
    async def send(calls: Sequence[int]) -> list[Any]:
        raise ConnectionError("lost")

    group: Coalescer[int] = Coalescer(send)
    got = await asyncio.gather(group(1), group(2), return_exceptions=True)
    assert all(isinstance(g, ConnectionError) for g in got)


async def test_the_next_group_is_sent_while_one_is_in_flight() -> None:
    release = asyncio.Event()
    sent: list[list[int]] = []

    async def send(calls: Sequence[int]) -> list[Any]:
        sent.append(list(calls))
        if calls[0] == 1:
            await release.wait()
        return list(calls)

    group: Coalescer[int] = Coalescer(send)
    first = asyncio.ensure_future(group(1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert await group(2) == 2  # not held behind the first group
    assert not first.done()
    release.set()
    assert await first == 1
    assert sent == [[1], [2]]


async def test_a_cancelled_caller_leaves_the_others_answered() -> None:
    async def send(calls: Sequence[int]) -> list[Any]:
        await asyncio.sleep(0)
        return list(calls)

    group: Coalescer[int] = Coalescer(send)
    gone = asyncio.ensure_future(group(1))
    kept = asyncio.ensure_future(group(2))
    await asyncio.sleep(0)
    gone.cancel()
    assert await kept == 2
    with pytest.raises(asyncio.CancelledError):
        await gone
