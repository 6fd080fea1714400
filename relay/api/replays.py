"""``/v1/replays``: reconciliation replay jobs (start or count, read, list, cancel).

The answer models live here, beside the routes, rather than in ``models.py``: they are
this resource's only.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field

from relay.api.common import HISTORY, STORE, ApiError, body, found, json, route
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
    operation_id="startReplay",
    tag="Replays",
    body=ReplayIn,
    responses={202: ReplayJobOut, 200: ReplayJobCount},
    errors={422: ("unknown_endpoint",)},
    examples={
        "count": (
            "Count the dead order deliveries of an outage first (nothing changes)",
            {
                "since": "2026-12-01T08:00:00Z",
                "until": "2026-12-01T10:30:00Z",
                "type": "order.*",
                "status": ["dead"],
                "dry_run": True,
            },
        ),
        "replay": (
            "Replay them: a job the workers run, paced per endpoint",
            {"since": "2026-12-01T08:00:00Z", "until": "2026-12-01T10:30:00Z"},
        ),
    },
)
async def start(request: web.Request) -> web.Response:
    """Replay every delivery created in the range (both ends inclusive) that matches
    ``endpoint_id``, ``type`` and ``status`` (dead by default): a job the workers run,
    paced per endpoint. With ``dry_run``, only count them (200) and change nothing."""
    spec, _ = await body(request, ReplayIn)
    store = request.app[STORE]
    if spec.endpoint_id is not None and not await store.endpoint_known(spec.endpoint_id):
        raise ApiError(422, "unknown_endpoint", f"endpoint {spec.endpoint_id} does not exist")
    replays = Replays(store, request.app[HISTORY])
    if spec.dry_run:
        return json({"dry_run": True, "matched": await replays.count(spec)})
    return json(await replays.start(spec), status=202)


@route(
    "GET",
    "/v1/replays",
    summary="List replay jobs, newest first",
    operation_id="listReplays",
    tag="Replays",
    responses={200: ReplayJobList},
)
async def list_(request: web.Request) -> web.Response:
    """Every replay job with its progress, newest first."""
    return json({"data": await Replays(request.app[STORE]).list()})


@route(
    "GET",
    "/v1/replays/{id}",
    summary="A replay job and its progress",
    operation_id="getReplay",
    tag="Replays",
    responses={200: ReplayJobOut},
)
async def read(request: web.Request) -> web.Response:
    """The job's state (running, done, cancelled, failed) and counts: matched, replayed,
    skipped, waiting, outstanding."""
    ident = request.match_info["id"]
    job: dict[str, Any] | None = await Replays(request.app[STORE]).get(ident)
    return json(found(job, "replay", ident))


@route(
    "POST",
    "/v1/replays/{id}/cancel",
    summary="Cancel a running replay job (what it replayed stays replayed)",
    operation_id="cancelReplay",
    tag="Replays",
    responses={200: ReplayJobOut},
    errors={409: ("replay_not_running",)},
    body_required=False,
)
async def cancel(request: web.Request) -> web.Response:
    """Stop a running job; the deliveries it replayed stay replayed."""
    ident = request.match_info["id"]
    try:
        return json(await Replays(request.app[STORE]).cancel(ident))
    except ReplayNotRunning as exc:
        if not exc.state:
            raise ApiError(404, "not_found", f"replay {ident} does not exist") from None
        raise ApiError(409, "replay_not_running", str(exc)) from None
