"""``GET /v1/endpoints/{id}/stats``: an endpoint's page, from the counters relay keeps."""

from __future__ import annotations

from typing import Literal

from aiohttp import web
from pydantic import BaseModel, Field

from relay.api.common import STORE, json, query, route
from relay.api.endpoints import load
from relay.api.models import BreakerOut
from relay.domain.schema import Strict
from relay.endpoints.stats import endpoint_stats


class StatsQuery(Strict):
    window: Literal["1h", "24h"] = Field(default="1h", description="the last hour or day")


class LatencyBucket(BaseModel):
    le: int | None = Field(description="upper bound, ms; null: slower than every bound")
    count: int


class Latency(BaseModel):
    p50: float | None = Field(description="ms, interpolated inside its histogram bucket")
    p90: float | None
    p99: float | None
    buckets: list[LatencyBucket]


class StatsPoint(BaseModel):
    at: int = Field(description="the step's start, ms since the epoch")
    attempts: int
    successes: int
    failures: int


class FailureGroup(BaseModel):
    status_code: int | None = Field(description="the answer's status; null: no answer")
    error: str | None = Field(description="without an answer: timeout, connection, tls, ...")
    count: int


class EndpointStatsOut(BaseModel):
    endpoint_id: str
    window: Literal["1h", "24h"]
    step_seconds: int = Field(description="60 for 1h, 600 for 24h")
    from_: int = Field(alias="from", description="the first step's start, ms since the epoch")
    until: int = Field(description="the last step's end, ms since the epoch")
    attempts: int = Field(description="requests made (a verdict on the endpoint's health)")
    successes: int
    failures: int = Field(description="attempts that were not a 2xx (429 included)")
    success_rate: float | None = Field(description="successes / attempts; null: none")
    latency_ms: Latency = Field(description="of answered attempts only")
    series: list[StatsPoint] = Field(description="every step, oldest first; the last runs")
    failures_by: list[FailureGroup] = Field(description="over the window, largest first")
    breaker: BreakerOut
    enabled: bool
    why: str | None = Field(description="why deliveries are held back; null: they are not")


@route(
    "GET",
    "/v1/endpoints/{id}/stats",
    summary="An endpoint's success rate, attempts per minute and latency, and its breaker",
    operation_id="getEndpointStats",
    tag="Endpoints",
    query=StatsQuery,
    responses={200: EndpointStatsOut},
    errors={422: ("validation_error",)},
)
async def stats(request: web.Request) -> web.Response:
    """Over the last hour (a point a minute) or day (a point every 10 minutes), from the
    counters relay keeps per endpoint and minute in Redis: attempts, successes, the
    success rate, latency percentiles and histogram, failures by status or error; and
    the breaker's state with why the endpoint is held back, if it is."""
    q = query(request, StatsQuery)
    endpoint = await load(request)
    return json(await endpoint_stats(request.app[STORE], endpoint, q.window))
