"""The sends in flight in one worker: their records, the slots they hold, slow sends.

A send holds a send slot while its request is open. Once its answer is in, it frees
the slot (:meth:`InFlight.answered`) and stays tracked, its outcome and verdict being
written (the heartbeat extends its lease, a shutdown waits for the write), until both
writes have ended (:meth:`InFlight.done`). A send in flight longer than its slow
threshold (``Windows.slow_after``) stops counting against the concurrency, so an
endpoint that hangs until the timeout cannot occupy every slot (no head-of-line
blocking); at most ``SLOW_HEADROOM`` x concurrency sends are tracked in all, open or
being written. ``slot_free`` is set whenever a slot may have come free.

No timer per send: :func:`watch_slow` (one task per worker) looks at the sends in flight
every ``SLOW_TICK`` while there are any, marks those past their threshold, and cancels a
request past its deadline (``http_timeout`` from its start: ``sender.Deadline``), which
the send reports as a timeout; aiohttp's own timer per request is not started.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from relay.delivery.sender import Deadline
from relay.queue.keys import ShardKeys
from relay.queue.store import Claimed

SLOW_HEADROOM = 4
SLOW_TICK = 0.025  # seconds: how late a send may be noticed as slow, at most


@dataclass(slots=True)
class Flight:
    """One claimed delivery being sent (or recorded)."""

    sk: ShardKeys
    claim: Claimed
    endpoint: dict[str, Any] | None = None  # None: the endpoint was deleted
    task: asyncio.Task[None] | None = None
    recording: bool = False  # answered, its outcome being written: nothing to hand back
    slow: bool = False
    lease_until: float = 0.0  # time.monotonic() by which its lease runs out, at the latest
    slow_at: float = float("inf")  # time.monotonic() after which it counts as slow
    deadline: Deadline = field(default_factory=Deadline)  # its request's, while one runs
    started: float = field(default_factory=time.monotonic)
    # its outcome and verdict writes (Worker._recorded, Worker._settled): the slot is
    # kept until both have ended
    settling: bool = False  # a verdict is being written
    settled: tuple[Any, BaseException | None] | None = None  # how that write ended
    recorded: bool = False  # the outcome is written and waits for the verdict's write


class InFlight:
    """Sends in flight by claim token; each request may take ``request_timeout`` seconds
    (``http_timeout``: its ``Deadline``)."""

    def __init__(self, concurrency: int, request_timeout: float = math.inf) -> None:
        self.concurrency = concurrency
        self.request_timeout = request_timeout
        self.flights: dict[str, Flight] = {}
        self.slow = 0  # sends in flight for longer than their slow threshold
        self.writing = 0  # answered sends (not slow) whose writes have not ended
        self.slot_free = asyncio.Event()
        self.busy = asyncio.Event()  # set when a send is added: watch_slow has work

    def __len__(self) -> int:
        return len(self.flights)

    def __iter__(self) -> Iterator[Flight]:
        return iter(self.flights.values())

    def free(self) -> int:
        """Send slots free: open requests hold one, slow and answered ones do not, up to
        the hard cap on sends tracked."""
        concurrency = self.concurrency
        active = len(self.flights) - self.slow - self.writing
        return min(concurrency - active, concurrency * SLOW_HEADROOM - len(self.flights))

    def answering(self) -> bool:
        """Whether any request is open that is not slow: an answer is likely soon."""
        return len(self.flights) > self.slow + self.writing

    def _open(self, endpoint_id: str) -> Iterator[Flight]:
        """The requests open to one endpoint (slow ones included, answered ones not)."""
        return (
            f
            for f in self.flights.values()
            if f.claim.endpoint_id == endpoint_id and not f.recording
        )

    def open_to(self, endpoint_id: str) -> int:
        """Requests open to one endpoint (slow ones included, answered ones not)."""
        return sum(1 for _ in self._open(endpoint_id))

    def oldest_open_ms(self, endpoint_id: str, now: float) -> float:
        """How long the oldest request open to one endpoint has been open (``now``:
        time.monotonic()), 0 when none is."""
        started = min((f.started for f in self._open(endpoint_id)), default=now)
        return (now - started) * 1000

    def add(
        self,
        sk: ShardKeys,
        claim: Claimed,
        endpoint: dict[str, Any] | None,
        slow_at: float = float("inf"),
    ) -> Flight:
        f = Flight(sk, claim, endpoint, slow_at=slow_at, deadline=Deadline(self.request_timeout))
        self.flights[claim.token] = f
        self.busy.set()
        return f

    def answered(self, f: Flight) -> None:
        """The send's answer is in (or it made no request): its outcome goes to be
        written, and its send slot to the next send."""
        f.recording = True
        if not f.slow:
            self.writing += 1
        self.slot_free.set()

    def mark_slow(self, f: Flight) -> None:
        """The send has run past its slow threshold: its slot goes to the others."""
        if f.claim.token in self.flights and not f.slow and not f.recording:
            f.slow = True
            self.slow += 1
            self.slot_free.set()

    def mark_overdue(self, now: float) -> None:
        """Mark every send past its ``slow_at`` (``now``: time.monotonic()) slow, and
        cancel every request past its deadline (``sender.send`` answers it: timeout)."""
        for f in self.flights.values():
            if f.slow_at <= now and not f.slow and not f.recording:
                self.mark_slow(f)
            if f.deadline.overdue(now) and f.task is not None:
                f.task.cancel()

    def done(self, f: Flight) -> None:
        if self.flights.pop(f.claim.token, None) is None:
            return
        if f.slow:
            self.slow -= 1
        elif f.recording:
            self.writing -= 1
        self.slot_free.set()

    def tasks(self) -> list[asyncio.Task[None]]:
        return [f.task for f in self.flights.values() if f.task is not None]

    def unfinished(self) -> list[Flight]:
        """Sends whose outcome is not being recorded (what a shutdown hands back)."""
        return [f for f in self.flights.values() if not f.recording]


async def watch_slow(inflight: InFlight, tick: float = SLOW_TICK) -> None:
    """Mark sends slow once past their threshold, and time out requests past their
    deadline: every ``tick`` while any are in flight, asleep while none are (one task for
    all of them, instead of a timer per send)."""
    while True:
        if not inflight.flights:
            inflight.busy.clear()
            await inflight.busy.wait()
        await asyncio.sleep(tick)
        inflight.mark_overdue(time.monotonic())


def by_shard(flights: Iterable[Flight]) -> list[list[Flight]]:
    """Flights grouped by shard: one script call per group (one hash slot)."""
    groups: dict[int, list[Flight]] = {}
    for f in flights:
        groups.setdefault(f.sk.shard, []).append(f)
    return list(groups.values())
