"""The delivery worker: claim due deliveries in batches, send them, record outcomes.

One asyncio loop per process. It claims from each shard in turn up to the number of
free send slots, runs up to ``worker_concurrency`` sends at once through one pooled
client session, extends the leases of sends in flight with one batched heartbeat,
and records outcomes through a group-commit recorder (one script call per batch of
finished sends). When nothing is due it sleeps until the earliest due time or lease
expiry it was told about, or until a publish wakes it over pub/sub, whichever comes
first; there is no fixed polling tick.

Shutdown (``stop`` event, e.g. SIGTERM): stop claiming, let sends in flight finish
within ``shutdown_grace``, then cancel the rest and hand their claims back without
charging an attempt. A send hands its outcome to the group commit and ends: the write
runs in the recorder's task, which no cancellation of a send reaches.

Its parts: claims (claim from a shard, when to look again), admission (which claimed
sends go now), attempt (one send and its outcome), inflight (slots, slow sends), leases
(heartbeat, hand-back); endpoint state changes go through ``Lifecycle``. The retention
sweeper and the metrics exporter run beside it (:func:`relay.runner.run_worker`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog

from relay import tracing
from relay.delivery import sender
from relay.delivery.admission import Admission
from relay.delivery.attempt import Attempter, BeforeSend, ids_of
from relay.delivery.claims import Claims
from relay.delivery.groupcommit import Done, GroupCommit
from relay.delivery.inflight import SLOW_HEADROOM, Flight, InFlight, watch_slow
from relay.delivery.leases import Leases
from relay.delivery.stats import Stats
from relay.domain import endpointstats
from relay.endpoints.cache import EndpointCache
from relay.endpoints.health import Health, Settled, Windows
from relay.endpoints.lifecycle import Lifecycle, should_disable
from relay.queue.keys import ShardKeys
from relay.queue.store import Claimed, Outcome, Store
from relay.queue.subscription import keep_subscribed
from relay.settings import Settings

log = structlog.get_logger("relay.worker")

IDLE_CAP = 2.0  # longest idle sleep: a safety net for a missed pub/sub message
LINGER = 0.005  # seconds an outcome or a verdict may wait for others to share its write


class Worker:
    """A delivery worker. ``await worker.run(stop)`` until ``stop`` is set."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        *,
        session: aiohttp.ClientSession | None = None,  # None: made (and closed) here
        before_send: BeforeSend | None = None,  # called before each request, awaited if async
    ) -> None:
        self.store = store
        self.settings = settings
        self.stats = Stats()
        self.health = Health(store)
        self.lifecycle = Lifecycle(store, self.health)
        self._session = session
        self._own_session = session is None
        self._inflight = InFlight(settings.worker_concurrency, settings.http_timeout)
        self._wake = asyncio.Event()
        # An outcome is retried while Redis is unavailable, until its lease is nearly
        # over (never dropped early: a dropped outcome is a duplicate send).
        self._margin = min(2.0, settings.lease_seconds / 10)
        budget = settings.lease_seconds - self._margin
        # outcomes and verdicts wait (up to LINGER) for the rest of their wave's answers
        answering = self._inflight.answering
        self._recorder = GroupCommit(
            self._record, "relay-recorder", budget=budget, linger=LINGER, more=answering
        )
        self._settler = GroupCommit(
            self._settle_batch, "relay-settler", budget=budget, linger=LINGER, more=answering
        )
        self._windows = Windows(
            settings.worker_concurrency, settings.http_timeout, settings.slow_send_after
        )
        # endpoints by id, kept while subscribed to their change channel (a claimed batch
        # reads none of them from Redis unless one changed)
        self.endpoints = EndpointCache(store)
        self._claims = Claims(store, settings, self.stats, self.endpoints.by_ids)
        self._attempter = Attempter(settings, self.stats, before_send)
        self._admission = Admission(
            health=self.health,
            lifecycle=self.lifecycle,
            windows=self._windows,
            inflight=self._inflight,
            avg_ms=self._attempter.avg_ms,
            recorder=self._recorder,
            stats=self.stats,
            spawn=self._spawn,
        )
        self._leases = Leases(store, settings, self._inflight, self.stats)
        self._disabling: set[str] = set()
        # told the endpoint id when a settle appended an operational event to its
        # outbox (relay.connectors.opsevents.OpsRelay.poke, set by the runner)
        self.on_ops: Callable[[str], None] | None = None
        # With a backlog, claim once three quarters of the slots are free: a batch's sends
        # then go out, and come back, together, so the loop handles their answers in
        # waves, and each claim takes a batch worth its round trip.
        self._low_water = max(1, min(settings.claim_batch, settings.worker_concurrency) * 3 // 4)

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event, *, burst: bool = False) -> None:
        """Deliver until ``stop`` is set (or, with ``burst``, until nothing is due)."""
        if self._session is None:
            # no timer per request in aiohttp: each send's Deadline, enforced by
            # watch_slow, limits it to http_timeout (relay.delivery.sender)
            self._session = sender.make_session(
                timeout=None,
                limit=self.settings.worker_concurrency * SLOW_HEADROOM,
                allow_private=self.settings.allow_private_networks,
            )
        self._attempter.session = self._session
        self._recorder.start()
        self._settler.start()
        heartbeat = asyncio.create_task(self._leases.heartbeat(), name="relay-heartbeat")
        listener = asyncio.create_task(self._listen(), name="relay-wake")
        slow = asyncio.create_task(watch_slow(self._inflight), name="relay-slow")
        cache = asyncio.create_task(self.endpoints.run(), name="relay-endpoint-cache")
        idle = asyncio.create_task(self._attempter.destinations.run(), name="relay-dest-idle")
        shards = self._claims.shards
        loop = type(asyncio.get_running_loop()).__module__.partition(".")[0]  # uvloop, asyncio
        log.info("worker.started", worker=self.settings.worker_id, shards=len(shards), loop=loop)
        try:
            await self._loop(stop, burst)
        finally:
            await self._leases.hand_back(self._recorder, self._settler)
            await self._recorder.stop()
            await self._settler.stop()
            await stop_tasks(heartbeat, listener, slow, cache, idle)
            await self._attempter.destinations.close()
            if self._own_session and self._session is not None:
                await self._session.close()
            log.info("worker.stopped", worker=self.settings.worker_id)

    async def _loop(self, stop: asyncio.Event, burst: bool) -> None:
        claims, inflight, shards = self._claims, self._inflight, self._claims.shards
        rotation = 0
        while not stop.is_set():
            free = inflight.free()
            # With a backlog, wait for the low water mark rather than claim one by one.
            if free <= 0 or (free < self._low_water and claims.backlog):
                inflight.slot_free.clear()
                await _wait_any(stop, inflight.slot_free)
                continue
            self._wake.clear()
            got = 0
            order = shards[rotation:] + shards[:rotation]
            rotation = (rotation + 1) % len(shards)
            for sk in order:
                free = inflight.free()
                if free <= 0 or stop.is_set():
                    break
                batch = await claims.claim(sk, free)
                if batch is not None:
                    await self._admission.admit_batch(sk, *batch)
                    got += len(batch[0])
            if got:
                continue
            claims.backlog = False
            if burst and not inflight and claims.nothing_due_soon():
                return
            await _wait_any(stop, self._wake, within=self._idle_timeout(burst))

    def _idle_timeout(self, burst: bool) -> float:
        wake_at = self._claims.wake_at()
        if not wake_at:
            return 0.05 if burst else IDLE_CAP
        return max(0.001, min(IDLE_CAP, (min(wake_at) - time.time() * 1000) / 1000 + 0.002))

    async def _listen(self) -> None:
        """Wake the claim loop when a publish (or retry) makes work due sooner."""
        await keep_subscribed(
            self.store,
            [sk.wake for sk in self._claims.shards],
            lambda _msg: self._wake.set(),
            on_lost=self._wake.set,  # we may have missed a message
            name="wake",
        )

    # ------------------------------------------------------------------ one delivery

    def _spawn(self, sk: ShardKeys, c: Claimed, endpoint: dict[str, Any] | None) -> None:
        now = time.monotonic()
        slow_after = self._windows.slow_after(self._attempter.avg_ms.get(c.endpoint_id))
        f = self._inflight.add(sk, c, endpoint, slow_at=now + slow_after)
        f.lease_until = self._claims.claim_started + self.settings.lease_seconds
        f.task = asyncio.create_task(self._deliver(f, endpoint))

    async def _deliver(self, f: Flight, endpoint: dict[str, Any] | None) -> None:
        """Send, then hand the outcome (and the breaker verdict) to the group commits and
        end: the send slot is free once the answer is in (``InFlight.answered``); the
        flight stays tracked until both writes have ended (:meth:`_recorded`,
        :meth:`_settled`), and no cancellation of this task reaches a write it handed
        over. Its log lines name the delivery, its event, endpoint and attempt."""
        c = f.claim
        try:
            sent_ms = int(time.time() * 1000)
            outcome, verdict = await self._attempter.attempt(c, endpoint, f.deadline)
            if verdict == "0":  # settle.lua: a failure sent before a success is not counted
                verdict = f"0@{sent_ms}"
            self._inflight.answered(f)
            deadline = lambda: f.lease_until - self._margin  # noqa: E731
            if endpoint is not None and verdict is not None:
                f.settling = True
                settled: Done = lambda result, exc: self._settled(f, result, exc)  # noqa: E731
                # an endpoint's max_in_flight slots are freed by its settle: not delayed
                capped = bool(endpoint.get("max_in_flight"))
                # what the attempt adds to the endpoint's per-minute counters
                stat = endpointstats.stat_of(
                    outcome.outcome == "succeeded",
                    outcome.status_code,
                    outcome.error,
                    outcome.duration_ms,
                )
                self._settler.submit_then(
                    endpoint["id"], (c.token, verdict, stat), settled, deadline, hurry=capped
                )
            recorded: Done = lambda result, exc: self._recorded(f, result, exc)  # noqa: E731
            self._recorder.submit_then(f.sk, outcome, recorded, deadline)
        except asyncio.CancelledError:
            self._finish(f)
            raise
        except Exception:
            log.exception("delivery.crashed", **ids_of(c))
            self._finish(f)

    def _recorded(self, f: Flight, result: Any, exc: BaseException | None) -> None:
        """The outcome's write has ended: note a fenced or lost one; the flight gives up
        its slot now, or once its verdict's write has ended too."""
        try:
            if exc is not None:
                # Redis stayed unavailable until the lease was nearly over: the
                # delivery will be reclaimed and sent again (at-least-once).
                error = str(exc) or type(exc).__name__
                log.error("delivery.outcome_lost", error=error, **ids_of(f.claim))
            else:
                if result == 0:
                    self.stats.fenced += 1
                    log.warning(
                        "delivery.fenced",
                        detail="claim superseded; outcome logged only",
                        **ids_of(f.claim),
                    )
                if f.settling:
                    f.recorded = True  # _settled finishes it
                    return
                if f.settled is not None:
                    self._after_verdict(f)
        except Exception:
            log.exception("delivery.crashed", **ids_of(f.claim))
        self._finish(f)

    def _settled(self, f: Flight, result: Any, exc: BaseException | None) -> None:
        """The verdict's write has ended (before or after the outcome's)."""
        f.settling = False
        f.settled = (result, exc)
        if exc is not None:
            log.warning("write.failed", error=str(exc) or type(exc).__name__, **ids_of(f.claim))
        if not f.recorded:
            return  # _recorded goes on (or has given up on this send: outcome lost)
        try:
            self._after_verdict(f)
        except Exception:
            log.exception("delivery.crashed", **ids_of(f.claim))
        finally:
            self._finish(f)

    def _after_verdict(self, f: Flight) -> None:
        assert f.settled is not None
        result, exc = f.settled
        if exc is not None:
            log.error("delivery.crashed", exc_info=exc, **ids_of(f.claim))
        elif f.endpoint is not None:
            self._after_settle(f.endpoint, result)

    def _finish(self, f: Flight) -> None:
        self._inflight.done(f)
        self._attempter.spans.pop(f.claim.token, None)

    async def _record(self, sk: ShardKeys, outcomes: list[Outcome]) -> list[int]:
        """One group-committed ``record`` write; with tracing on, in a span linked to the
        attempt spans of its outcomes."""
        if tracing.on:
            spans = self._attempter.spans
            linked = [spans[o.token] for o in outcomes if o.token in spans]
            with tracing.record_span(linked, len(outcomes)):
                return await self.store.record(sk, outcomes)
        return await self.store.record(sk, outcomes)

    async def _settle_batch(self, endpoint_id: str, results: list[Any]) -> list[Settled]:
        settled = await self.health.settle(endpoint_id, results)
        return [settled] * len(results)

    def _after_settle(self, endpoint: dict[str, Any], s: Settled) -> None:
        """Widen the endpoint's window on success; disable it after disable_after failing."""
        e = endpoint["id"]
        if s.ops and self.on_ops is not None:
            self.on_ops(e)
        if s.failures == 0:  # it answers: its window here grows
            self._windows.succeeded(e)
        if not s.failing_since or e in self._disabling:
            return
        if should_disable(s, self.settings.disable_after, time.time() * 1000):
            self._disabling.add(e)
            task = asyncio.create_task(self.lifecycle.disable(e, s.failing_since))
            task.add_done_callback(lambda _: self._disabling.discard(e))


async def _wait_any(stop: asyncio.Event, other: asyncio.Event, within: float | None = None) -> None:
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(other.wait())]
    try:
        await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


async def stop_tasks(*tasks: asyncio.Task[Any], within: float = 5.0) -> None:
    """Cancel ``tasks`` and wait for them. redis-py can swallow a cancellation that
    lands mid-command (tests/redis/test_subscription.py), so a task still running is cancelled
    again every half second; after ``within`` seconds it is left behind with a warning
    rather than holding the shutdown for ever."""
    deadline = time.monotonic() + within
    pending = {t for t in tasks if not t.done()}
    while pending:
        for t in pending:
            t.cancel()
        left = deadline - time.monotonic()
        if left <= 0:
            log.warning("shutdown.tasks_left", tasks=sorted(t.get_name() for t in pending))
            break
        _, pending = await asyncio.wait(pending, timeout=min(0.5, left))
    await asyncio.gather(*(t for t in tasks if t.done()), return_exceptions=True)
