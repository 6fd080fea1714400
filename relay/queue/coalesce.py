"""Calls of one event loop turn sent to Redis together, each answered on its own.

Concurrent requests that each publish one event call the same script at nearly the same
time. A :class:`Coalescer` takes the calls made while the loop runs one turn and sends
them in one go on the next (``send``: one pipeline, one round trip), then hands each
caller its own reply, or its own error. Each caller still waits for its reply from
Redis: nothing is answered before it is written. While one group is in flight the next
turn's calls form the next group, so a group never waits for another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

C = TypeVar("C")

# sends the calls, one reply each, in order: a value, or the exception that call raised
Send = Callable[[Sequence[C]], Awaitable[list[Any]]]


class Coalescer(Generic[C]):
    """Groups the calls of one loop turn into one ``send``."""

    def __init__(self, send: Send[C]) -> None:
        self._send = send
        self._pending: list[tuple[C, asyncio.Future[Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, call: C) -> Any:
        """``call``'s reply, sent with the others of this turn; raises its error."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        self._pending.append((call, answer))
        if len(self._pending) == 1:  # the turn's first: it sends the group next turn
            task = loop.create_task(self._flush())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await answer

    async def _flush(self) -> None:
        group, self._pending = self._pending, []
        try:
            replies = await self._send([call for call, _ in group])
        except Exception as exc:  # the whole group failed (a lost connection): each says so
            for _, answer in group:
                if not answer.done():
                    answer.set_exception(exc)
            return
        except BaseException:
            for _, answer in group:
                answer.cancel()
            raise
        for (_, answer), reply in zip(group, replies, strict=True):
            if answer.done():  # its caller was cancelled
                continue
            if isinstance(reply, BaseException):
                answer.set_exception(reply)
            else:
                answer.set_result(reply)
