"""Destinations: where a delivery goes, one kind per endpoint url scheme.

``http``/``https`` is the webhook POST (relay.delivery.sender); the broker kinds each live
in a module here (``redisstream``, ``nats``, ``amqp``) with one ``connect`` coroutine that
opens a publisher (relay.delivery.destinations.base). :class:`Destinations` sends one
attempt to whichever kind the endpoint's url names and answers with the same
:class:`relay.delivery.sender.Response` for every kind: the broker's acknowledgement in
``detail`` with no status and no error, or an error class and its detail. A new kind
(SQS, Pub/Sub, Kafka, EventBridge) is a module with ``connect`` and a line in
:data:`relay.domain.destinations.KINDS` and :data:`KINDS` (docs/guides/destinations.md).
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from yarl import URL

from relay.delivery import sender, ssrf
from relay.delivery.destinations.base import Message, Publisher, Refused
from relay.delivery.destinations.pool import Pool
from relay.domain import destinations
from relay.settings import Settings

Connector = Callable[[destinations.Target, str, float], Awaitable[Publisher]]

# kind -> the module that opens its publishers (imported on first use)
KINDS = {
    "redis": "relay.delivery.destinations.redisstream",
    "nats": "relay.delivery.destinations.nats",
    "amqp": "relay.delivery.destinations.amqp",
}


def connector(kind: str) -> Connector:
    """The ``connect`` coroutine of a broker kind."""
    connect: Connector = importlib.import_module(KINDS[kind]).connect
    return connect


def describe(exc: BaseException, url: str) -> tuple[str, str]:
    """(error class, detail) of a failed broker send, the url's secrets masked."""
    if isinstance(exc, Refused):
        error, detail = "refused", str(exc)
    else:
        error, detail = ssrf.describe_error(exc)
        if error in ("protocol", "error"):  # a client library's own error types
            error = "connection" if _is_connection(exc) else "broker"
    return error, destinations.scrub(detail, url)


def _is_connection(exc: BaseException) -> bool:
    name = type(exc).__name__.lower()
    return isinstance(exc, (OSError, EOFError)) or any(
        word in name for word in ("connection", "closed", "noservers", "disconnect")
    )


class Destinations:
    """Sends attempts to every kind: HTTP through ``session``, brokers through pooled
    connections (one per destination url, closed after ``destination_idle`` unused)."""

    def __init__(self, settings: Settings, session: aiohttp.ClientSession | None = None) -> None:
        self.settings = settings
        self.session = session
        self.pool = Pool(self._open, idle=settings.destination_idle)
        self._own_redis: set[tuple[str, int]] | None = None

    async def _open(self, url: str) -> Publisher:
        target = destinations.parse(url)
        timeout = self.settings.http_timeout
        address = await ssrf.checked_address(
            target.host, target.port, allow_private=self.settings.allow_private_networks
        )
        if target.kind == "redis" and (address, target.port) in await self._relay_redis():
            raise Refused("the destination is relay's own Redis; name another server")
        return await asyncio.wait_for(connector(target.kind)(target, address, timeout), timeout)

    async def _relay_redis(self) -> set[tuple[str, int]]:
        if self._own_redis is None:
            own = URL(self.settings.redis_url)
            host, port = own.host or "127.0.0.1", own.explicit_port or 6379
            address = await ssrf.checked_address(host, port, allow_private=True)
            self._own_redis = {(address, port)}
        return self._own_redis

    async def send(
        self,
        endpoint: dict[str, Any],
        *,
        event_id: str,
        delivery_id: str,
        attempt: int,
        body: bytes,
        event_type: str,
        trace_headers: dict[str, str] | None = None,
        deadline: sender.Deadline | None = None,
        body_cap: int = sender.BODY_CAP,
    ) -> sender.Response:
        """One attempt to the endpoint's destination, whatever its kind; ``event_type``:
        the event's (a broker kind's ``{type}``); ``body_cap``: bytes of an HTTP answer's
        body kept (``RELAY_RESPONSE_BODY_CAP``)."""
        url = endpoint["url"]
        if destinations.kind_of(url) == "http":
            assert self.session is not None
            return await sender.send(
                self.session,
                endpoint=endpoint,
                event_id=event_id,
                delivery_id=delivery_id,
                attempt=attempt,
                body=body,
                trace_headers=trace_headers,
                deadline=deadline,
                body_cap=body_cap,
            )
        return await self.publish(endpoint, event_id, event_type, body, deadline, trace_headers)

    async def publish(
        self,
        endpoint: dict[str, Any],
        event_id: str,
        event_type: str,
        body: bytes,
        deadline: sender.Deadline | None = None,
        trace_headers: dict[str, str] | None = None,
    ) -> sender.Response:
        """One signed message to the endpoint's broker (``trace_headers``: the attempt
        span's context, carried where the kind has message headers)."""
        url = endpoint["url"]
        now = time.time()
        message = Message(
            event_id=event_id,
            event_type=event_type,
            body=body,
            timestamp=str(int(now)),
            signature=sender.signature(endpoint, now, event_id, body),
            trace=trace_headers or {},
        )
        started = time.perf_counter()
        if deadline is not None:
            deadline.at = time.monotonic() + deadline.seconds
        publisher = None
        try:
            publisher = await self.pool.get(url)
            answer = await publisher.publish(message)
            return sender.Response(None, "", answer, None, time.perf_counter() - started, "")
        except asyncio.CancelledError:
            if publisher is not None:  # cut off mid-publish: its state is unknown
                self.pool.drop(url, publisher)
            return sender.timed_out(deadline, started)
        except Exception as exc:  # every failure becomes a logged attempt
            if publisher is not None and (not isinstance(exc, Refused) or publisher.closed):
                self.pool.drop(url, publisher)
            error, detail = describe(exc, url)
            return sender.Response(None, error, detail, None, time.perf_counter() - started, "")
        finally:
            if deadline is not None:
                deadline.at = float("inf")

    async def run(self) -> None:
        """Close idle broker connections until cancelled."""
        await self.pool.run()

    async def close(self) -> None:
        await self.pool.close()
