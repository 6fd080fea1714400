"""The sandbox itself: its verdicts at a deadline and past its memory budget, its children
replaced, and none left behind.

Seen failing before the change: ``relay.sandbox`` did not exist (filters and schemas ran
in the API's own event loop, with no budget; see tests/test_tenant_budget.py for what
that did to other tenants).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import orjson
import pytest

from relay.sandbox import Sandbox, SchemaFailure, Work
from relay.sandbox.work import (
    FILTER_MEMORY,
    FILTER_SECONDS,
    FILTER_TIME,
    FILTER_UNREACHED,
    SCHEMA_SECONDS,
)
from tests.helpers.hostile import (
    MEMORY_FILTER,
    MEMORY_PAYLOAD,
    SLOW_FILTER,
    SLOW_SCHEMA,
    SLOW_SCHEMA_PAYLOAD,
)
from tests.helpers.worker import until

SLACK = 2.0  # a child's start and a loaded machine; the unbudgeted cost is 6-10 s


def work(payload: Any, *texts: str, schema: Any = None, app: str = "h") -> Work:
    return Work(
        app,
        "order.paid",
        payload,
        orjson.dumps(payload),
        None if schema is None else orjson.dumps(schema),
        list(texts),
    )


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
async def sandbox() -> Any:
    box = Sandbox()
    yield box
    pids = box.pids
    await box.close()
    assert not any(alive(p) for p in pids), "a child outlived close()"


async def test_the_filter_running_at_the_deadline_is_blamed(sandbox: Sandbox) -> None:
    await sandbox.judge(work({}, "true"))  # a child up: its start is not in the budget
    started = time.monotonic()
    verdict = await sandbox.judge(work({"n": 1}, "payload.n == 1", SLOW_FILTER, "true", "false"))
    took = time.monotonic() - started
    assert verdict.schema is None
    assert verdict.filters == [True, FILTER_TIME, FILTER_UNREACHED, FILTER_UNREACHED]
    assert FILTER_SECONDS <= took < FILTER_SECONDS + SLACK, took
    assert sandbox.stopped == 1
    # the killed child is replaced; the next publish is judged as usual
    assert (await sandbox.judge(work({"n": 2}, "payload.n == 2", "false"))).filters == [
        True,
        False,
    ]


async def test_a_filter_that_went_over_is_judged_last_next_time(sandbox: Sandbox) -> None:
    """The owner's other filters are not left out behind its costly one twice."""
    await sandbox.judge(work({}, "true"))
    first = await sandbox.judge(work({"n": 1}, SLOW_FILTER, "payload.n == 1"))
    assert first.filters == [FILTER_TIME, FILTER_UNREACHED]
    again = await sandbox.judge(work({"n": 1}, SLOW_FILTER, "payload.n == 1"))
    assert again.filters == [FILTER_TIME, True]  # in the work's order, judged the other way


async def test_apps_that_went_over_share_one_child(sandbox: Sandbox) -> None:
    """Two costly apps at once hold one child between them, not both: every one of B's
    requests finds an idle child waiting for it (fails without the lane: B finds none
    whenever both children are busy with H1's and H2's filters)."""
    await sandbox.judge(work({}, "true", app="b"))
    for app in ("h1", "h2"):  # their first costly requests, one after the other
        assert (await sandbox.judge(work({}, SLOW_FILTER, app=app))).filters == [FILTER_TIME]
    await until(lambda: sandbox._idle.qsize() == sandbox.processes)  # both replacements up
    mine = asyncio.current_task()
    found_none = []
    take = sandbox._take

    async def watched_take() -> Any:  # counts B's requests that found no idle child
        if asyncio.current_task() is mine:
            found_none.append(sandbox._idle.empty())
        return await take()

    sandbox._take = watched_take  # type: ignore[method-assign]
    hostile = asyncio.gather(
        *(sandbox.judge(work({}, SLOW_FILTER, app=a)) for a in ("h1", "h2", "h1", "h2"))
    )
    while not hostile.done():
        verdict = await sandbox.judge(work({"n": 1}, "payload.n == 1", app="b"))
        assert verdict.filters == [True]
        await asyncio.sleep(0.02)
    assert len(found_none) > 10 and not any(found_none), found_none.count(True)
    assert [v.filters for v in await hostile] == [[FILTER_TIME]] * 4


async def test_a_filter_past_the_memory_budget_is_left_out() -> None:
    """Blamed for memory, whatever the machine's load: the time budget here is one the
    filter cannot reach before its child runs out of address space."""
    box = Sandbox(filter_seconds=60.0)
    try:
        texts = ("true", MEMORY_FILTER, "payload.l.size() == 400")
        verdict = await box.judge(work(MEMORY_PAYLOAD, *texts))
        assert verdict.filters == [True, FILTER_MEMORY, True]
        assert (await box.judge(work({}, "true"))).filters == [True]
    finally:
        pids = box.pids
        await box.close()
    assert not any(alive(p) for p in pids), "a child outlived close()"


async def test_a_schema_past_its_time_is_refused(sandbox: Sandbox) -> None:
    await sandbox.judge(work({}, "true"))
    started = time.monotonic()
    verdict = await sandbox.judge(work(SLOW_SCHEMA_PAYLOAD, "true", schema=SLOW_SCHEMA))
    took = time.monotonic() - started
    assert verdict.schema == SchemaFailure("time") and verdict.filters == []
    assert SCHEMA_SECONDS <= took < SCHEMA_SECONDS + SLACK, took
    ok = await sandbox.judge(work({"items": [{"k3": 1}]}, "true", schema=SLOW_SCHEMA))
    assert ok.schema is None and ok.filters == [True]
    bad = await sandbox.judge(work({"items": [1]}, "true", schema=SLOW_SCHEMA))
    assert bad.schema is not None and bad.schema.kind == "invalid"
    assert bad.schema.path == "$.items[0]" and bad.filters == []


async def test_a_child_killed_from_outside_is_replaced_unblamed(sandbox: Sandbox) -> None:
    await sandbox.judge(work({}, "true"))
    for pid in sandbox.pids:
        os.kill(pid, signal.SIGKILL)
    await asyncio.sleep(0.3)  # reaped before the next request is sent
    assert (await sandbox.judge(work({}, "true", "false"))).filters == [True, False]
