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
charging an attempt. Outcome writes run under ``asyncio.shield``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import structlog

from relay.delivery import sender
from relay.delivery.groupcommit import GroupCommit, log_failure
from relay.domain import retry
from relay.endpoints.health import Health, Settled, Windows
from relay.ops import metrics
from relay.ops.retention import Retention
from relay.queue.keys import ShardKeys
from relay.queue.store import Claimed, Outcome, Store
from relay.settings import Settings

log = structlog.get_logger("relay.worker")

IDLE_CAP = 2.0  # longest idle sleep: a safety net for a missed pub/sub message
# A send in flight longer than slow_send_after stops counting against the concurrency,
# so an endpoint that hangs until the timeout cannot occupy every slot (no head-of-line
# blocking); at most SLOW_HEADROOM x concurrency requests are open in all.
SLOW_HEADROOM = 4


@dataclass
class Stats:
    """Counters for this process (exported as metrics, read by tests)."""

    claimed: int = 0
    sent: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    fenced: int = 0
    reclaimed: int = 0
    released: int = 0
    deferred: int = 0
    held: int = 0
    lease_extensions: int = 0
    claim_batches: int = 0  # claims that took work (their sizes: relay_claim_batch_size)


@dataclass
class _InFlight:
    sk: ShardKeys
    claim: Claimed
    endpoint: dict[str, Any] | None = None
    task: asyncio.Task[None] | None = None
    recording: bool = False
    slow: bool = False


