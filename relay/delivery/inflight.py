"""The sends in flight in one worker: their records, the slots they hold, slow sends.

A send in flight longer than its slow threshold (``Windows.slow_after``) stops counting
against the concurrency, so an endpoint that hangs until the timeout cannot occupy
every slot (no head-of-line blocking); at most ``SLOW_HEADROOM`` x concurrency requests
are open in all. ``slot_free`` is set whenever a slot may have come free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from relay.queue.keys import ShardKeys
from relay.queue.store import Claimed

SLOW_HEADROOM = 4


@dataclass
class Flight:
    """One claimed delivery being sent (or recorded)."""

    sk: ShardKeys
    claim: Claimed
    endpoint: dict[str, Any] | None = None  # None: the endpoint was deleted
    task: asyncio.Task[None] | None = None
    recording: bool = False  # its outcome is being written: nothing left to hand back
    slow: bool = False
    lease_until: float = 0.0  # time.monotonic() by which its lease runs out, at the latest


class InFlight:
    """Sends in flight by claim token."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.flights: dict[str, Flight] = {}
        self.slow = 0  # sends in flight for longer than their slow threshold
        self.slot_free = asyncio.Event()

    def __len__(self) -> int:
        return len(self.flights)

    def __iter__(self) -> Iterator[Flight]:
        return iter(self.flights.values())

    def free(self) -> int:
        """Send slots free: slow sends do not count, up to the hard cap on open requests."""
        concurrency = self.concurrency
        active = len(self.flights) - self.slow
        return min(concurrency - active, concurrency * SLOW_HEADROOM - len(self.flights))

    def open_to(self, endpoint_id: str) -> int:
        """Requests open to one endpoint (slow ones included)."""
        return sum(1 for f in self.flights.values() if f.claim.endpoint_id == endpoint_id)

    def add(self, sk: ShardKeys, claim: Claimed, endpoint: dict[str, Any] | None) -> Flight:
        f = Flight(sk, claim, endpoint)
        self.flights[claim.token] = f
        return f

    def mark_slow(self, f: Flight) -> None:
        """The send has run past its slow threshold: its slot goes to the others."""
        if f.claim.token in self.flights and not f.slow:
            f.slow = True
            self.slow += 1
            self.slot_free.set()

    def done(self, f: Flight) -> None:
        if f.slow:
            self.slow -= 1
        self.flights.pop(f.claim.token, None)
        self.slot_free.set()

    def tasks(self) -> list[asyncio.Task[None]]:
        return [f.task for f in self.flights.values() if f.task is not None]

    def unfinished(self) -> list[Flight]:
        """Sends whose outcome is not being recorded (what a shutdown hands back)."""
        return [f for f in self.flights.values() if not f.recording]


def by_shard(flights: Iterable[Flight]) -> list[list[Flight]]:
    """Flights grouped by shard: one script call per group (one hash slot)."""
    groups: dict[int, list[Flight]] = {}
    for f in flights:
        groups.setdefault(f.sk.shard, []).append(f)
    return list(groups.values())
