"""The dashboard: static files under ``/ui/`` and the JSON reads only the dashboard needs.

The page (``relay/ui/``) is plain HTML, CSS and JavaScript served from the package, so
there is no build step and nothing is fetched from elsewhere. It keeps the API token in
``sessionStorage`` and polls every few seconds with ``fetch`` (``EventSource`` cannot
send an ``Authorization`` header, and a token in a URL ends up in logs).

The ``/v1/ui/*`` reads are cheap by construction (the Store's dashboard reads,
:mod:`relay.queue.dashboard`): per-minute outcomes are a pipelined ``ZCOUNT`` per
minute over the finish-time sets; per-endpoint success rates look at a bounded sample of
each endpoint's newest deliveries; in-flight counts read the ``processing`` set, which is
bounded by the workers' concurrency.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field

from relay import __version__
from relay.api.common import HISTORY, STORE, ApiError, json, page, route
from relay.api.deliveries import listing
from relay.api.eventmodels import SentHeader
from relay.api.events import shown
from relay.api.models import (
    DeliveryDetail,
    DeliveryList,
    EventDetail,
    StatsOut,
    UiDeliveryQuery,
)
from relay.api.sentheaders import sent_headers
from relay.endpoints.health import Health
from relay.queue.store import Store

MINUTES = 30
SAMPLE = 200  # newest deliveries per endpoint behind its success rate
PROCESSING_CAP = 5000

KINDS = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
# The page needs nothing but itself: no inline script, no other origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


# ---------------------------------------------------------------------- models


class Series(BaseModel):
    """Deliveries per minute, oldest minute first; the last minute is still running."""

    minute_ms: list[int] = Field(description="start of each minute, ms since the epoch")
    succeeded: list[int] = Field(description="deliveries that succeeded in that minute")
    dead: list[int] = Field(description="deliveries that went dead in that minute")
    created: list[int] = Field(description="events published in that minute (with deliveries)")


class OverviewOut(BaseModel):
    stats: StatsOut
    series: Series
    version: str
    server_time: int = Field(description="Redis time, ms since the epoch")


class EndpointBrief(BaseModel):
    id: str
    url: str
    app: str
    description: str
    enabled: bool


class DeliveryView(BaseModel):
    delivery: DeliveryDetail
    event: EventDetail | None
    endpoint: EndpointBrief | None
    headers: list[SentHeader] = Field(description="what relay sends: the signature omitted")


class EndpointHealth(BaseModel):
    endpoint_id: str
    sample: int = Field(description="newest deliveries looked at")
    succeeded: int
    dead: int
    pending: int
    held: int = Field(description="deliveries parked while the endpoint is disabled (exact)")
    success_rate: float | None = Field(description="succeeded / (succeeded + dead) in the sample")
    in_flight: int = Field(description="deliveries of this endpoint claimed by a worker now")
    last_created_at: int | None = None


class EndpointHealthList(BaseModel):
    data: list[EndpointHealth]
    sample_size: int


# ---------------------------------------------------------------------- static files


def ui_file_kind(name: str, side: str) -> str | None:
    """The content type of ``relay/ui/<name>`` when ``side`` (``dash`` or ``portal``)
    serves it, else None.

    The files are flat ES modules named by side: ``portal*`` the portal's, ``app.*``,
    ``dash-*`` and ``index.html`` the dashboard's, every other ``.js``/``.css`` shared
    (``kit.js``, ``api.js``, ...). Pages are served at their folder, not by name.
    """
    kind = KINDS.get(name[name.rfind(".") :]) if "." in name else None
    if kind is None or kind == "text/html" or "/" in name:
        return None
    portal = name.startswith("portal")
    dash = name.startswith(("app.", "dash-")) and name != "app.css"
    if (side == "dash" and portal) or (side == "portal" and dash):
        return None
    return kind if resources.files("relay").joinpath("ui", name).is_file() else None


async def _static(name: str) -> web.Response:
    data = resources.files("relay").joinpath("ui", name).read_bytes()
    resp = web.Response(body=data, content_type=KINDS[name[name.rfind(".") :]], charset="utf-8")
    resp.headers.update(SECURITY_HEADERS)
    return resp


@page("/ui")
async def ui_redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui/")


@page("/ui/")
async def ui_index(request: web.Request) -> web.Response:
    return await _static("index.html")


@page("/ui/{file}")
async def ui_file(request: web.Request) -> web.Response:
    name = request.match_info["file"]
    if ui_file_kind(name, "dash") is None:
        raise web.HTTPNotFound()
    return await _static(name)


# ---------------------------------------------------------------------- read helpers


async def series(store: Store, now_ms: int, minutes: int = MINUTES) -> dict[str, list[int]]:
    """Deliveries per minute by outcome, the last ``minutes`` minutes up to ``now_ms``."""
    return await store.minute_series(now_ms, minutes)


async def endpoint_health(
    store: Store, endpoint_ids: list[str], sample: int = SAMPLE
) -> list[dict[str, Any]]:
    return await store.endpoint_health(endpoint_ids, sample=sample, processing_cap=PROCESSING_CAP)


# ---------------------------------------------------------------------- JSON routes


@route(
    "GET",
    "/v1/ui/overview",
    summary="Dashboard: stats and deliveries per minute by outcome (last 30 minutes)",
    operation_id="getDashboardOverview",
    tag="Dashboard",
    responses={200: OverviewOut},
)
async def overview(request: web.Request) -> web.Response:
    """The counts of ``/v1/stats`` and deliveries per minute by outcome, the last 30
    minutes, with relay's version and Redis's clock."""
    store = request.app[STORE]
    now = await store.now_ms()
    return json(
        {
            "stats": await store.stats(),
            "series": await series(store, now),
            "version": __version__,
            "server_time": now,
        }
    )


@route(
    "GET",
    "/v1/ui/deliveries",
    summary="Dashboard: deliveries, newest first, filterable by event type too",
    operation_id="listDashboardDeliveries",
    tag="Dashboard",
    query=UiDeliveryQuery,
    responses={200: DeliveryList},
    errors={400: ("invalid_cursor",)},
)
async def deliveries(request: web.Request) -> web.Response:
    """The deliveries table of the dashboard: ``/v1/deliveries``'s page and filters."""
    return await listing(request, UiDeliveryQuery)


