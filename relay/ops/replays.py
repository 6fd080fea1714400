"""Reconciliation replay jobs: replay every delivery of a time range, paced, resumable.

A job (``POST /v1/replays``, ``relay replay --since``) is a record in Redis
(:mod:`relay.queue.replays`); the workers advance it (:class:`ReplayRunner`, started
beside each worker by ``relay/runner.py``), one worker at a time under a lease: a worker
that dies leaves the lease to run out (``RELAY_REPLAY_LEASE``) and another takes the job
over from the state it last saved.

One step of a job:

1. **outstanding**: the deliveries it replayed that are not finished yet (pending,
   delivering, held) are read again; finished ones free their place;
2. **walk**: while fewer than :data:`WAITING_MAX` are waiting, the next page of the
   range (shard by shard, in creation order, from the saved cursor) is read, and the
   deliveries that match (status, type, endpoint) join the waiting list;
3. **release**: a waiting delivery is replayed only while its endpoint has fewer than
   ``RELAY_REPLAY_OUTSTANDING`` of the job's deliveries outstanding and its breaker is
   not open; the others wait, and the ones behind them of other endpoints go on (an
   endpoint that is failing or slow holds back only its own deliveries);
4. **save**: cursor, waiting, outstanding and counts, in one write fenced on the lease
   (a job cancelled meanwhile, or taken over, refuses it and this worker stops).

Each delivery goes back through ``Store.replay`` (``replay.lua``), which replays only a
dead or succeeded delivery: one that is pending or in flight (replayed by another job,
an operator, or by this job before a takeover) is refused and counted as skipped, so no
delivery is ever put in flight twice at once. The worker's admission (rate limit,
``max_in_flight``, breaker) still paces every send; the outstanding cap keeps a job from
filling the due queue with thousands of one endpoint's deliveries at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections import Counter
from typing import Any

import orjson
import structlog

from relay.archive.history import History
from relay.archive.tables import Filters
from relay.domain import ids
from relay.domain.replayspec import ReplayIn, job_view, wanted
from relay.queue.errors import is_transient
from relay.queue.store import Store

log = structlog.get_logger("relay.replays")

PAGE = 500  # entries read by one walk step, deliveries replayed by one call
WAITING_MAX = 2000  # matched deliveries a job holds before it walks further
OUTSTANDING_MAX = 5000  # a job's unfinished replayed deliveries, all endpoints together
UNFINISHED = frozenset({"pending", "delivering", "held"})
POLL = 1.0  # how often a worker looks for running jobs it could lease


class ReplayNotRunning(Exception):
    def __init__(self, state: str) -> None:
        super().__init__(f"the replay is {state or 'unknown'}, not running")
        self.state = state


class Replays:
    """Start, count, read, list and cancel jobs (the API and the CLI call these)."""

    def __init__(self, store: Store, history: History | None = None) -> None:
        self.store = store
        self.history = history

    async def count(self, spec: ReplayIn) -> int:
        """A dry run: how many deliveries a job would replay now (nothing is written)."""
        params = spec.params()
        matched = 0
        for sk in self.store.keys.all_shards():
            cursor: tuple[int, str] | None = None
            while True:
                rows, done = await self.store.replay_scan(
                    sk,
                    endpoint_id=params["endpoint_id"],
                    since=params["since"],
                    until=params["until"],
                    cursor=cursor,
                    limit=PAGE,
                )
                matched += sum(1 for r in rows if wanted(params, r.status, r.type))
                if done or not rows:
                    break
                cursor = (rows[-1].created, rows[-1].id)
        at: tuple[int, str] | None = None
        while self.history is not None and self.history.tables is not None:
            page = await self.history.tables.scan(archived(params), after=at, limit=PAGE)
            matched += sum(1 for r in await cold(self.store, page) if wanted(params, r[2], r[3]))
            if len(page) < PAGE:
                break
            at = (page[-1][1], page[-1][0])
        return matched

    async def start(self, spec: ReplayIn) -> dict[str, Any]:
        replay_id = ids.new_id("rpl")
        fields = {"params": orjson.dumps(spec.params()).decode(), "cursor": "{}"}
        await self.store.replay_job("create", replay_id, fields=fields)
        return await self.get(replay_id) or {}

    async def get(self, replay_id: str) -> dict[str, Any] | None:
        raw = await self.store.get_replay_job(replay_id)
        return job_view(raw) if raw else None

    async def list(self, limit: int = 50) -> list[dict[str, Any]]:
        return [job_view(r) for r in await self.store.list_replay_jobs(limit)]

    async def cancel(self, replay_id: str) -> dict[str, Any]:
        """Cancel a running job; :class:`ReplayNotRunning` for any other (or none)."""
        done = await self.store.replay_job("cancel", replay_id)
        if not done.ok:
            raise ReplayNotRunning(done.state)
        return await self.get(replay_id) or {}


def archived(params: dict[str, Any]) -> Filters:
    """What a job's range selects in the archive (its ``until`` is inclusive)."""
    return Filters(
        endpoint_id=params["endpoint_id"], since=params["since"], until=params["until"] + 1
    )


