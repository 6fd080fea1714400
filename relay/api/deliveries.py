"""``/v1/deliveries``: read, list, replay; and recovery of an endpoint's dead letters."""

from __future__ import annotations

from aiohttp import web

from relay.api.access import scoped_app
from relay.api.common import HISTORY, STORE, ApiError, body, found, json, query, route
from relay.api.endpoints import load as load_endpoint
from relay.api.models import (
    DeliveryDetail,
    DeliveryList,
    DeliveryQuery,
    DiscardOut,
    RecoverIn,
    RecoverOut,
    ReplayOut,
    UiDeliveryQuery,
)
from relay.domain import cursors
from relay.endpoints.health import Health
from relay.queue.store import Store


@route(
    "GET",
    "/v1/deliveries",
    summary="List deliveries, newest first",
    operation_id="listDeliveries",
    tag="Deliveries",
    query=DeliveryQuery,
    responses={200: DeliveryList},
    errors={400: ("invalid_cursor",), 503: ("archive_unavailable",)},
)
async def list_(request: web.Request) -> web.Response:
    """A page of deliveries, newest first, each saying why it waits when it does;
    ``next_cursor`` continues. A rare filter may return a short page with a cursor."""
    return await listing(request, DeliveryQuery)


async def listing(
    request: web.Request, model: type[DeliveryQuery | UiDeliveryQuery]
) -> web.Response:
    """One page of deliveries for a query of ``model`` (the API's, or the dashboard's).
    The cursor is sealed for the caller's scope (:mod:`relay.domain.cursors`)."""
    q = query(request, model)
    store = request.app[STORE]
    app = scoped_app(request)  # a key lists its own app's only
    try:
        rows, at = await request.app[HISTORY].list_deliveries(
            status=q.status,
            endpoint_id=q.endpoint_id,
            event_id=getattr(q, "event_id", None),
            event_type=q.type,
            limit=q.limit,
            cursor=await cursor_position(request, q.cursor),
            app=app,
        )
    except ValueError:  # a position relay sealed but cannot read: its own older format
        raise invalid_cursor() from None
    await Health(store).explain_waits(rows)
    return json({"data": rows, "next_cursor": await sealed(request, at)})


async def sealed(request: web.Request, position: str | None) -> str | None:
    """The cursor handed out for a listing's position (None: the end), sealed for the
    caller's scope."""
    if position is None:
        return None
    return cursors.seal(await request.app[STORE].cursor_key(), scoped_app(request), position)


def invalid_cursor() -> ApiError:
    return ApiError(
        400, "invalid_cursor", "cursor is not one relay made for this caller; list from the start"
    )


async def cursor_position(request: web.Request, cursor: str | None) -> str | None:
    """The position a sealed cursor holds, or 400 ``invalid_cursor``."""
    if not cursor:
        return None
    store, app = request.app[STORE], scoped_app(request)
    key = await store.cursor_key()
    try:
        return cursors.unseal(key, app, cursor)
    except cursors.InvalidCursor:
        fresh = await store.cursor_key(fresh=True)  # sealed with a key made since?
        if fresh == key:
            raise invalid_cursor() from None
    try:
        return cursors.unseal(fresh, app, cursor)
    except cursors.InvalidCursor:
        raise invalid_cursor() from None


@route(
    "GET",
    "/v1/deliveries/{id}",
    summary="Read a delivery with its attempt log",
    operation_id="getDelivery",
    tag="Deliveries",
    responses={200: DeliveryDetail},
    errors={503: ("archive_unavailable",)},
)
async def read(request: web.Request) -> web.Response:
    """The delivery with its ``attempt_log`` (one entry per request: number, time,
    duration, status or error, worker) and ``waiting``: why it is not going out now."""
    ident = request.match_info["id"]
    delivery = found(await request.app[HISTORY].get_delivery(ident), "delivery", ident)
    await Health(request.app[STORE]).explain_waits([delivery])
    return json(delivery)


@route(
    "POST",
    "/v1/deliveries/{id}/replay",
    summary="Replay a dead or succeeded delivery",
    operation_id="replayDelivery",
    tag="Deliveries",
    responses={202: ReplayOut},
    errors={409: ("delivery_not_replayable",), 503: ("replication_timeout",)},
)
async def replay(request: web.Request) -> web.Response:
    """Back to ``pending`` with a fresh attempt budget. A dead head blocking its ordered
    lane is retried in place; any other delivery of a lane goes to its back."""
    delivery_id = request.match_info["id"]
    result = (await request.app[HISTORY].replay([delivery_id]))[delivery_id]
    if result == "ok":
        return json({"id": delivery_id, "status": "pending"}, status=202)
    result = await _shown_status(request.app[STORE], delivery_id, result)
    raise _refused(delivery_id, result, "replayable", "only dead or succeeded can be replayed")


@route(
    "POST",
    "/v1/deliveries/{id}/discard",
    summary="Discard a dead delivery; a dead head blocking its ordered lane lets it go on",
    operation_id="discardDelivery",
    tag="Deliveries",
    responses={202: DiscardOut},
    errors={409: ("delivery_not_discardable",), 503: ("replication_timeout",)},
)
async def discard(request: web.Request) -> web.Response:
    """The dead delivery is given up (it stays a dead letter, with ``discarded_at``);
    when it blocks its ordered lane, the lane goes on with the next one."""
    delivery_id = request.match_info["id"]
    result = (await request.app[STORE].discard([delivery_id]))[delivery_id]
    if result == "ok":
        d = await request.app[STORE].get_delivery(delivery_id, with_log=False)
        at = d.get("discarded_at") if d else None
        return json({"id": delivery_id, "status": "dead", "discarded_at": at}, status=202)
    result = await _shown_status(request.app[STORE], delivery_id, result)
    raise _refused(delivery_id, result, "discardable", "only dead deliveries can be discarded")


async def _shown_status(store: Store, delivery_id: str, status: str) -> str:
    """The status a read shows for a script's refusal: a stored ``pending`` may read
    ``scheduled`` (derived from its event's ``deliver_at``)."""
    if status != "pending":
        return status
    row = await store.get_delivery(delivery_id, with_log=False)
    return str(row["status"]) if row is not None else status


def _refused(delivery_id: str, status: str, what: str, rule: str) -> ApiError:
    """A per-id script's refusal: "" (no such delivery) is 404, any other status 409."""
    if status == "":
        return ApiError(404, "not_found", f"delivery {delivery_id} does not exist")
    return ApiError(
        409,
        f"delivery_not_{what}",
        f"delivery {delivery_id} is {status}; {rule}",
        current_status=status,
    )


@route(
    "POST",
    "/v1/endpoints/{id}/recover",
    summary="Replay an endpoint's dead deliveries",
    operation_id="recoverEndpoint",
    tag="Endpoints",
    body=RecoverIn,
    body_required=False,  # no body: every dead delivery of the endpoint
    responses={202: RecoverOut},
    errors={503: ("replication_timeout",)},
    examples={"since": ("Those that died since a time (ms)", {"since": 1767225600000})},
)
async def recover(request: web.Request) -> web.Response:
    """Every dead delivery of the endpoint (or those that died since ``since``) back to
    ``pending``, in the order they died."""
    endpoint = await load_endpoint(request)
    since = None
    if request.can_read_body:
        since = (await body(request, RecoverIn))[0].since
    recovered, _ = await request.app[HISTORY].replay_dead(endpoint_id=endpoint["id"], since=since)
    return json({"recovered": recovered}, status=202)