class Worker:
    """A delivery worker. ``await worker.run(stop)`` until ``stop`` is set."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        *,
        session: aiohttp.ClientSession | None = None,
        before_send: Callable[[Claimed], Awaitable[None] | None] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.stats = Stats()
        self._session = session
        self._own_session = session is None
        self._before_send = before_send
        self._inflight: dict[str, _InFlight] = {}
        self._slot_free = asyncio.Event()
        self._wake = asyncio.Event()
        self._recorder = GroupCommit(store.record, "relay-recorder")
        self.health = Health(store)
        self._settler = GroupCommit(self._settle_batch, "relay-settler")
        self._slow = 0  # sends in flight for longer than slow_send_after
        self._avg_ms: dict[str, float] = {}  # send duration per endpoint (deferral spread)
        self._disabling: set[str] = set()
        self._windows = Windows(
            settings.worker_concurrency, settings.http_timeout, settings.slow_send_after
        )
        self._tokens = itertools.count()
        self._token_base = f"{settings.worker_id}:{os.urandom(3).hex()}"
        self._shards = store.keys.all_shards()
        self._next_due: dict[int, int | None] = {}
        self._next_lease: dict[int, int | None] = {}
        self._lease_ms = int(settings.lease_seconds * 1000)
        self._low_water = max(1, min(settings.claim_batch, settings.worker_concurrency) // 4)
        self._backlog = False

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event, *, burst: bool = False) -> None:
        """Deliver until ``stop`` is set (or, with ``burst``, until nothing is due)."""
        exporter = None  # each replica serves its own /metrics when RELAY_METRICS_PORT is set
        if self.settings.metrics_port:
            exporter = await metrics.serve(
                self.store, self.settings.host, self.settings.metrics_port
            )
        if self._session is None:
            self._session = sender.make_session(
                timeout=self.settings.http_timeout,
                limit=self.settings.worker_concurrency * SLOW_HEADROOM,
                allow_private=self.settings.allow_private_networks,
            )
        self._recorder.start()
        self._settler.start()
        heartbeat = asyncio.create_task(self._heartbeat(), name="relay-heartbeat")
        listener = asyncio.create_task(self._listen(), name="relay-wake")
        sweeper = asyncio.create_task(Retention(self.store).run(), name="relay-sweeper")
        log.info("worker.started", worker=self.settings.worker_id, shards=len(self._shards))
        try:
            await self._loop(stop, burst)
        finally:
            await self._shutdown()
            heartbeat.cancel()
            listener.cancel()
            sweeper.cancel()
            await asyncio.gather(heartbeat, listener, sweeper, return_exceptions=True)
            if exporter is not None:
                await exporter.cleanup()
            if self._own_session and self._session is not None:
                await self._session.close()
            log.info("worker.stopped", worker=self.settings.worker_id)

    async def _loop(self, stop: asyncio.Event, burst: bool) -> None:
        rotation = 0
        while not stop.is_set():
            free = self._free()
            # With a backlog, wait for a quarter of the slots rather than claim one by one.
            if free <= 0 or (free < self._low_water and self._backlog):
                self._slot_free.clear()
                await _wait_any(stop, self._slot_free)
                continue
            self._wake.clear()
            got = 0
            order = self._shards[rotation:] + self._shards[:rotation]
            rotation = (rotation + 1) % len(self._shards)
            for sk in order:
                free = self._free()
                if free <= 0 or stop.is_set():
                    break
                got += await self._claim_from(sk, free)
            if got:
                continue
            self._backlog = False
            if burst and not self._inflight and self._nothing_due_soon():
                return
            await _wait_any(stop, self._wake, within=self._idle_timeout(burst))

    def _free(self) -> int:
        """Send slots free: slow sends do not count, up to the hard cap on open requests."""
        concurrency = self.settings.worker_concurrency
        active = len(self._inflight) - self._slow
        return min(concurrency - active, concurrency * SLOW_HEADROOM - len(self._inflight))

    def _nothing_due_soon(self) -> bool:
        now = time.time() * 1000
        for sk in self._shards:
            due, lease = self._next_due.get(sk.shard), self._next_lease.get(sk.shard)
            if (due is not None and due <= now + 50) or lease is not None:
                return False
        return True

    def _idle_timeout(self, burst: bool) -> float:
        now = time.time() * 1000
        wake_at = [t for t in (*self._next_due.values(), *self._next_lease.values()) if t]
        if not wake_at:
            return 0.05 if burst else IDLE_CAP
        return max(0.001, min(IDLE_CAP, (min(wake_at) - now) / 1000 + 0.002))

    async def _claim_from(self, sk: ShardKeys, free: int) -> int:
        try:
            lease_at = self._next_lease.get(sk.shard)
            if lease_at is not None and lease_at <= time.time() * 1000:
                back, dead, reclaimed = await self.store.reclaim(sk)
                if reclaimed:
                    self.stats.reclaimed += len(reclaimed)
                    metrics.RECLAIMED.inc(len(reclaimed))
                    log.warning(
                        "lease.reclaimed",
                        shard=sk.shard,
                        pending=back,
                        dead=dead,
                        deliveries=reclaimed[:20],
                    )
            res = await self.store.claim(
                sk,
                limit=min(free, self.settings.claim_batch),
                lease_ms=self._lease_ms,
                token_prefix=f"{self._token_base}:{next(self._tokens)}",
                worker=self.settings.worker_id,
            )
        except Exception as exc:  # Redis down or restarting: back off, keep running
            log.warning("claim.failed", shard=sk.shard, error=str(exc))
            # Both wake-up times, or a lease expiry seen before the outage (now in the
            # past) makes the idle wait ~0 and the loop spins against a dead Redis.
            retry_at = int(time.time() * 1000) + 500
            self._next_due[sk.shard] = retry_at
            self._next_lease[sk.shard] = retry_at
            return 0
        self._next_due[sk.shard] = res.next_due_ms
        self._next_lease[sk.shard] = res.next_lease_ms
        self._backlog = res.next_due_ms is not None and res.next_due_ms <= res.now_ms
        if not res.items:
            return 0
        self.stats.claimed += len(res.items)
        self.stats.claim_batches += 1
        metrics.CLAIM_BATCH.observe(len(res.items))
        try:
            endpoints = await self.store.get_endpoints(c.endpoint_id for c in res.items)
        except Exception as exc:  # Redis went away after the claim: the leases bring them back
            log.warning("claim.endpoints_failed", shard=sk.shard, error=str(exc))
            self._next_due[sk.shard] = int(time.time() * 1000) + 500
            return 0
        groups: dict[str, list[Claimed]] = {}
        held: dict[str, list[Claimed]] = {}
        for c in res.items:
            ep = endpoints.get(c.endpoint_id)
            if ep is None:
                self._spawn(sk, c, None)  # deleted endpoint: recorded dead, no request
            elif not ep.get("enabled", True):
                held.setdefault(c.endpoint_id, []).append(c)
            else:
                groups.setdefault(c.endpoint_id, []).append(c)
        await asyncio.gather(
            *(self._hold(sk, e, cs) for e, cs in held.items()),
            *(self._admit(sk, endpoints[e], cs) for e, cs in groups.items()),
        )
        return len(res.items)

    def _spawn(self, sk: ShardKeys, c: Claimed, endpoint: dict[str, Any] | None) -> None:
        f = _InFlight(sk, c, endpoint)
        self._inflight[c.token] = f
        f.task = asyncio.create_task(self._deliver(f, endpoint))

    async def _admit(self, sk: ShardKeys, endpoint: dict[str, Any], cs: list[Claimed]) -> None:
        """Ask the endpoint's shared breaker/limits which sends may go; defer the rest."""
        e = endpoint["id"]
        spread = int(self._avg_ms.get(e, 100.0))
        # No head-of-line blocking: past its window here, an endpoint's sends are deferred
        open_now = sum(1 for f in self._inflight.values() if f.claim.endpoint_id == e)
        room = self._windows.room(e, open_now)
        cs, over = cs[:room], cs[room:]
        now = time.time() * 1000
        waits = [self._windows.wait_ms(e, self._avg_ms.get(e), now) for _ in over]
        if cs:
            try:
                _, shared = await self.health.admit(endpoint, [c.token for c in cs], spread)
            except Exception as exc:  # Redis trouble: fail open rather than strand the claims
                log.warning("admit.failed", endpoint_id=e, error=str(exc))
                shared = [0] * len(cs)
            waits = shared + waits
        for c, wait in zip(cs + over, waits, strict=True):
            if wait == 0:
                self._spawn(sk, c, endpoint)
            else:  # not sent, so not charged: back to due after the wait
                self.stats.deferred += 1
                fut = self._recorder.submit(
                    sk, Outcome(c.id, c.token, "defer", wait, None, "", b"{}")
                )
                fut.add_done_callback(log_failure)

    async def _hold(self, sk: ShardKeys, endpoint_id: str, cs: list[Claimed]) -> None:
        """Park deliveries of a disabled endpoint until it is enabled again."""
        try:
            n = await self.health.hold(sk, endpoint_id, [(c.id, c.token) for c in cs])
            self.stats.held += n
            # Re-enabled (or deleted) since we read it? Its resume may have run before our
            # hold: resume again, or these stay parked (the API writes before it resumes).
            current = await self.store.get_endpoint(endpoint_id)
            if n and (current is None or current.get("enabled", True)):
                await self.health.resume(endpoint_id)
        except Exception as exc:  # the leases run out and they come back
            log.warning("hold.failed", endpoint_id=endpoint_id, error=str(exc))

    # ------------------------------------------------------------------ one delivery

    async def _deliver(self, f: _InFlight, endpoint: dict[str, Any] | None) -> None:
        c = f.claim
        structlog.contextvars.bind_contextvars(
            delivery_id=c.id, event_id=c.event_id, endpoint_id=c.endpoint_id, attempt=c.attempts
        )
        slow_timer = asyncio.get_running_loop().call_later(
            self._windows.slow_after(self._avg_ms.get(c.endpoint_id)), self._mark_slow, f
        )
        try:
            outcome, verdict = await self._attempt(c, endpoint)
            f.recording = True
            record = self._recorder.submit(f.sk, outcome)
            settle = None
            if endpoint is not None and verdict is not None:
                settle = self._settler.submit(endpoint["id"], (c.token, verdict))
            result = await asyncio.shield(record)
            if result == 0:
                self.stats.fenced += 1
                log.warning("delivery.fenced", detail="claim superseded; outcome logged only")
            if settle is not None and endpoint is not None:
                self._after_settle(endpoint, await asyncio.shield(settle))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivery.crashed")
        finally:
            slow_timer.cancel()
            if f.slow:
                self._slow -= 1
            self._inflight.pop(c.token, None)
            self._slot_free.set()

    async def _settle_batch(self, endpoint_id: str, results: list[Any]) -> list[Settled]:
        settled = await self.health.settle(endpoint_id, results)
        return [settled] * len(results)

    def _mark_slow(self, f: _InFlight) -> None:
        if f.claim.token in self._inflight and not f.slow:
            f.slow = True
            self._slow += 1
            self._slot_free.set()

    def _after_settle(self, endpoint: dict[str, Any], s: Settled) -> None:
        """Widen the endpoint's window on success; disable it after disable_after failing."""
        if s.failures == 0:  # it answers: its window here grows
            self._windows.succeeded(endpoint["id"])
        if not s.failing_since or endpoint["id"] in self._disabling:
            return
        if time.time() * 1000 - s.failing_since >= self.settings.disable_after * 1000:
            self._disabling.add(endpoint["id"])
            task = asyncio.create_task(self._disable(endpoint["id"], s.failing_since))
            task.add_done_callback(lambda _: self._disabling.discard(endpoint["id"]))

    async def _disable(self, endpoint_id: str, failing_since: int) -> None:
        def disabled(endpoint: dict[str, Any]) -> dict[str, Any] | None:
            if not endpoint.get("enabled", True):
                return None  # already disabled (by an operator or another worker)
            endpoint.update(
                enabled=False,
                disabled_reason=f"auto-disabled: no success since {failing_since} (ms)",
                updated_at=int(time.time() * 1000),
            )
            return endpoint

        done = await self.store.update_endpoint(endpoint_id, disabled)
        if done is not None and done[0] is not done[1]:
            log.warning("endpoint.disabled", endpoint_id=endpoint_id, failing_since=failing_since)

    async def _attempt(
        self, c: Claimed, endpoint: dict[str, Any] | None
    ) -> tuple[Outcome, str | None]:
        """Send once; returns the outcome and the breaker verdict ("1", "0", "-")."""
        if endpoint is None:
            dead = self._outcome(c, "dead", 0, None, "endpoint_deleted", "endpoint was deleted")
            return dead, None
        if self.settings.test_crash_marker and self.settings.test_crash_marker in c.body:
            os._exit(86)  # test hook: a poison message that kills its worker every time
        if self._before_send is not None:
            maybe = self._before_send(c)
            if maybe is not None:
                await maybe
        assert self._session is not None
        resp = await sender.send(
            self._session,
            endpoint=endpoint,
            event_id=c.event_id,
            delivery_id=c.id,
            attempt=c.attempts,
            body=c.body.encode(),
        )
        self.stats.sent += 1
        retry_after = None
        if resp.status in (429, 503):
            retry_after = retry.parse_retry_after(resp.retry_after, time.time())
        decision = retry.decide(
            status=resp.status,
            attempts=c.attempts,
            max_attempts=c.max_attempts,
            schedule=self.settings.retry_schedule,
            jitter=self.settings.retry_jitter,
            retry_after=retry_after,
            retry_after_cap=self.settings.retry_after_cap,
            rand=random.random,
        )
        self.stats.outcomes[decision.outcome] = self.stats.outcomes.get(decision.outcome, 0) + 1
        metrics.observe_attempt(decision.outcome, resp.status, resp.duration)
        error = resp.error or ("" if resp.status and 200 <= resp.status < 300 else "http_status")
        log.info(
            "delivery.attempt",
            status=resp.status,
            outcome=decision.outcome,
            error=resp.error or None,
            duration_ms=round(resp.duration * 1000, 2),
            next_in_s=round(decision.delay, 3) if decision.outcome == "retry" else None,
        )
        ewma = self._avg_ms.get(c.endpoint_id, resp.duration * 1000)
        self._avg_ms[c.endpoint_id] = 0.8 * ewma + 0.2 * resp.duration * 1000
        if resp.status is not None and 200 <= resp.status < 300:
            verdict = "1"
        elif resp.status == 429:
            verdict = "-"  # pacing, not ill health
        else:
            verdict = "0"
        outcome = self._outcome(
            c,
            decision.outcome,
            int(decision.delay * 1000),
            resp.status,
            error,
            resp.detail or resp.body,
            resp.duration,
        )
        return outcome, verdict

    def _outcome(
        self,
        c: Claimed,
        outcome: str,
        delay_ms: int,
        status: int | None,
        error: str,
        detail: str,
        duration: float = 0.0,
    ) -> Outcome:
        entry = orjson.dumps(
            {
                "attempt": c.attempts,
                "at": int(time.time() * 1000),
                "duration_ms": round(duration * 1000, 2),
                "status_code": status,
                "error": error or None,
                "detail": detail[: sender.BODY_CAP] or None,
                "outcome": outcome,
                "worker": self.settings.worker_id,
            }
        )
        return Outcome(c.id, c.token, outcome, delay_ms, status, error, entry)

    # ------------------------------------------------------------------ background

    async def _heartbeat(self) -> None:
        """Extend the leases of every send in flight, one script call per shard."""
        period = max(0.05, self.settings.lease_seconds / 3)
        while True:
            await asyncio.sleep(period)
            for items in _by_shard(self._inflight.values()):
                sk = items[0].sk
                try:
                    res = await self.store.extend(
                        sk, [(f.claim.id, f.claim.token) for f in items], self._lease_ms
                    )
                except Exception as exc:
                    log.warning("lease.extend_failed", error=str(exc))
                    continue
                self.stats.lease_extensions += sum(res)
                metrics.LEASE_EXTENSIONS.inc(sum(res))
                for f, ok in zip(items, res, strict=True):
                    if not ok and not f.recording:
                        log.warning("lease.lost", delivery_id=f.claim.id)

    async def _listen(self) -> None:
        """Wake the claim loop when a publish (or retry) makes work due sooner."""
        channels = [sk.wake for sk in self._shards]
        attempt = 0
        while True:
            pubsub = self.store.wake_pubsub(attempt)
            attempt += 1
            try:
                await pubsub.subscribe(*channels)
                async for msg in pubsub.listen():
                    if msg.get("type") == "message":
                        self._wake.set()
            except asyncio.CancelledError:
                await pubsub.aclose()
                raise
            except Exception as exc:
                log.warning("wake.reconnect", error=str(exc))
                await pubsub.aclose()
                self._wake.set()  # we may have missed a message
                await asyncio.sleep(0.5)

    async def _shutdown(self) -> None:
        """Finish sends within the grace period; hand back the rest uncharged."""
        tasks = [f.task for f in self._inflight.values() if f.task is not None]
        if tasks:
            log.info("worker.draining", in_flight=len(tasks), grace_s=self.settings.shutdown_grace)
            _, pending = await asyncio.wait(tasks, timeout=self.settings.shutdown_grace)
            unfinished = [f for f in self._inflight.values() if not f.recording]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await asyncio.shield(self._recorder.drain())
            for items in _by_shard(unfinished):
                claims = [(f.claim.id, f.claim.token) for f in items]
                try:
                    res = await asyncio.shield(self.store.release(items[0].sk, claims))
                    self.stats.released += sum(res)
                    log.info("worker.handed_back", count=sum(res))
                except Exception as exc:
                    log.warning("worker.hand_back_failed", error=str(exc), count=len(claims))
            # Their endpoint slots (max_in_flight, a half-open probe) free now, not when
            # they expire: a neutral result, no verdict on the endpoint's health.
            for f in unfinished:
                if f.endpoint is not None:
                    self._settler.submit(f.endpoint["id"], (f.claim.token, "-"))
        await self._recorder.stop()
        await self._settler.stop()


def _by_shard(flights: Iterable[_InFlight]) -> list[list[_InFlight]]:
    groups: dict[int, list[_InFlight]] = {}
    for f in flights:
        groups.setdefault(f.sk.shard, []).append(f)
    return list(groups.values())


async def _wait_any(stop: asyncio.Event, other: asyncio.Event, within: float | None = None) -> None:
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(other.wait())]
    try:
        await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