async def cold(store: Store, page: list[tuple[str, int, str, str, str]]) -> list[Any]:
    """The archived rows of ``page`` that Redis does not hold: one Redis holds is live
    again (replayed) or not yet removed, and Redis's walk met it."""
    held = await store.delivery_statuses([r[0] for r in page])
    return [r for r in page if not held[r[0]]]


class Job:
    """A job's state while one worker advances it, loaded from and saved to its record."""

    def __init__(self, raw: dict[str, str]) -> None:
        self.id = raw["id"]
        self.params = orjson.loads(raw["params"])
        cursor = orjson.loads(raw.get("cursor") or "{}")
        self.shard = int(cursor.get("shard", 0))
        at = cursor.get("at")
        self.at: tuple[int, str] | None = (int(at[0]), str(at[1])) if at else None
        self.scan_done = raw.get("scan_done") == "1"
        self.waiting: list[list[str]] = orjson.loads(raw.get("buffer") or "[]")
        self.outstanding: list[list[str]] = orjson.loads(raw.get("outstanding") or "[]")
        self.matched = int(raw.get("matched") or 0)
        self.replayed = int(raw.get("replayed") or 0)
        self.skipped = int(raw.get("skipped") or 0)

    def fields(self, state: str) -> dict[str, str | int]:
        cursor = {"shard": self.shard, "at": list(self.at) if self.at else None}
        return {
            "state": state,
            "cursor": orjson.dumps(cursor).decode(),
            "scan_done": int(self.scan_done),
            "buffer": orjson.dumps(self.waiting).decode(),
            "outstanding": orjson.dumps(self.outstanding).decode(),
            "matched": self.matched,
            "replayed": self.replayed,
            "skipped": self.skipped,
        }


