"""The sandbox: tenant logic evaluated in child processes, within budgets.

A :class:`Sandbox` keeps :data:`PROCESSES` evaluator children
(``python -m relay.sandbox.child``), started on first need. Each publish that has a
schema or a filter to run sends one request to one idle child and reads its answers
item by item under a deadline: :data:`~relay.sandbox.work.SCHEMA_SECONDS` for the
schema, then :data:`~relay.sandbox.work.FILTER_SECONDS` for all the filters together.
At a deadline the child is SIGKILLed and replaced, and the item it was on is blamed; a
child that dies, or runs out of its address space
(:data:`~relay.sandbox.work.MEMORY_BYTES` beyond its idle size), is blamed for memory.

Fairness: an app has at most one request in flight here (its publishes queue behind
each other), so one app's costly logic holds at most one child and every other app
keeps the rest. An app whose request cost a child (killed, or retired past its memory)
waits for that child's replacement before its next request, rather than taking the
child the others are using meanwhile, and for :data:`PENALTY_SECONDS` takes its turns in
one lane shared with every other such app: several costly apps together hold one child.
The event loop only writes and reads pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

import structlog

from relay.sandbox import children, wire
from relay.sandbox.children import Child, SandboxUnavailable
from relay.sandbox.work import (
    FILTER_LOST,
    FILTER_MEMORY,
    FILTER_SECONDS,
    FILTER_TIME,
    FILTER_UNREACHED,
    SCHEMA_SECONDS,
    SchemaFailure,
    Verdict,
    Work,
)

log = structlog.get_logger("relay.sandbox")

PROCESSES = 2  # children per relay process: one app can hold one of them at most
MAX_KNOWN = 1_000  # texts a child holds compiled; past it the child forgets them all
RESTART_DELAY = 1.0  # between attempts to replace a child that could not be started
# An app whose request cost a child (over a budget) takes its turns in one lane shared
# with every other such app, this long: together they hold one child at most.
PENALTY_SECONDS = 60.0
LANE = "\x00lane"  # the lane's key among the apps owing a replacement (no app's name)


class _Turn:
    """One app's place in line: its lock and how many of its publishes hold or await it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class Sandbox:
    def __init__(
        self,
        processes: int = PROCESSES,
        *,
        schema_seconds: float = SCHEMA_SECONDS,
        filter_seconds: float = FILTER_SECONDS,
    ) -> None:
        if processes < 2:
            raise ValueError("a sandbox needs two processes or more (one app holds one)")
        self.processes = processes
        self.schema_seconds = schema_seconds
        self.filter_seconds = filter_seconds
        self._idle: asyncio.Queue[Child] = asyncio.Queue()
        self._children: set[Child] = set()
        self._starting = 0
        self._turns: dict[str, _Turn] = {}
        self._owed: dict[str, asyncio.Task[None]] = {}  # app -> the restart it caused
        self._penalty: dict[str, float] = {}  # app -> when its turns in the lane end
        self._lane = asyncio.Lock()
        self._costly: dict[str, None] = {}  # filter texts that went over a budget
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.started = 0  # children started, replacements included
        self.stopped = 0  # children killed at a deadline or found dead

    @property
    def pids(self) -> list[int]:
        return [c.proc.pid for c in self._children]

    async def judge(self, work: Work) -> Verdict:
        """The verdict on ``work``, within the budgets (the schema's, then the filters')."""
        if self._closed:
            raise SandboxUnavailable("the sandbox is closed")
        turn = self._turns.get(work.app)
        if turn is None:
            turn = self._turns[work.app] = _Turn()
        turn.users += 1
        try:
            async with turn.lock:
                if self._penalized(work.app):
                    async with self._lane:  # one child for all the apps that went over
                        return await self._judge(work, (work.app, LANE))
                return await self._judge(work, (work.app,))
        finally:
            turn.users -= 1
            if not turn.users:
                del self._turns[work.app]

    async def _judge(self, work: Work, debtors: tuple[str, ...]) -> Verdict:
        """Judge on an idle child once the replacements ``debtors`` (the app, and the
        lane) caused are up, so the other apps keep the children they have."""
        owed = [t for d in debtors if (t := self._owed.get(d)) is not None]
        if owed:
            await asyncio.wait(owed, timeout=children.START_SECONDS)
        child = await self._take()
        usable = False
        try:
            verdict, usable = await self._ask(child, work)
        finally:  # a cancelled request leaves the child mid-answer: replace it too
            if usable:
                self._idle.put_nowait(child)
            else:
                restart = self._replace(child)
                for debtor in debtors:
                    self._owe(debtor, restart)
                self._penalize(work.app)
        return verdict

    def _penalized(self, app: str) -> bool:
        until = self._penalty.get(app)
        if until is not None and until <= time.monotonic():
            del self._penalty[app]
            return False
        return until is not None

    def _penalize(self, app: str) -> None:
        if len(self._penalty) >= MAX_KNOWN:
            now = time.monotonic()
            self._penalty = {a: t for a, t in self._penalty.items() if t > now}
        self._penalty[app] = time.monotonic() + PENALTY_SECONDS

    async def _take(self) -> Child:
        """An idle child; the pool is filled up first (all of it on first need, so a
        second app never waits for a start behind the first)."""
        while True:
            if self._idle.empty():
                self._fill()
                try:
                    child = await asyncio.wait_for(self._idle.get(), children.START_SECONDS)
                except TimeoutError:
                    raise SandboxUnavailable("no evaluator process became ready") from None
            else:
                child = self._idle.get_nowait()
            if child.proc.returncode is None:
                return child
            self._replace(child)  # died while idle (killed from outside): not this work's

    def _fill(self) -> None:
        for _ in range(self.processes - len(self._children) - self._starting):
            self._spawn(None)

    def _spawn(self, old: Child | None) -> asyncio.Task[None]:
        """Start a child in the background (after reaping ``old``); it joins the idle."""
        self._starting += 1
        task = asyncio.create_task(self._bring_up(old), name="relay-sandbox-start")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _bring_up(self, old: Child | None) -> None:
        try:
            if old is not None:
                await children.end(old.proc)
                old.forget()
            while not self._closed:
                try:
                    child = await self._start()
                except SandboxUnavailable:
                    await asyncio.sleep(RESTART_DELAY)
                    continue
                self._idle.put_nowait(child)
                return
        finally:
            self._starting -= 1

    async def _start(self) -> Child:
        child = await children.start()
        self.started += 1
        self._children.add(child)
        return child

    def _replace(self, child: Child) -> asyncio.Task[None] | None:
        """Kill ``child`` (it may be running someone's logic) and start another: the
        task that starts it."""
        self.stopped += 1
        self._children.discard(child)
        with contextlib.suppress(ProcessLookupError):
            child.proc.kill()
        if self._closed:
            return None
        return self._spawn(child)

    def _owe(self, app: str, restart: asyncio.Task[None] | None) -> None:
        """``app`` waits for ``restart`` before its next request."""
        if restart is None:
            return
        self._owed[app] = restart

        def paid(task: asyncio.Task[None]) -> None:
            if self._owed.get(app) is task:
                del self._owed[app]

        restart.add_done_callback(paid)

    async def _ask(self, child: Child, work: Work) -> tuple[Verdict, bool]:
        """Send ``work`` to ``child`` and read its verdicts; whether ``child`` is still
        fit for another request. Filters that went over a budget before are sent last,
        so the others of the publish are judged before the budget can run out."""
        order = list(range(len(work.filters)))
        if self._costly:
            order.sort(key=lambda i: work.filters[i] in self._costly)
        texts = [work.filters[i] for i in order]
        reset = len(child.known) + 1 + len(texts) > MAX_KNOWN
        if reset:
            child.known.clear()
        schema_id, schema = None, b""
        if work.schema is not None:
            schema_id, new = child.id_of(work.schema)
            schema = work.schema if new else b""
        items: list[int | tuple[int, str]] = []
        for text in texts:
            i, new = child.id_of(text)
            items.append((i, text) if new else i)
        frame = wire.request(
            reset, work.event_type, work.app, schema_id, schema, items, work.payload_json
        )
        stdin = child.proc.stdin
        assert stdin is not None
        verdict = Verdict()
        on_schema = schema_id is not None
        loop = asyncio.get_running_loop()
        os.lseek(child.verdicts, 0, os.SEEK_SET)
        try:
            async with asyncio.timeout(
                self.schema_seconds if on_schema else self.filter_seconds
            ) as budget:
                stdin.write(frame)
                await stdin.drain()
                if on_schema:
                    verdict.schema = _failure(await child.answers.next())
                    if verdict.schema is not None:
                        return verdict, not await child.answers.next()
                    on_schema = False
                    budget.reschedule(loop.time() + self.filter_seconds)
                retire = await child.answers.next()
                sent = child.written() if texts else []
                if len(sent) != len(texts):
                    raise wire.ProtocolError(f"{len(sent)} verdicts for {len(texts)} filters")
                if retire:  # past its memory: the filters that did it go last next time
                    self._mark([t for t, v in zip(texts, sent, strict=True) if v == FILTER_MEMORY])
                verdict.filters = _in_order(sent, order)
                return verdict, not retire
        except TimeoutError:
            memory = False
            with contextlib.suppress(ProcessLookupError):
                child.proc.kill()
        except (EOFError, ConnectionError, wire.ProtocolError) as exc:
            memory = True
            log.warning("sandbox.child_died", app=work.app, error=str(exc))
        await children.end(child.proc, within=1.0)  # ended: what it wrote is all it wrote
        if on_schema:
            if verdict.schema is None:  # else it was decided, and only its end was late
                verdict.schema = SchemaFailure("memory" if memory else "time")
            return verdict, False
        sent = child.written()[: len(texts)]
        if len(sent) < len(texts):  # the filter in progress, and those not reached
            self._mark([texts[len(sent)]])
            sent.append(FILTER_MEMORY if memory else FILTER_TIME)
            rest = FILTER_LOST if memory else FILTER_UNREACHED
            sent += [rest] * (len(texts) - len(sent))
        verdict.filters = _in_order(sent, order)
        return verdict, False

    def _mark(self, texts: list[str]) -> None:
        if len(self._costly) + len(texts) > MAX_KNOWN:
            self._costly.clear()
        self._costly.update(dict.fromkeys(texts))

    async def close(self) -> None:
        """End every child (stdin closed, then SIGKILL after a second) and the restarts."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(self._stop(c) for c in list(self._children)))

    async def _stop(self, child: Child) -> None:
        self._children.discard(child)
        if child.proc.stdin is not None:
            child.proc.stdin.close()
        await children.end(child.proc, within=1.0)
        child.forget()


def _failure(answer: Any) -> SchemaFailure | None:
    if answer is None:
        return None
    kind, *rest = answer
    return SchemaFailure(kind, *rest)


def _in_order(sent: list[Any], order: list[int]) -> list[Any]:
    """Verdicts in the work's order, from those in the order they were sent."""
    if all(i == k for k, i in enumerate(order)):
        return sent
    verdicts: list[Any] = [None] * len(order)
    for k, i in enumerate(order):
        verdicts[i] = sent[k]
    return verdicts
