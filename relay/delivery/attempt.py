"""One attempt at a delivery: send it, classify the answer, build what gets recorded.

The pure parts are functions: :func:`decide` (the retry policy applied to one answer),
:func:`verdict` (what the answer says about the endpoint's health) and :func:`outcome`
(the :class:`Outcome` with its attempt-log entry). :class:`Attempter` does the I/O: the
``before_send`` hook, the request, counters, metrics and the log line.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import structlog

from relay import tracing
from relay.delivery import sender
from relay.delivery.destinations import Destinations
from relay.delivery.stats import Stats
from relay.domain import attemptlog, retry
from relay.domain.destinations import kind_of, messaging_attributes
from relay.ops import metrics
from relay.queue.store import Claimed, Outcome
from relay.settings import Settings

log = structlog.get_logger("relay.worker")

BeforeSend = Callable[[Claimed], Awaitable[None] | None]

SUCCEEDED = retry.Decision("succeeded", 0.0)


def decide(
    c: Claimed,
    resp: sender.Response,
    settings: Settings,
    *,
    clock: Callable[[], float] = time.time,
    rand: Callable[[], float] = random.random,
) -> retry.Decision:
    """Succeeded, retry (after how long) or dead, for this answer to this attempt."""
    if resp.ok:
        return SUCCEEDED  # what retry.decide says of any 2xx, without building it
    retry_after = None
    if resp.status in (429, 503):
        retry_after = retry.parse_retry_after(resp.retry_after, clock())
    return retry.decide(
        status=resp.status,
        attempts=c.attempts,
        max_attempts=c.max_attempts,
        schedule=settings.retry_schedule,
        jitter=settings.retry_jitter,
        retry_after=retry_after,
        retry_after_cap=settings.retry_after_cap,
        rand=rand,
    )


def verdict(resp: sender.Response) -> str:
    """For the endpoint's breaker: "1" success, "0" failure, "-" neither."""
    if resp.ok:
        return "1"
    if resp.status == 429:
        return "-"  # pacing, not ill health
    return "0"


def outcome(
    c: Claimed,
    result: str,
    delay_ms: int,
    status: int | None,
    error: str,
    detail: str,
    *,
    worker: str,
    at_ms: int,
    duration: float = 0.0,
    headers: dict[str, str] | None = None,
    body_cap: int = sender.BODY_CAP,
) -> Outcome:
    """What ``Store.record`` writes for this attempt: a first request that succeeded, its
    short form (relay.domain.attemptlog), from which the script makes the log entry only
    where one is needed; any other, its attempt-log entry (``attemptlog.fields``), with
    the answer's ``headers`` when there are any. ``detail`` is cut at ``body_cap``
    characters (the sender read at most that many bytes of the body)."""
    duration_ms = round(duration * 1000, 2)
    detail = detail[:body_cap]
    if result == "succeeded" and not error:
        short = attemptlog.inline(c.attempts, at_ms, duration_ms, status, worker, detail)
        if short:
            return Outcome(
                c.id,
                c.token,
                result,
                delay_ms,
                status,
                error,
                b"",
                short,
                c.endpoint_id,
                duration_ms,
            )
    entry = orjson.dumps(
        attemptlog.fields(
            c.attempts, at_ms, duration_ms, status, error, detail, result, worker, headers
        )
    )
    return Outcome(
        c.id, c.token, result, delay_ms, status, error, entry, "", c.endpoint_id, duration_ms
    )


def ids_of(c: Claimed) -> dict[str, Any]:
    """What every log line about a send names (passed, not bound in contextvars: no
    context copy and no four variables set per send)."""
    return {
        "delivery_id": c.id,
        "event_id": c.event_id,
        "endpoint_id": c.endpoint_id,
        "attempt": c.attempts,
    }