class ReplayRunner:
    """Advances the replay jobs this worker holds the lease of (one task per job)."""

    def __init__(
        self,
        store: Store,
        *,
        poll: float = POLL,
        owner: str | None = None,
        history: History | None = None,
    ) -> None:
        self.store = store
        self.history = history  # with the archive on: its deliveries are walked last
        self.tables = history.tables if history is not None else None
        self.settings = store.settings
        self.poll = poll
        self.owner = owner or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.lease_ms = int(self.settings.replay_lease * 1000)
        self.cap = self.settings.replay_outstanding
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``: lease running jobs nobody advances, and advance them."""
        try:
            while not stop.is_set():
                try:
                    await self._lease_jobs(stop)
                except Exception as exc:  # Redis trouble: try again on the next poll
                    log.warning("replay.poll_failed", error=str(exc)[:200])
                try:
                    await asyncio.wait_for(stop.wait(), self.poll)
                except TimeoutError:
                    pass
        finally:
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _lease_jobs(self, stop: asyncio.Event) -> None:
        for replay_id, task in list(self._tasks.items()):
            if task.done():
                del self._tasks[replay_id]
        for replay_id in await self.store.running_replay_jobs():
            if replay_id in self._tasks:
                continue
            got = await self.store.replay_job(
                "lease", replay_id, owner=self.owner, lease_ms=self.lease_ms
            )
            if got.ok:
                task = asyncio.create_task(self._advance(replay_id, stop), name=replay_id)
                self._tasks[replay_id] = task

    async def _advance(self, replay_id: str, stop: asyncio.Event) -> None:
        raw = await self.store.get_replay_job(replay_id)
        if raw is None:
            return
        job = Job(raw)
        log.info("replay.advancing", replay_id=replay_id, owner=self.owner)
        saved_at = time.monotonic()
        try:
            while not stop.is_set():
                moved = await self.step(job)
                final = job.scan_done and not job.waiting
                if moved or final or time.monotonic() - saved_at > self.lease_ms / 3000:
                    ok = await self.store.replay_job(
                        "save",
                        replay_id,
                        owner=self.owner,
                        lease_ms=self.lease_ms,
                        fields=job.fields("done" if final else "running"),
                    )
                    saved_at = time.monotonic()
                    if not ok.ok:  # cancelled, or the lease went to another worker
                        log.info("replay.stopped", replay_id=replay_id, state=ok.state)
                        return
                if final:
                    log.info("replay.done", replay_id=replay_id, replayed=job.replayed)
                    return
                if not moved:
                    await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            await self._hand_over(replay_id, job)
            raise
        except Exception as exc:
            log.warning("replay.step_failed", replay_id=replay_id, error=str(exc)[:200])
            if is_transient(exc):  # Redis trouble: the lease runs out, a worker tries again
                return
            fields = {**job.fields("failed"), "error": f"{type(exc).__name__}: {exc}"[:300]}
            await self.store.replay_job(
                "save", replay_id, owner=self.owner, lease_ms=self.lease_ms, fields=fields
            )
            return
        # stopped: seen by the loop before the cancel of run() reached this task
        await self._hand_over(replay_id, job)

    async def _hand_over(self, replay_id: str, job: Job) -> None:
        """This worker stops: save what it did and let the lease go at once, so another
        worker goes on without waiting for it to run out. (Killed, it just runs out.)"""
        with contextlib.suppress(Exception):
            await asyncio.shield(
                self.store.replay_job(
                    "save", replay_id, owner=self.owner, lease_ms=0, fields=job.fields("running")
                )
            )

    async def step(self, job: Job) -> bool:
        """One step (see the module docstring); True when anything moved."""
        moved = False
        if job.outstanding:
            statuses = await self.store.delivery_statuses([d for d, _ in job.outstanding])
            still = [o for o in job.outstanding if statuses[o[0]] in UNFINISHED]
            moved = len(still) != len(job.outstanding)
            job.outstanding = still
        if not job.scan_done and len(job.waiting) < WAITING_MAX:
            await self._walk(job)
            moved = True
        return await self._release(job) or moved

    async def _walk(self, job: Job) -> None:
        params = job.params
        if job.shard >= self.settings.shards:  # every shard walked: now the archive's
            await self._walk_archive(job)
            return
        rows, done = await self.store.replay_scan(
            self.store.keys.shard(job.shard),
            endpoint_id=params["endpoint_id"],
            since=params["since"],
            until=params["until"],
            cursor=job.at,
            limit=PAGE,
        )
        for r in rows:
            if wanted(params, r.status, r.type):
                job.waiting.append([r.id, r.endpoint_id])
                job.matched += 1
        if rows:
            job.at = (rows[-1].created, rows[-1].id)
        if done or not rows:
            job.shard += 1
            job.at = None
            job.scan_done = job.shard >= self.settings.shards and self.tables is None

    async def _walk_archive(self, job: Job) -> None:
        """The archived deliveries of the range, oldest first, after Redis's shards."""
        assert self.tables is not None
        page = await self.tables.scan(archived(job.params), after=job.at, limit=PAGE)
        for r in await cold(self.store, page):
            if wanted(job.params, r[2], r[3]):
                job.waiting.append([r[0], r[4]])
                job.matched += 1
        if page:
            job.at = (page[-1][1], page[-1][0])
        job.scan_done = len(page) < PAGE

    async def _release(self, job: Job) -> bool:
        if not job.waiting or len(job.outstanding) >= OUTSTANDING_MAX:
            return False
        per_endpoint = Counter(e for _, e in job.outstanding)
        now_ms = int(time.time() * 1000)
        breakers = await self.store.breaker_states(sorted({e for _, e in job.waiting}))
        blocked = {
            e
            for e, b in breakers.items()
            if b.get("state") == "open" and int(b.get("open_until") or 0) > now_ms
        }
        room = min(PAGE, OUTSTANDING_MAX - len(job.outstanding))
        chosen: list[list[str]] = []
        rest: list[list[str]] = []
        for item in job.waiting:
            endpoint = item[1]
            if len(chosen) < room and endpoint not in blocked and per_endpoint[endpoint] < self.cap:
                chosen.append(item)
                per_endpoint[endpoint] += 1
            else:
                rest.append(item)
        if not chosen:
            return False
        replayer = self.history or self.store  # History restores archived ones first
        result = await replayer.replay([d for d, _ in chosen])
        for item in chosen:
            if result.get(item[0]) == "ok":
                job.replayed += 1
                job.outstanding.append(item)
            else:  # pending or in flight already (another job, an operator), or gone
                job.skipped += 1
        job.waiting = rest
        return True
