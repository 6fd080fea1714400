"""``/v1/replays``: reconciliation replay jobs (start or count, read, list, cancel).

The answer models live here, beside the routes, rather than in ``models.py``: they are
this resource's only.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field

from relay.api.common import STORE, ApiError, body, found, json, route
from relay.api.models import ErrorOut
from relay.domain.replayspec import ReplayIn
from relay.ops.replays import ReplayNotRunning, Replays


class ReplayJobOut(BaseModel):
    id: str = Field(description="rpl_...")
    state: str = Field(description="running, done, cancelled or failed")
    since: str
    until: str
    endpoint_id: str | None
    type: str | None = Field(description="event type pattern")
    status: list[str]
    matched: int = Field(description="deliveries of the range that matched, walked so far")
    replayed: int = Field(description="put back to pending by this job")
    skipped: int = Field(description="matched, but pending or in flight already: not replayed")
    waiting: int = Field(description="matched, held back by the pacing rule")
    outstanding: int = Field(description="replayed by this job and not finished yet")
    scan_done: bool
    takeovers: int = Field(description="times another worker took the job over")
    error: str | None
    created_at: str | None
    updated_at: str | None
    finished_at: str | None


class ReplayJobList(BaseModel):
    data: list[ReplayJobOut]


class ReplayJobCount(BaseModel):
    dry_run: bool
    matched: int = Field(description="deliveries a replay of the range would replay now")


@route(
    "POST",
    "/v1/replays",
    summary="Replay the deliveries of a time range (a job), or count them (dry_run)",
    body=ReplayIn,
    responses={202: ReplayJobOut, 200: ReplayJobCount, 422: ErrorOut},
)
async def start(request: web.Request) -> web.Response:
    spec, _ = await body(request, ReplayIn)
    store = request.app[STORE]
    if spec.endpoint_id is not None and not await store.endpoint_known(spec.endpoint_id):
        raise ApiError(422, "unknown_endpoint", f"endpoint {spec.endpoint_id} does not exist")
    replays = Replays(store)
    if spec.dry_run:
        return json({"dry_run": True, "matched": await replays.count(spec)})
    return json(await replays.start(spec), status=202)


@route(
    "GET", "/v1/replays", summary="List replay jobs, newest first", responses={200: ReplayJobList}
)
async def list_(request: web.Request) -> web.Response:
    return json({"data": await Replays(request.app[STORE]).list()})


@route(
    "GET",
    "/v1/replays/{id}",
    summary="A replay job and its progress",
    responses={200: ReplayJobOut, 404: ErrorOut},
)
async def read(request: web.Request) -> web.Response:
    ident = request.match_info["id"]
    job: dict[str, Any] | None = await Replays(request.app[STORE]).get(ident)
    return json(found(job, "replay", ident))


@route(
    "POST",
    "/v1/replays/{id}/cancel",
    summary="Cancel a running replay job (what it replayed stays replayed)",
    responses={200: ReplayJobOut, 404: ErrorOut, 409: ErrorOut},
    body_required=False,
)
async def cancel(request: web.Request) -> web.Response:
    ident = request.match_info["id"]
    try:
        return json(await Replays(request.app[STORE]).cancel(ident))
    except ReplayNotRunning as exc:
        if not exc.state:
            raise ApiError(404, "not_found", f"replay {ident} does not exist") from None
        raise ApiError(409, "replay_not_running", str(exc)) from None
