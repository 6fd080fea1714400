"""The worker's sends in flight, without Redis: slow sends noticed by one watcher (no
timer per send); a send's slot freed once its answer is in, and the send itself tracked
until its outcome and its breaker verdict are written, after its task has ended
(``Worker._deliver`` hands both to the group commits and returns)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
import structlog

from relay.delivery.groupcommit import GroupCommit
from relay.delivery.inflight import InFlight, watch_slow
from relay.delivery.worker import Worker
from relay.queue.keys import Keys
from relay.queue.store import Claimed, Outcome, Settled, Store

SK = Keys("t", 1).shard(0)


def claim(n: int) -> Claimed:
    return Claimed(f"dlv_{n}", f"tok_{n}", 1, 3, f"evt_{n}", "ep_1", "{}")


async def until(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_one_watcher_marks_sends_slow_past_their_threshold() -> None:
    inflight = InFlight(2)
    late = inflight.add(SK, claim(1), None, slow_at=time.monotonic() - 1)
    later = inflight.add(SK, claim(2), None, slow_at=time.monotonic() + 3600)
    assert inflight.free() == 0
    watcher = asyncio.create_task(watch_slow(inflight, tick=0.01))
    try:
        await until(lambda: late.slow)
        assert not later.slow
        assert inflight.slow == 1 and inflight.free() == 1 and inflight.slot_free.is_set()
        inflight.done(late)
        inflight.done(later)
        assert inflight.slow == 0
        await until(lambda: not inflight.busy.is_set())  # none in flight: asleep
        inflight.add(SK, claim(3), None, slow_at=time.monotonic() - 1)
        await until(lambda: inflight.slow == 1)  # woken by the add
    finally:
        watcher.cancel()


class Gate:
    """A group commit's write that answers only once the test opens it."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.error: Exception | None = None
        self.open = asyncio.Event()
        self.items: list[Any] = []

    async def __call__(self, key: Any, items: list[Any]) -> list[Any]:
        self.items += items
        await self.open.wait()
        if self.error is not None:
            raise self.error
        return [self.result] * len(items)


def worker_with_gates(store: Store, recorded: int) -> tuple[Worker, Gate, Gate]:
    worker = Worker(store, store.settings)
    record, settle = Gate(recorded), Gate(Settled("closed", 0, 0, 0, 0))
    worker._recorder = GroupCommit(record, "test-recorder", budget=0.1)
    worker._settler = GroupCommit(settle, "test-settler", budget=0.1)
    worker._recorder.start()
    worker._settler.start()

    async def attempt(c: Claimed, endpoint: Any, deadline: Any = None) -> tuple[Outcome, str]:
        return Outcome(c.id, c.token, "succeeded", 0, 200, "", b"{}"), "1"

    worker._attempter.attempt = attempt  # type: ignore[method-assign]
    return worker, record, settle


def logged_with_ids() -> Any:
    """structlog's captured lines, with each send's bound ids (delivery_id, ...)."""
    return structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars])


async def stop_writers(worker: Worker) -> None:
    await worker._recorder.stop()
    await worker._settler.stop()


@pytest.mark.parametrize("first", ["record", "settle"])
async def test_an_answered_send_frees_its_slot_and_is_tracked_until_both_writes_end(
    fake_store: Store, first: str
) -> None:
    """Fails with ``InFlight.answered`` not counting the send as writing (its slot stays
    taken: free() is one short) and with ``done`` not discounting it (the next send
    finds one slot fewer)."""
    worker, record, settle = worker_with_gates(fake_store, 1)
    window = worker._windows.window("ep_1")
    concurrency = worker.settings.worker_concurrency
    worker._spawn(SK, claim(1), {"id": "ep_1"})
    f = worker._inflight.flights["tok_1"]
    await until(lambda: bool(record.items) and bool(settle.items))
    assert f.task is not None and f.task.done()  # the send's task has ended...
    assert f.recording and worker._inflight.free() == concurrency  # ...its slot is free
    assert worker._inflight.open_to("ep_1") == 0  # no request open to the endpoint
    assert [x.claim.id for x in worker._inflight.unfinished()] == []  # nothing to hand back
    one, other = (record, settle) if first == "record" else (settle, record)
    one.open.set()
    for _ in range(20):
        await asyncio.sleep(0)
    assert "tok_1" in worker._inflight.flights  # ...one write has ended, not the other
    assert worker._windows.window("ep_1") == window
    other.open.set()
    await until(lambda: "tok_1" not in worker._inflight.flights)
    assert worker._windows.window("ep_1") == window + 1  # the success was settled
    assert worker.stats.fenced == 0 and worker._inflight.free() == concurrency
    await stop_writers(worker)


def test_slots_count_open_requests_and_the_cap_counts_every_send_tracked() -> None:
    """An answered send frees its slot once, a slow one once: a slow send that answers
    is not freed twice; sends being written still count against the hard cap."""
    inflight = InFlight(2)
    a = inflight.add(SK, claim(1), None)
    b = inflight.add(SK, claim(2), None)
    assert inflight.free() == 0
    inflight.answered(a)
    assert inflight.free() == 1 and inflight.writing == 1
    inflight.mark_slow(a)  # answered: no longer a request, so never slow
    assert not a.slow and inflight.free() == 1
    inflight.mark_slow(b)
    inflight.answered(b)  # slow, then answered: its slot was freed when it went slow
    assert inflight.free() == 2 and (inflight.slow, inflight.writing) == (1, 1)
    for n in range(3, 9):  # more sends fill the slots and then the cap (2 x 4 tracked)
        f = inflight.add(SK, claim(n), None)
        inflight.answered(f)
    assert len(inflight) == 8 and inflight.free() == 0  # the cap, not the slots
    inflight.done(a)
    inflight.done(a)  # a second done changes nothing
    inflight.done(b)
    assert (inflight.slow, inflight.writing, len(inflight)) == (0, 6, 6)
    assert inflight.free() == 2


async def test_a_failed_verdict_write_frees_the_slot_and_is_logged(fake_store: Store) -> None:
    worker, record, settle = worker_with_gates(fake_store, 1)
    settle.error = ValueError("no verdict")
    record.open.set()
    settle.open.set()
    with logged_with_ids() as logs:
        worker._spawn(SK, claim(1), {"id": "ep_1"})
        await until(lambda: not worker._inflight.flights)
    failed = [e for e in logs if e["event"] == "write.failed"]
    assert [e["delivery_id"] for e in failed] == ["dlv_1"]
    assert [e["delivery_id"] for e in logs if e["event"] == "delivery.crashed"] == ["dlv_1"]
    await stop_writers(worker)


async def test_fenced_and_lost_outcomes_are_logged_with_the_delivery_ids(
    fake_store: Store,
) -> None:
    worker, record, settle = worker_with_gates(fake_store, 0)
    record.open.set()
    settle.open.set()
    with logged_with_ids() as logs:
        worker._spawn(SK, claim(1), {"id": "ep_1"})
        await until(lambda: not worker._inflight.flights)
        record.error = ValueError("gone")  # not transient: no retry
        worker._spawn(SK, claim(2), {"id": "ep_1"})
        await until(lambda: not worker._inflight.flights)
    assert worker.stats.fenced == 1
    by_event = {e["event"]: e for e in logs}
    assert by_event["delivery.fenced"]["delivery_id"] == "dlv_1"
    assert by_event["delivery.outcome_lost"]["delivery_id"] == "dlv_2"
    assert by_event["delivery.outcome_lost"]["event_id"] == "evt_2"
    assert by_event["delivery.outcome_lost"]["error"] == "gone"
    await stop_writers(worker)
