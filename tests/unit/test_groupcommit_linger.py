"""Group commit with a linger: a key's first write waits for the items still on their
way (``more(key)``), so a wave of answers is written in one script call, not several;
and nothing waits behind a lone item, a batch that is full, or an item that may not
wait (``hurry``: a verdict that frees an endpoint's max_in_flight slots).

The waits here are events, not the clock: a linger of an hour that is still waited out
would time the test out (``FAIL_AFTER``), a linger that is skipped shows as a write
with fewer items than were submitted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relay.delivery.groupcommit import GroupCommit
from relay.delivery.inflight import InFlight
from relay.delivery.worker import Worker
from relay.queue.keys import Keys
from relay.queue.store import Claimed, Outcome, Settled

HOUR = 3600.0
FAIL_AFTER = 5.0  # a write that waits longer than this waited for its linger: a failure


class Writes:
    def __init__(self, result: Any = None) -> None:
        self.calls: list[tuple[Any, list[Any]]] = []
        self.written = asyncio.Event()
        self.result = result  # None: each item is its own result

    async def __call__(self, key: Any, items: list[Any]) -> list[Any]:
        self.calls.append((key, list(items)))
        self.written.set()
        return items if self.result is None else [self.result] * len(items)


def done(got: list[int]) -> Any:
    return lambda result, exc: got.append(result)


async def settled(commit: GroupCommit) -> None:
    await asyncio.wait_for(commit.drain(), FAIL_AFTER)


async def test_items_on_their_way_are_written_together() -> None:
    """Fails without the linger (the first item is written alone, then the rest)."""
    writes, out = Writes(), {"left": 3}
    commit = GroupCommit(writes, "t", linger=HOUR, more=lambda: out["left"] > 0)
    commit.start()
    got: list[int] = []
    for i in range(3):
        out["left"] -= 1  # an answer is in
        commit.submit_then("s0", i, done(got))
        await asyncio.sleep(0)  # the writer runs between answers
        await asyncio.sleep(0)
    await settled(commit)
    await commit.stop()
    assert writes.calls == [("s0", [0, 1, 2])]
    assert got == [0, 1, 2]


async def test_nothing_on_its_way_writes_at_once() -> None:
    """A lone item (an idle worker, an ordered lane of one key) does not wait: seen
    failing (timed out) with ``more`` not asked before the first write."""
    writes = Writes()
    commit = GroupCommit(writes, "t", linger=HOUR, more=lambda: False)
    commit.start()
    commit.submit_then("s0", 1, done([]))
    await settled(commit)
    await commit.stop()
    assert writes.calls == [("s0", [1])]


async def test_the_last_answer_ends_the_wait() -> None:
    """Fails (times out) with submit_then not ending a wait that ``more`` does not
    justify any more."""
    writes, out = Writes(), {"left": 2}
    commit = GroupCommit(writes, "t", linger=HOUR, more=lambda: out["left"] > 0)
    commit.start()
    out["left"] = 1
    commit.submit_then("s0", 1, done([]))
    await asyncio.sleep(0.01)  # the writer is waiting for the second
    assert writes.calls == []
    out["left"] = 0
    commit.submit_then("s0", 2, done([]))
    await settled(commit)
    await commit.stop()
    assert writes.calls == [("s0", [1, 2])]


async def test_an_item_that_may_not_wait_ends_the_wait() -> None:
    """Fails (times out) with ``hurry`` ignored."""
    writes = Writes()
    commit = GroupCommit(writes, "t", linger=HOUR, more=lambda: True)
    commit.start()
    commit.submit_then("ep", 1, done([]))
    await asyncio.sleep(0.01)
    assert writes.calls == []
    commit.submit_then("ep", 2, done([]), hurry=True)
    await settled(commit)
    # a hurried first item does not wait at all
    commit.submit_then("ep", 3, done([]), hurry=True)
    await settled(commit)
    await commit.stop()
    assert writes.calls == [("ep", [1, 2]), ("ep", [3])]


async def test_a_full_batch_goes_without_waiting() -> None:
    """Fails (times out) with the batch's size left out of ``_lingers``."""
    writes = Writes()
    commit = GroupCommit(writes, "t", max_batch=3, linger=HOUR, more=lambda: True)
    commit.start()
    for i in range(3):
        commit.submit_then("s0", i, done([]))
    await settled(commit)
    await commit.stop()
    assert writes.calls == [("s0", [0, 1, 2])]


