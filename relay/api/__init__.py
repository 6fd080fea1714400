"""The HTTP API: ``create_app(settings, store)`` returns an aiohttp application."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from relay.api import (  # noqa: F401
    apikeys,
    archive,
    batch,
    deliveries,
    docs,
    endpoints,
    endpointstats,
    events,
    eventtypes,
    ops,
    portal,
    rawerrors,
    replays,
    server,
    ui,
)
from relay.api.common import (
    ENDPOINT_CACHE,
    EVENT_TYPE_CACHE,
    HISTORY,
    PAGES,
    PUBLISHER,
    ROUTES,
    SETTINGS,
    STORE,
    errors_and_auth,
    max_request_bytes,
)
from relay.api.svix import routes as svix_routes  # noqa: F401  (/api/v1)
from relay.archive.history import History
from relay.archive.tables import Tables
from relay.endpoints.cache import EndpointCache
from relay.endpoints.catalog import EventTypeCache
from relay.publishing import Publisher
from relay.queue.store import Store, connect
from relay.sandbox import Sandbox
from relay.settings import Settings

log = structlog.get_logger("relay.api")


def create_app(settings: Settings, store: Store | None = None) -> web.Application:
    """The API app. Without ``store`` it connects to Redis on start and closes on stop."""
    rawerrors.install()  # aiohttp's own error answers: JSON, and no header in the log
    app = web.Application(
        middlewares=[errors_and_auth],
        client_max_size=max_request_bytes(settings),
        handler_args=server.handler_args(settings),  # header timeout, bodies as sent
    )
    app[SETTINGS] = settings

    async def redis_ctx(app: web.Application) -> AsyncIterator[None]:
        own = store is None
        app[STORE] = store or Store(connect(settings), settings)
        await app[STORE].start()
        app[ENDPOINT_CACHE] = EndpointCache(app[STORE])
        cache = app[ENDPOINT_CACHE]
        app[EVENT_TYPE_CACHE] = EventTypeCache(app[STORE], cache)
        # tenant logic (schemas, filters) runs in child processes, started on first need
        sandbox = Sandbox()
        app[PUBLISHER] = Publisher(
            app[STORE], cache.endpoints_for_app, app[EVENT_TYPE_CACHE].lookup, sandbox
        )
        tables = None  # the history archive (RELAY_ARCHIVE_URL), read beside Redis
        if settings.archive_url:
            tables = Tables(settings.archive_url, settings.archive_schema)
        app[HISTORY] = History(app[STORE], tables)
        listener = asyncio.create_task(app[ENDPOINT_CACHE].run(), name="relay-endpoint-cache")
        yield
        if tables is not None:
            await tables.close()
        await sandbox.close()
        listener.cancel()
        # Bounded: a subscriber stuck on a connection that vanished must not hold the
        # shutdown (the task is dropped with the process).
        done, _ = await asyncio.wait([listener], timeout=10.0)
        if not done:
            log.warning("api.cache_listener_stuck")
        if own:
            await app[STORE].close()

    app.cleanup_ctx.append(redis_ctx)
    for spec in ROUTES:
        app.router.add_route(spec.method, spec.path, spec.handler)
    for page in PAGES:
        app.router.add_route("GET", page.path, page.handler)
    return app
