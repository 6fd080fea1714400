"""Group commit: the writes of many finished sends go to Redis in one script call.

Whatever is submitted while the previous write runs goes in the next one, so under load
a worker records outcomes (and settles breakers) in batches without ever waiting to fill
one; when idle, a single outcome is written at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from relay.queue.errors import TRANSIENT_WRITE, is_loading

log = structlog.get_logger("relay.worker")


class GroupCommit:
    """Group commit: whatever was submitted while the last write ran goes in the next one.

    ``write(key, items)`` returns one result per item; every key is written separately
    (a key is a shard or an endpoint: one hash slot, one script call).
    """

    def __init__(
        self,
        write: Callable[[Any, list[Any]], Awaitable[list[Any]]],
        name: str,
        max_batch: int = 256,
    ) -> None:
        self._write = write
        self._name = name
        self._max = max_batch
        self._pending: dict[Any, list[tuple[Any, asyncio.Future[Any]]]] = {}
        self._kick = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    def submit(self, key: Any, item: Any) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, []).append((item, fut))
        self._idle.clear()
        self._kick.set()
        return fut

    async def drain(self) -> None:
        """Wait until everything submitted so far is written."""
        while self._pending or not self._idle.is_set():
            self._kick.set()
            await self._idle.wait()

    async def stop(self) -> None:
        await self.drain()
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            while self._pending:
                key, items = next(iter(self._pending.items()))
                batch, rest = items[: self._max], items[self._max :]
                if rest:
                    self._pending[key] = rest
                else:
                    del self._pending[key]
                try:
                    res = await with_retries(self._write, key, [i for i, _ in batch])
                    for (_, fut), r in zip(batch, res, strict=True):
                        if not fut.done():
                            fut.set_result(r)
                except Exception as exc:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
            if not self._pending:
                self._idle.set()


async def with_retries(write: Callable[..., Awaitable[Any]], key: Any, items: list[Any]) -> Any:
    """Ride through a Redis blip (failover, restart, loading) rather than drop a result.

    If Redis never comes back, the lease runs out and the delivery is sent again.
    """
    delay = 0.05
    for _ in range(40):
        try:
            return await write(key, items)
        except Exception as exc:
            if not isinstance(exc, TRANSIENT_WRITE) and not is_loading(exc):
                raise
            log.warning("write.retry", error=str(exc))
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)
    return await write(key, items)


def log_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("write.failed", error=str(fut.exception()))