async def test_the_linger_ends_when_answers_stop_coming() -> None:
    """``more`` says yes for ever (a send hanging to its timeout): the write goes after
    the linger, with what came. Fails (times out) with no timeout on the wait."""
    writes = Writes()
    commit = GroupCommit(writes, "t", linger=0.05, more=lambda: True)
    commit.start()
    commit.submit_then("s0", 1, done([]))
    commit.submit_then("s0", 2, done([]))
    await settled(commit)
    await commit.stop()
    assert writes.calls == [("s0", [1, 2])]


async def test_the_last_answer_ends_every_keys_wait() -> None:
    """The last answer on its way was another key's: a key that has waited gets no
    submit of its own to end its wait. Fails (times out) with only the submitted key's
    wait ended."""
    writes, out = Writes(), {"left": 2}
    commit = GroupCommit(writes, "t", linger=HOUR, more=lambda: out["left"] > 0)
    commit.start()
    out["left"] = 1
    commit.submit_then("ep_1", 1, done([]))
    await asyncio.sleep(0.01)
    out["left"] = 0
    commit.submit_then("ep_2", 2, done([]))
    await settled(commit)
    await commit.stop()
    assert sorted(writes.calls) == [("ep_1", [1]), ("ep_2", [2])]


async def test_keys_linger_apart() -> None:
    """One key's wait holds back no other key's write: "fast" goes at once (hurried)
    while "slow" still waits for more. Fails (times out) with ``hurry`` ignored."""
    writes = Writes()
    commit = GroupCommit(writes, "t", linger=HOUR, more=lambda: True)
    commit.start()
    commit.submit_then("slow", 1, done([]))
    commit.submit_then("fast", 2, done([]), hurry=True)
    await asyncio.wait_for(writes.written.wait(), FAIL_AFTER)
    assert writes.calls == [("fast", [2])]
    commit.submit_then("slow", 3, done([]), hurry=True)
    await settled(commit)
    await commit.stop()
    assert writes.calls == [("fast", [2]), ("slow", [1, 3])]


@pytest.mark.parametrize("state", ["open", "slow", "answered"])
def test_answering_counts_open_requests_that_are_not_slow(state: str) -> None:
    """What the worker's group commits ask: a request still open and not slow (a slow
    one may hang until its timeout; an answered one has submitted its outcome). Seen
    failing with slow sends counted."""
    inflight = InFlight(4)
    sk = Keys("t", 1).shard(0)
    assert not inflight.answering()
    f = inflight.add(sk, Claimed("dlv_1", "tok_1", 1, 3, "evt_1", "ep_1", "{}"), None)
    if state == "slow":
        inflight.mark_slow(f)
    elif state == "answered":
        inflight.answered(f)
    assert inflight.answering() is (state == "open")
    inflight.done(f)
    assert not inflight.answering()


@pytest.mark.parametrize("capped", [False, True])
async def test_the_worker_writes_a_capped_endpoints_verdict_at_once(
    fake_store: Any, capped: bool
) -> None:
    """An endpoint with max_in_flight gets its slots back from its settle: its verdict
    does not wait for the other sends' answers, while an uncapped one's does (both with
    another send still open). Fails with the worker not passing ``hurry``."""
    worker = Worker(fake_store, fake_store.settings)
    settles = Writes(Settled("closed", 0, 0, 0, 0))
    worker._settler = GroupCommit(settles, "t", linger=HOUR, more=worker._inflight.answering)
    worker._recorder = GroupCommit(Writes(), "t")
    worker._settler.start()
    worker._recorder.start()
    sk = Keys("t", 1).shard(0)
    hanging = asyncio.Event()

    async def attempt(c: Claimed, endpoint: Any, deadline: Any = None) -> tuple[Outcome, str]:
        if c.id == "dlv_open":
            await hanging.wait()
        return Outcome(c.id, c.token, "succeeded", 0, 200, "", b"{}"), "1"

    worker._attempter.attempt = attempt  # type: ignore[method-assign]
    endpoint = {"id": "ep_1", "max_in_flight": 2 if capped else None}
    worker._spawn(sk, Claimed("dlv_open", "tok_open", 1, 3, "e", "ep_2", "{}"), {"id": "ep_2"})
    worker._spawn(sk, Claimed("dlv_1", "tok_1", 1, 3, "e", "ep_1", "{}"), endpoint)
    if capped:
        await asyncio.wait_for(settles.written.wait(), FAIL_AFTER)
        assert settles.calls == [("ep_1", [("tok_1", "1", "ok 0")])]
    else:
        for _ in range(50):
            await asyncio.sleep(0)
        assert settles.calls == []  # waits for the open send's answer
    hanging.set()
    await asyncio.wait_for(worker._settler.drain(), FAIL_AFTER)
    await worker._settler.stop()
    await worker._recorder.stop()
    assert ("ep_1", [("tok_1", "1", "ok 0")]) in settles.calls
