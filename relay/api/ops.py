"""Health, readiness, stats, metrics and the OpenAPI document."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from aiohttp import web
from pydantic import BaseModel, RootModel

from relay.api.common import HISTORY, SETTINGS, STORE, json, route
from relay.api.models import StatsOut
from relay.api.openapi import openapi_document
from relay.ops import metrics


class HealthOut(BaseModel):
    status: Literal["ok", "ready", "unavailable"]
    error: str | None = None


class MetricsText(RootModel[str]):
    """Prometheus' text exposition format."""

    media_type: ClassVar[str] = "text/plain"


class OpenApiOut(RootModel[dict[str, Any]]):
    """An OpenAPI 3.1 document."""


@route(
    "GET",
    "/healthz",
    summary="Alive",
    operation_id="getHealth",
    tag="Operations",
    auth=False,
    responses={200: HealthOut},
)
async def healthz(request: web.Request) -> web.Response:
    """The process answers. No Redis call: a liveness probe."""
    return json({"status": "ok"})


@route(
    "GET",
    "/readyz",
    summary="Ready: Redis answers and accepts writes",
    operation_id="getReadiness",
    tag="Operations",
    auth=False,
    responses={200: HealthOut, 503: HealthOut},
)
async def readyz(request: web.Request) -> web.Response:
    """200 when Redis takes a write (a key set with a TTL and deleted at once); 503 with
    ``Retry-After: 1`` when it does not (down, read-only, busy, loading, full)."""
    try:
        # a tiny write with a TTL: a read-only replica, a busy script, MISCONF or a full
        # Redis answers PING but refuses every publish
        await request.app[STORE].check_writable()
    except Exception as exc:
        answer = json({"status": "unavailable", "error": type(exc).__name__}, status=503)
        answer.headers["Retry-After"] = "1"
        return answer
    return json({"status": "ready"})


@route(
    "GET",
    "/v1/stats",
    summary="Counts by status, queue depths, oldest due age",
    operation_id="getStats",
    tag="Operations",
    responses={200: StatsOut},
    errors={503: ("archive_unavailable",)},
)
async def stats(request: web.Request) -> web.Response:
    """Deliveries by status, the due, scheduled and processing queues, the age of the
    oldest due delivery and the ordered lanes blocked by a dead head (the operator's)."""
    return json(await request.app[HISTORY].stats())


@route(
    "GET",
    "/metrics",
    summary="Prometheus metrics of this process",
    operation_id="getMetrics",
    tag="Operations",
    responses={200: MetricsText},
    auth=False,
)
async def prometheus(request: web.Request) -> web.Response:
    """Prometheus' text format: this process's counters and histograms, and gauges read
    from Redis at scrape time (the same on every replica: aggregate them with ``max``)."""
    return await metrics.render(request.app[STORE])


@route(
    "GET",
    "/openapi.json",
    summary="This document",
    operation_id="getOpenapiDocument",
    tag="Operations",
    responses={200: OpenApiOut},
    auth=False,
)
async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI 3.1 description of this API, generated from its route table."""
    return json(openapi_document(request.app[SETTINGS].public_url))
