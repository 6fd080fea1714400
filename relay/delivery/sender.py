"""The outbound HTTP request of one attempt: sign, POST, classify. No Redis here.

One pooled ``aiohttp.ClientSession`` per worker; redirects are never followed; the
response body is read only up to ``RELAY_RESPONSE_BODY_CAP`` bytes, and the headers of
an answer that is not a success kept (bounded, credentials dropped), for the attempt log.

The request's time limit: aiohttp's own (``make_session(timeout=...)``) starts a timer
for every request. The worker sets none there: each send carries a :class:`Deadline`,
and the worker's one watcher
(:func:`relay.delivery.inflight.watch_slow`, every 25 ms) cancels a request past it,
which :func:`send` then reports as a ``timeout`` exactly as aiohttp's would have been.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from relay import __version__
from relay.delivery import ssrf
from relay.domain import attemptlog, ed25519, signing

BODY_CAP = 512  # RELAY_RESPONSE_BODY_CAP's default
USER_AGENT = f"relay/{__version__}"


@dataclass(frozen=True, slots=True)
class Response:
    status: int | None  # None: no HTTP answer (a broker's, a timeout, a connection error)
    error: str  # "" or an error class such as "timeout"
    detail: str  # short human text for the log, never headers or secrets
    retry_after: str | None
    duration: float
    body: str
    headers: dict[str, str] | None = None  # a non-2xx answer's, as the attempt log keeps them

    @property
    def ok(self) -> bool:
        """A 2xx answer, or a broker's acknowledgement (no status and no error)."""
        if self.status is None:
            return not self.error
        return 200 <= self.status < 300


@dataclass(slots=True)
class Deadline:
    """A request's time limit, ``seconds`` from its start; when the request under way must
    have its answer (``at``, ``time.monotonic()``; ``inf``: none under way), and whether a
    watcher cancelled it for being past that."""

    seconds: float = math.inf
    at: float = math.inf
    hit: bool = False

    def overdue(self, now: float) -> bool:
        """Past its time and not yet cancelled for it: the watcher cancels, once."""
        if self.at <= now and not self.hit:
            self.hit = True
            return True
        return False


def make_session(
    *, timeout: float | None, limit: int, allow_private: bool
) -> aiohttp.ClientSession:
    """``timeout``: aiohttp's own limit on each request, in seconds; None when the caller
    enforces one itself (the worker: a :class:`Deadline` per send)."""
    connector = ssrf.make_connector(allow_private=allow_private, limit=limit)
    # No skip_auto_headers: every request sets its own Content-Type and User-Agent (so
    # aiohttp adds neither), and a session-wide skip list costs each request two
    # header-dict copies in aiohttp (tests/redis/test_worker.py pins the headers sent).
    # No cookie jar: one session sends for every tenant, and aiohttp's default jar would
    # hand a Set-Cookie from one endpoint to every other endpoint on the same host.
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


def secret_keys(endpoint: dict[str, Any], now: float) -> list[bytes]:
    """The endpoint's current secret, plus rotated-out ones still inside their grace."""
    keys = [signing.secret_bytes(endpoint["secret"])]
    for old in endpoint.get("previous_secrets", ()):
        if old["expires_at"] > now * 1000:
            keys.append(signing.secret_bytes(old["secret"]))
    return keys


def live_secrets(endpoint: dict[str, Any], now: float) -> list[str]:
    """The endpoint's current key and the rotated-out ones still inside their grace."""
    olds = endpoint.get("previous_secrets", ())
    return [endpoint["secret"], *(o["secret"] for o in olds if o["expires_at"] > now * 1000)]


def signature(endpoint: dict[str, Any], now: float, msg_id: str, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,`` (HMAC, the default) or ``v1a,`` (ed25519)
    per key still signing."""
    if endpoint.get("signing") == "ed25519":
        return ed25519.sign(live_secrets(endpoint, now), msg_id, int(now), body)
    return signing.sign(secret_keys(endpoint, now), msg_id, int(now), body)


def timed_out(deadline: Deadline | None, started: float) -> Response:
    """The answer of a send cancelled past its deadline: a ``timeout``, as aiohttp's own
    timer reports one. Called in an ``except asyncio.CancelledError``; re-raises unless
    the deadline's watcher alone cancelled the task (a shutdown cancels it too)."""
    task = asyncio.current_task()
    if deadline is None or not deadline.hit or task is None or task.uncancel() > 0:
        raise  # the CancelledError being handled
    error, detail = ssrf.describe_error(TimeoutError())
    return Response(None, error, detail, None, time.perf_counter() - started, "")


async def send(
    session: aiohttp.ClientSession,
    *,
    endpoint: dict[str, Any],
    event_id: str,
    delivery_id: str,
    attempt: int,
    body: bytes,
    trace_headers: dict[str, str] | None = None,
    deadline: Deadline | None = None,
    body_cap: int = BODY_CAP,
) -> Response:
    """POST one signed delivery and describe what came back. ``trace_headers``
    (``traceparent``, ``tracestate``; tracing on) replace custom headers of those names.
    ``deadline``: armed for its ``seconds`` from the request's start while it runs; the
    task cancelled past it (a watcher's ``Deadline.overdue``) gets a ``timeout`` answer.
    ``body_cap``: bytes of the answer's body read (``RELAY_RESPONSE_BODY_CAP``)."""
    now = time.time()
    headers = signing.signed_headers(
        secret_keys=(),
        signature=signature(endpoint, now, event_id, body),
        msg_id=event_id,
        timestamp=int(now),
        body=body,
        delivery_id=delivery_id,
        attempt=attempt,
        user_agent=USER_AGENT,
        extra=endpoint.get("headers") or None,
    )
    if trace_headers:
        headers = {k: v for k, v in headers.items() if k.lower() not in trace_headers}
        headers.update(trace_headers)
    started = time.perf_counter()
    if deadline is not None:
        deadline.at = time.monotonic() + deadline.seconds
    try:
        async with session.post(
            endpoint["url"], data=body, headers=headers, allow_redirects=False
        ) as resp:
            snippet = await resp.content.read(body_cap) if body_cap else b""
            ok = 200 <= resp.status < 300
            return Response(
                status=resp.status,
                error="",
                detail="",
                retry_after=resp.headers.get("Retry-After"),
                duration=time.perf_counter() - started,
                body=snippet.decode("utf-8", "replace"),
                headers=None if ok else attemptlog.answer_headers(resp.headers.items()),
            )
    except asyncio.CancelledError:
        return timed_out(deadline, started)
    except Exception as exc:  # every transport failure becomes a logged attempt
        error, detail = ssrf.describe_error(exc)
        return Response(None, error, detail, None, time.perf_counter() - started, "")
    finally:
        if deadline is not None:
            deadline.at = math.inf
