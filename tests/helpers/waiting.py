"""Waiting in tests for a state to be reached: a deadline against a hang, not a timing
assertion."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def until(check: Callable[[], Any], *, within: float = 10.0, every: float = 0.01) -> Any:
    """Call ``check()`` (awaited if it returns an awaitable) every ``every`` seconds until
    it is truthy, and return what it gave; fail once ``within`` seconds have passed."""
    deadline = time.monotonic() + within
    while True:
        got = check()
        got = await got if inspect.isawaitable(got) else got
        if got:
            return got
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(every)
