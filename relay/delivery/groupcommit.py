"""Group commit: the writes of many finished sends go to Redis in one script call.

Whatever is submitted for a key (a shard, an endpoint: one hash slot) while that key's
previous write runs goes in its next one, so under load a worker records outcomes (and
settles breakers) in batches; when idle, a single outcome is written at once. Keys are
written side by side, each by its own writer.

With a ``linger`` and a ``more`` (``more()``: are more items on their way, sends whose
answers are still out), a key's first write waits for them, up to ``linger`` seconds or
a full batch, and goes as soon as a submit finds ``more()`` false (then every waiting
key's write goes: nothing more is coming for any), or brings an item that may not wait
(``hurry``). A worker's sends go out in waves and their answers come back over a few ms,
so gathering them makes fewer script calls per delivery. Nothing waits behind a lone
send (an ordered lane of one key, an idle worker): ``more()`` is false and the write goes
at once.

A write that fails because Redis is unavailable (down, stalled past the socket timeout,
read-only after a failover, busy with a script, loading) is retried, not dropped: until
the latest deadline of its batch (for an outcome, its lease's expiry minus a margin).
Dropping a finished outcome would let its lease run out and the delivery be sent again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from relay.queue.errors import is_transient

log = structlog.get_logger("relay.worker")


Deadline = Callable[[], float]  # a time.monotonic() value, read at each retry
# Told how an item's write ended: (result, None), or (None, the exception) when it
# failed or was given up on. Called from the group commit's task, right after the write.
Done = Callable[[Any, BaseException | None], None]


class GroupCommit:
    """Group commit: whatever was submitted while the last write ran goes in the next one.

    ``write(key, items)`` returns one result per item; every key is written separately
    (a key is a shard or an endpoint: one hash slot, one script call). ``budget``: how
    long an item submitted without a deadline may be retried (seconds).
    """

    def __init__(
        self,
        write: Callable[[Any, list[Any]], Awaitable[list[Any]]],
        name: str,
        max_batch: int = 256,
        budget: float = 10.0,
        linger: float = 0.0,
        more: Callable[[], bool] | None = None,
    ) -> None:
        self._write = write
        self._name = name
        self._max = max_batch
        self._budget = budget
        self._linger = linger if more is not None else 0.0
        self._more = more
        self._gathering: dict[Any, asyncio.Future[None]] = {}  # keys whose write lingers
        self._hurried: set[Any] = set()  # keys with an item that may not wait
        self._pending: dict[Any, list[tuple[Any, Done, Deadline]]] = {}
        self._writing: set[Any] = set()  # keys with a write under way
        self._kick = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    def submit_then(
        self,
        key: Any,
        item: Any,
        done: Done,
        deadline: Deadline | None = None,
        *,
        hurry: bool = False,
    ) -> None:
        """Queue ``item``, retried until ``deadline()`` (default: ``budget`` from now), and
        call ``done(result, exception)`` (from this group commit's task, in its context)
        when its write has ended: no future, no scheduled callback. ``hurry``: the item
        may not linger (its key's next write goes without waiting for more)."""
        if deadline is None:
            at = time.monotonic() + self._budget
            deadline = lambda: at  # noqa: E731
        items = self._pending.setdefault(key, [])
        items.append((item, done, deadline))
        self._idle.clear()
        self._kick.set()
        if hurry:
            self._hurried.add(key)
        if self._gathering:
            self._end_waits(key, items)

    def _end_waits(self, key: Any, items: list[Any]) -> None:
        """After a submit to ``key``: with nothing more on its way, end every key's wait
        (no later submit would); else end ``key``'s if its batch is full or hurried."""
        if self._more is not None and not self._more():
            for waiting in self._gathering.values():
                if not waiting.done():
                    waiting.set_result(None)
            return
        gathering = self._gathering.get(key)
        if gathering is not None and not gathering.done() and not self._lingers(key, items):
            gathering.set_result(None)

    def _lingers(self, key: Any, items: list[Any]) -> bool:
        """Whether ``key``'s next write may wait for more of its items."""
        return (
            key not in self._hurried
            and len(items) < self._max
            and self._more is not None
            and self._more()
        )

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
        """Start a writer for every key with items waiting and none writing: the keys'
        writes run side by side, each key's in order, one at a time. A key whose write
        is retried (its shard's slot moving, its node failing over) holds back only its
        own items, not the other shards' or endpoints'."""
        writers: set[asyncio.Task[None]] = set()  # held: the loop keeps weak references
        while True:
            await self._kick.wait()
            self._kick.clear()
            for key in [k for k in self._pending if k not in self._writing]:
                self._writing.add(key)
                task = asyncio.create_task(self._write_key(key), name=self._name)
                writers.add(task)
                task.add_done_callback(writers.discard)
            if not self._pending and not self._writing:
                self._idle.set()

    async def _write_key(self, key: Any) -> None:
        """Write ``key``'s items, batch after batch, until none are waiting."""
        try:
            if self._linger:
                await self._gather(key)
            while items := self._pending.pop(key, None):
                self._hurried.discard(key)
                batch, rest = items[: self._max], items[self._max :]
                if rest:
                    self._pending[key] = rest
                ended: list[tuple[Done, Any, BaseException | None]]
                try:
                    res = await with_retries(
                        self._write, key, [i for i, _, _ in batch], _latest(batch)
                    )
                    ended = [(done, r, None) for (_, done, _), r in zip(batch, res, strict=True)]
                except Exception as exc:
                    ended = [(done, None, exc) for _, done, _ in batch]
                for done, r, err in ended:
                    try:
                        done(r, err)
                    except Exception:  # one caller's bug must not stop the others' writes
                        log.exception("write.callback_failed", writer=self._name)
        finally:
            self._writing.discard(key)
            self._kick.set()  # the loop starts the key again if more came, or goes idle

    async def _gather(self, key: Any) -> None:
        """Before ``key``'s first write: wait for the items still on their way, up to
        ``linger`` (one timer per batch; a submit that fills the batch, or that finds
        nothing more on its way, ends the wait)."""
        if not self._lingers(key, self._pending.get(key, [])):
            return
        gathering = self._gathering[key] = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(self._linger):
                await gathering
        except TimeoutError:
            pass
        finally:
            del self._gathering[key]


def _latest(batch: list[tuple[Any, Done, Deadline]]) -> Deadline:
    """The batch's deadline: the latest of its items' (each read afresh, as leases move)."""
    deadlines = [d for _, _, d in batch]
    return lambda: max(d() for d in deadlines)


async def with_retries(
    write: Callable[..., Awaitable[Any]], key: Any, items: list[Any], deadline: Deadline
) -> Any:
    """Ride through Redis being unavailable (a stall, failover, restart, loading, a busy
    script) rather than drop a result: retry until ``deadline()`` has passed.

    Once it has, the error is raised: the lease runs out and the delivery is sent again
    (the at-least-once window of a stall longer than the lease).
    """
    delay = 0.05
    while True:
        try:
            return await write(key, items)
        except Exception as exc:
            if not is_transient(exc):
                raise
            left = deadline() - time.monotonic()
            if left <= 0:
                log.error("write.gave_up", error=str(exc) or type(exc).__name__)
                raise
            log.warning("write.retry", error=str(exc) or type(exc).__name__)
        await asyncio.sleep(min(delay, max(0.0, left)))
        delay = min(delay * 2, 1.0)


def log_failed(result: Any, exc: BaseException | None) -> None:
    """The ``done`` of a write nobody waits for (a deferral, a neutral settle at
    shutdown): its failure is logged."""
    if exc is not None:
        log.warning("write.failed", error=str(exc) or type(exc).__name__)