@route(
    "GET",
    "/v1/ui/deliveries/{id}",
    summary="Dashboard: a delivery with its attempt log, event payload and headers sent",
    operation_id="getDashboardDelivery",
    tag="Dashboard",
    responses={200: DeliveryView},
)
async def delivery_view(request: web.Request) -> web.Response:
    """The drawer of the dashboard: the delivery, its event and endpoint, and the headers
    it was sent with (signatures and custom header values hidden)."""
    store, history = request.app[STORE], request.app[HISTORY]
    delivery = await history.get_delivery(request.match_info["id"])
    if delivery is None:
        raise ApiError(404, "not_found", f"delivery {request.match_info['id']} does not exist")
    await Health(store).explain_waits([delivery])
    event = await history.get_event(delivery["event_id"])
    endpoint = await store.get_endpoint(delivery["endpoint_id"])
    body_len = None
    if event is not None:
        shown(event)
        body_len = await store.event_body_length(delivery["event_id"])
    brief = None
    if endpoint is not None:
        brief = {k: endpoint.get(k) for k in ("id", "url", "app", "description", "enabled")}
    return json(
        {
            "delivery": delivery,
            "event": event,
            "endpoint": brief,
            "headers": sent_headers(delivery, endpoint, body_len),
        }
    )


@route(
    "GET",
    "/v1/ui/endpoint-health",
    summary="Dashboard: success rate over each endpoint's newest deliveries, in-flight now",
    operation_id="getDashboardEndpointHealth",
    tag="Dashboard",
    responses={200: EndpointHealthList},
)
async def endpoint_health_route(request: web.Request) -> web.Response:
    """Per endpoint: the success rate over its newest deliveries and its sends in flight."""
    store = request.app[STORE]
    endpoints = await store.list_endpoints()
    data = await endpoint_health(store, [e["id"] for e in endpoints])
    return json({"data": data, "sample_size": SAMPLE})