class Attempter:
    """Makes attempts through one client session (set ``session`` before the first) and
    the pooled broker connections of :class:`Destinations`."""

    def __init__(
        self, settings: Settings, stats: Stats, before_send: BeforeSend | None = None
    ) -> None:
        self.settings = settings
        self.stats = stats
        self.destinations = Destinations(settings)
        self.before_send = before_send
        self.avg_ms: dict[str, float] = {}  # send duration per endpoint, moving average
        # tracing on: claim token -> its attempt span's context, until the outcome is
        # recorded (the record span links to it); the worker removes each entry
        self.spans: dict[str, Any] = {}
        # bound once (relay.logs has configured structlog by now): the module's lazy
        # proxy would look the logger up again on every delivery.attempt line
        self.log = log.bind()
        # the delivery.attempt line's fields are not even built when INFO is filtered out
        # (RELAY_LOG_LEVEL warning or error): a dict of ten and two roundings per send
        self.log_attempts = self.log.is_enabled_for(logging.INFO)

    @property
    def session(self) -> aiohttp.ClientSession | None:
        """The HTTP kind's client session (the worker sets it before the first send)."""
        return self.destinations.session

    @session.setter
    def session(self, session: aiohttp.ClientSession | None) -> None:
        self.destinations.session = session

    def attempt(
        self,
        c: Claimed,
        endpoint: dict[str, Any] | None,
        deadline: sender.Deadline | None = None,
    ) -> Awaitable[tuple[Outcome, str | None]]:
        """Send once; awaited, the outcome and the breaker verdict (None: no request).
        With tracing on, inside a ``relay.attempt`` span whose ``traceparent`` is sent.
        ``deadline``: the request's (``http_timeout`` from its start), for a watcher to
        enforce (None: the session's own timeout, if any, is the only one).
        (Not a coroutine itself: one frame less for every resumption of the send.)"""
        if tracing.on:
            return self._traced(c, endpoint, deadline)
        return self.send_once(c, endpoint, deadline)

    async def _traced(
        self, c: Claimed, endpoint: dict[str, Any] | None, deadline: sender.Deadline | None
    ) -> tuple[Outcome, str | None]:
        attrs: dict[str, Any] = {
            "relay.delivery.id": c.id,
            "relay.event.id": c.event_id,
            "relay.endpoint.id": c.endpoint_id,
            "relay.attempt": c.attempts,
        }
        url = endpoint["url"] if endpoint is not None else ""
        if endpoint is None or kind_of(url) == "http":
            attrs["http.request.method"] = "POST"
        else:  # a broker: where the message went, by OpenTelemetry's messaging names
            attrs.update(messaging_attributes(url, c.event_type))
        if endpoint is not None:  # the host only: a URL's path or query may hold a token
            attrs["server.address"] = urlsplit(url).hostname or ""
        with tracing.attempt_span(c.trace, attrs) as span:
            done, verdict = await self.send_once(c, endpoint, deadline, tracing.headers())
            tracing.attempt_result(span, done.status_code, done.outcome, done.error)
        self.spans[c.token] = span.get_span_context()
        return done, verdict

    async def send_once(
        self,
        c: Claimed,
        endpoint: dict[str, Any] | None,
        deadline: sender.Deadline | None = None,
        trace_headers: dict[str, str] | None = None,
    ) -> tuple[Outcome, str | None]:
        """The attempt itself, untraced (``trace_headers`` go with the request). Called as
        :meth:`attempt` is, ``(claim, endpoint, deadline)``: bench/tracing.py puts it in
        that method's place to measure the tracing hooks."""
        worker = self.settings.worker_id
        if endpoint is None:
            at = int(time.time() * 1000)
            dead = outcome(
                c,
                "dead",
                0,
                None,
                "endpoint_deleted",
                "endpoint was deleted",
                worker=worker,
                at_ms=at,
            )
            return dead, None
        if self.before_send is not None:
            maybe = self.before_send(c)
            if maybe is not None:
                await maybe
        resp = await self.destinations.send(
            endpoint,
            event_id=c.event_id,
            delivery_id=c.id,
            attempt=c.attempts,
            body=c.body,
            event_type=c.event_type,
            trace_headers=trace_headers,
            deadline=deadline,
            body_cap=self.settings.response_body_cap,
        )
        self.stats.sent += 1
        decision = decide(c, resp, self.settings)
        self.stats.outcomes[decision.outcome] = self.stats.outcomes.get(decision.outcome, 0) + 1
        metrics.observe_attempt(decision.outcome, resp.status, resp.duration)
        error = resp.error or ("" if resp.ok else "http_status")
        if self.log_attempts:
            self.log.info(
                "delivery.attempt",
                delivery_id=c.id,
                event_id=c.event_id,
                endpoint_id=c.endpoint_id,
                attempt=c.attempts,
                status=resp.status,
                outcome=decision.outcome,
                error=resp.error or None,
                duration_ms=round(resp.duration * 1000, 2),
                next_in_s=round(decision.delay, 3) if decision.outcome == "retry" else None,
            )
        ewma = self.avg_ms.get(c.endpoint_id, resp.duration * 1000)
        self.avg_ms[c.endpoint_id] = 0.8 * ewma + 0.2 * resp.duration * 1000
        done = outcome(
            c,
            decision.outcome,
            int(decision.delay * 1000),
            resp.status,
            error,
            resp.detail or resp.body,
            worker=worker,
            at_ms=int(time.time() * 1000),
            duration=resp.duration,
            headers=resp.headers,
            body_cap=max(self.settings.response_body_cap, sender.BODY_CAP),
        )
        return done, verdict(resp)
