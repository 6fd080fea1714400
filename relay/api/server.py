"""The API's HTTP server: aiohttp's, with bounds on what one client can hold.

* A connection must deliver a complete request head within ``RELAY_HEADER_TIMEOUT`` of
  opening, or of its previous answer, else it is closed. aiohttp's ``keepalive_timeout``
  is that deadline: armed when a connection opens and again after each answer, not moved
  by the bytes that arrive, and when it passes with no complete request in hand the
  connection is closed (``RequestHandler._process_keepalive``). An idle keep-alive
  connection is closed by the same deadline.
* A request body must arrive within ``RELAY_BODY_TIMEOUT`` of the handler's asking for it
  (relay.api.common.read_body): 408, ``Connection: close``.
* One client address holds at most ``RELAY_MAX_CONNECTIONS_PER_CLIENT`` connections; a
  connection past it is closed as it is accepted, unanswered, and other addresses are
  served as before.

docs/operating/connections.md says what an operator sets.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from relay.ops import metrics
from relay.settings import Settings

log = structlog.get_logger("relay.api")


def handler_args(settings: Settings) -> dict[str, Any]:
    """What every connection's aiohttp handler is made with (``Application(handler_args=)``)."""
    return {
        "keepalive_timeout": settings.header_timeout,
        "auto_decompress": False,  # bodies reach relay as sent: relay.api.bodies decodes them
    }


class ClientCap:
    """Open connections per client address, at most ``limit`` each (0: no limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: Counter[str] = Counter()
        self._client_of: dict[RequestHandler, str] = {}
        self._refusing: set[str] = set()  # addresses over the cap, logged once per episode

    def admit(self, handler: RequestHandler, transport: asyncio.BaseTransport) -> bool:
        peer = transport.get_extra_info("peername")
        if not self.limit or not isinstance(peer, tuple):  # a Unix socket has no address
            return True
        client = str(peer[0])
        if self.open[client] >= self.limit:
            metrics.API_CONNECTIONS_REFUSED.inc()
            if client not in self._refusing:
                self._refusing.add(client)
                log.warning("api.client_over_cap", client=client, open=self.open[client])
            return False
        self.open[client] += 1
        self._client_of[handler] = client
        return True

    def release(self, handler: RequestHandler) -> None:
        client = self._client_of.pop(handler, None)
        if client is None:
            return
        self.open[client] -= 1
        if self.open[client] < self.limit:
            self._refusing.discard(client)
        if not self.open[client]:
            del self.open[client]


class CappedHandler(RequestHandler):
    """aiohttp's handler of one connection, which closes it on arrival when its client
    address is over the cap (before any of aiohttp's own work for it starts)."""

    def __init__(self, manager: CappedServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.cap = manager.cap

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self.cap.admit(self, transport):
            transport.close()
            return
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.cap.release(self)
        super().connection_lost(exc)


class CappedServer(web.Server):
    """aiohttp's server, whose connections are :class:`CappedHandler` s."""

    def __init__(
        self,
        request_handler: Any,
        *,
        loop: asyncio.AbstractEventLoop,
        cap: ClientCap,
        request_factory: Any,
        handler_cancellation: bool,
        **handler_kwargs: Any,
    ) -> None:
        super().__init__(
            request_handler,
            request_factory=request_factory,
            handler_cancellation=handler_cancellation,
            loop=loop,
            **handler_kwargs,
        )
        self.loop = loop
        self.cap = cap
        self.handler_kwargs = handler_kwargs

    def __call__(self) -> RequestHandler:
        return CappedHandler(self, loop=self.loop, **self.handler_kwargs)


class ApiRunner(web.AppRunner):
    """``web.AppRunner`` whose server is a :class:`CappedServer`."""

    def __init__(self, app: web.Application, settings: Settings) -> None:
        super().__init__(app, access_log=None)
        self.settings = settings
        self.cap = ClientCap(settings.max_connections_per_client)

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()  # the app started, its own server built
        return CappedServer(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            loop=asyncio.get_running_loop(),
            cap=self.cap,
            access_log=None,
            **handler_args(self.settings),
        )


async def start(app: web.Application, settings: Settings, host: str, port: int) -> ApiRunner:
    """``app`` served on ``host:port`` (runner.cleanup() stops it)."""
    runner = ApiRunner(app, settings)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
