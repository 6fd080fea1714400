"""Open broker connections, one per destination url, shared by a worker's sends.

A connection is opened once for all the sends that want it at the same moment (they
await one task), dropped when a send finds it broken, and closed once it has gone
unused for ``idle`` seconds (:meth:`Pool.sweep`, run by :meth:`Pool.run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from relay.delivery.destinations.base import Publisher

log = structlog.get_logger("relay.destinations")

Connect = Callable[[str], Awaitable[Publisher]]


@dataclass(slots=True)
class _Entry:
    task: asyncio.Future[Publisher]
    used: float = field(default_factory=time.monotonic)


class Pool:
    """Connections by url; ``connect(url)`` opens one."""

    def __init__(self, connect: Connect, *, idle: float) -> None:
        self._connect = connect
        self.idle = idle
        self._entries: dict[str, _Entry] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, url: str) -> Publisher:
        """The open connection for ``url``, opened when there is none (its error raised
        to every send that waited for it; the next send tries again)."""
        entry = self._entries.get(url)
        if entry is not None and entry.task.done() and not entry.task.cancelled():
            if entry.task.exception() is None and entry.task.result().closed:
                self._forget(url, entry)
                entry = None
        if entry is None:
            entry = _Entry(asyncio.ensure_future(self._connect(url)))
            self._entries[url] = entry
        entry.used = time.monotonic()
        if entry.task.done() and not entry.task.cancelled() and entry.task.exception() is None:
            return entry.task.result()  # the common case: open already, nothing to await
        try:
            return await asyncio.shield(entry.task)
        except asyncio.CancelledError:
            raise
        except BaseException:
            if self._entries.get(url) is entry:
                del self._entries[url]
            raise

    def drop(self, url: str, publisher: Publisher) -> None:
        """Forget ``url``'s connection, if it is still ``publisher``, and close it."""
        entry = self._entries.get(url)
        if entry is None or not entry.task.done() or entry.task.cancelled():
            return
        if entry.task.exception() is None and entry.task.result() is publisher:
            self._forget(url, entry)

    def _forget(self, url: str, entry: _Entry) -> None:
        del self._entries[url]
        task = asyncio.ensure_future(_close(entry.task.result()))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def sweep(self, now: float | None = None) -> int:
        """Close the connections unused for ``idle`` seconds; how many were closed."""
        cutoff = (time.monotonic() if now is None else now) - self.idle
        stale = [(u, e) for u, e in self._entries.items() if e.used <= cutoff and e.task.done()]
        closed = 0
        for url, entry in stale:
            if entry.task.cancelled() or entry.task.exception() is not None:
                del self._entries[url]
                continue
            self._forget(url, entry)
            closed += 1
        return closed

    async def run(self) -> None:
        """Sweep every half ``idle`` until cancelled."""
        while True:
            await asyncio.sleep(self.idle / 2)
            self.sweep()

    async def close(self) -> None:
        """Close every connection (a worker stopping)."""
        entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            if not entry.task.done():
                entry.task.cancel()
        for entry in entries:
            with contextlib.suppress(BaseException):
                await _close(await entry.task)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


async def _close(publisher: Publisher) -> None:
    try:
        await publisher.close()
    except Exception as exc:  # a broken connection may fail to close; it is gone either way
        log.debug("destination.close_failed", error=type(exc).__name__)
