"""Attempts and per-endpoint message states: relay deliveries and their attempt logs as
Svix shows them, and ``resend``, which is relay's replay of one delivery.

An attempt's id is ``atmpt_`` + its delivery's id without ``dlv_`` + ``_`` + its number
in the delivery's attempt log, so ``GET .../attempt/{attempt_id}`` finds it again.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from aiohttp import web
from pydantic import Field

from relay.api.common import STORE, ApiError, json, route
from relay.api.deliveries import cursor_position
from relay.api.svix.applications import POST_HEADERS, TAG
from relay.api.svix.base import (
    ListQuery,
    app_of,
    endpoint_of,
    idempotent,
    iterator_of,
    ms,
    not_found,
    page,
    query,
    refuse,
    when,
)
from relay.api.svix.endpoints import endpoint_out
from relay.api.svix.messages import (
    MessageQuery,
    message_of,
    messages_of,
    status_of,
    walk,
)
from relay.api.svix.models import (
    SvixAttemptOut,
    SvixEndpointMessageOut,
    SvixMessageEndpointOut,
    listing,
)

ATTEMPT = "atmpt_"


def attempt_out(delivery: dict[str, Any], entry: dict[str, Any], url: str) -> dict[str, Any]:
    """One request of a delivery's attempt log as a Svix attempt: a success when its
    outcome was (a 2xx, or a broker's acknowledgement, whose ``responseStatusCode`` is 0,
    as for a request that had no answer)."""
    code = int(entry.get("status_code") or 0)
    ok = entry.get("outcome") == "succeeded"
    return {
        "id": f"{ATTEMPT}{delivery['id'][4:]}_{entry['n']}",
        "msgId": delivery["event_id"],
        "endpointId": delivery["endpoint_id"],
        "url": url,
        "response": str(entry.get("detail") or entry.get("error") or ""),
        "responseStatusCode": code,
        "responseDurationMs": int(entry.get("duration_ms") or 0),
        "status": 0 if ok else 2,
        "statusText": "success" if ok else "fail",
        "triggerType": 0,
        "timestamp": when(entry["at"]),
        "msg": None,
    }


Logged = tuple[dict[str, Any], dict[str, Any], str]  # (delivery, log entry, endpoint url)


async def attempts_of(request: web.Request, delivery_ids: list[str]) -> list[Logged]:
    """Every logged request of these deliveries, newest first."""
    store = request.app[STORE]
    out: list[Logged] = []
    for ident in delivery_ids:
        delivery = await store.get_delivery(ident)
        if delivery is None:
            continue
        endpoint = await store.get_endpoint(delivery["endpoint_id"])
        url = "" if endpoint is None else endpoint["url"]
        out += [(delivery, e, url) for e in delivery.get("attempt_log") or ()]
    return sorted(out, key=lambda t: (t[1]["at"], t[0]["id"], t[1]["n"]), reverse=True)


class AttemptQuery(MessageQuery):
    endpoint_id: Annotated[str | None, Field(max_length=64)] = None
    status_code_class: Annotated[int | None, Field(ge=0, le=500, multiple_of=100)] = Field(
        default=None,
        description="0 (no HTTP status: no answer, or a broker's acknowledgement), 100, 200, "
        "300, 400 or 500",
    )
    with_msg: bool = Field(default=False, description="refused: attempts carry msgId only")


def _narrowed(attempts: list[Logged], q: AttemptQuery) -> list[dict[str, Any]]:
    """The attempts the query's filters keep, as Svix shows them (a 422 for a filter
    relay does not have)."""
    if q.with_msg or q.channel or q.tag:
        raise refuse("with_msg" if q.with_msg else "channel", "relay has no channels or tags")
    types = set((q.event_types or "").split(",")) - {""}
    since = -1 if q.after is None else ms(q.after)
    until = math.inf if q.before is None else ms(q.before)
    out = []
    for delivery, entry, url in attempts:
        attempt = attempt_out(delivery, entry, url)
        code = attempt["responseStatusCode"] // 100 * 100
        if (
            (q.status is None or attempt["status"] == q.status)
            and (q.endpoint_id is None or attempt["endpointId"] == q.endpoint_id)
            and (q.status_code_class is None or code == q.status_code_class)
            and (not types or delivery.get("type") in types)
            and since < entry["at"] < until
        ):
            out.append(attempt)
    return out


@route(
    "GET",
    "/api/v1/app/{app_id}/attempt/msg/{msg_id}",
    summary="List a message's attempts, newest first",
    operation_id="svixListAttemptsByMessage",
    tag=TAG,
    query=AttemptQuery,
    responses={200: listing(SvixAttemptOut)},
)
async def by_message(request: web.Request) -> web.Response:
    """Every request made for the message, to any of its endpoints (``endpoint_id`` and
    ``status`` narrow it)."""
    event = await message_of(request, await app_of(request))
    q = query(request, AttemptQuery)
    attempts = _narrowed(await attempts_of(request, [d["id"] for d in event["deliveries"]]), q)
    start = int(q.iterator) if q.iterator and q.iterator.isdigit() else 0
    chunk = attempts[start : start + q.limit]
    more = start + q.limit < len(attempts)
    return page(chunk, str(start + q.limit) if more else None)


@route(
    "GET",
    "/api/v1/app/{app_id}/attempt/endpoint/{endpoint_id}",
    summary="List an endpoint's attempts, newest first",
    operation_id="svixListAttemptsByEndpoint",
    tag=TAG,
    query=AttemptQuery,
    responses={200: listing(SvixAttemptOut)},
    errors={400: ("invalid_cursor",)},
)
async def by_endpoint(request: web.Request) -> web.Response:
    """The requests made to the endpoint, a page of its deliveries at a time."""
    endpoint = await endpoint_of(request, await app_of(request))
    q = query(request, AttemptQuery)
    rows, at = await request.app[STORE].list_deliveries(
        endpoint_id=endpoint["id"], limit=q.limit, cursor=await cursor_position(request, q.iterator)
    )
    attempts = _narrowed(await attempts_of(request, [r["id"] for r in rows]), q)
    return page(attempts, await iterator_of(request, at))


@route(
    "GET",
    "/api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}",
    summary="Read one attempt",
    operation_id="svixGetAttempt",
    tag=TAG,
    responses={200: SvixAttemptOut},
)
async def read(request: web.Request) -> web.Response:
    """One request of the message's attempt log."""
    event = await message_of(request, await app_of(request))
    ident = request.match_info["attempt_id"]
    mine = [d["id"] for d in event["deliveries"]]
    for delivery, entry, url in await attempts_of(request, mine):
        attempt = attempt_out(delivery, entry, url)
        if attempt["id"] == ident:
            return json(attempt)
    raise not_found("attempt", ident)


@route(
    "GET",
    "/api/v1/app/{app_id}/msg/{msg_id}/endpoint",
    summary="List the endpoints a message goes to, with its state at each",
    operation_id="svixListAttemptedDestinations",
    tag=TAG,
    query=ListQuery,
    responses={200: listing(SvixMessageEndpointOut)},
)
async def destinations(request: web.Request) -> web.Response:
    """Each endpoint the message has a delivery to, with that delivery's status and
    next attempt (a deleted endpoint is left out)."""
    event = await message_of(request, await app_of(request))
    query(request, ListQuery)  # one page: an event has at most 1,024 deliveries
    store = request.app[STORE]
    out = []
    for d in event["deliveries"]:
        endpoint = await store.get_endpoint(d["endpoint_id"])
        delivery = await store.get_delivery(d["id"], with_log=False)
        if endpoint is not None and delivery is not None:
            out.append({**endpoint_out(endpoint), **status_of(delivery)})
    return page(out, None)


@route(
    "GET",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}/msg",
    summary="List the messages sent to an endpoint, with their state there",
    operation_id="svixListAttemptedMessages",
    tag=TAG,
    query=MessageQuery,
    responses={200: listing(SvixEndpointMessageOut)},
    errors={400: ("invalid_cursor",), 422: ("unsupported",)},
)
async def attempted_messages(request: web.Request) -> web.Response:
    """The endpoint's deliveries, newest first, each as its message and its status."""
    app = await app_of(request)
    endpoint = await endpoint_of(request, app)
    q = query(request, MessageQuery)
    rows, iterator = await walk(request, app, q, endpoint["id"])
    messages = await messages_of(request, rows, q.with_content)
    data = [{**m, **status_of(r)} for m, r in zip(messages, rows, strict=True)]
    return page(data, iterator)


@route(
    "POST",
    "/api/v1/app/{app_id}/msg/{msg_id}/endpoint/{endpoint_id}/resend",
    summary="Send a message to one endpoint again",
    operation_id="svixResendMessage",
    tag=TAG,
    headers=POST_HEADERS,
    body_required=False,
    responses={202: None},
    errors={409: ("delivery_not_replayable", "conflict", "idempotency_key_reused")},
)
@idempotent
async def resend(request: web.Request) -> web.Response:
    """relay's replay of the message's delivery to the endpoint: a ``dead`` or
    ``succeeded`` one goes back to pending with a fresh attempt budget; one still on its
    way is 409 ``delivery_not_replayable``."""
    app = await app_of(request)
    event = await message_of(request, app)
    endpoint = await endpoint_of(request, app)
    mine = [d["id"] for d in event["deliveries"] if d["endpoint_id"] == endpoint["id"]]
    if not mine:
        raise not_found("message destination", endpoint["id"])
    result = (await request.app[STORE].replay(mine[:1]))[mine[0]]
    if result != "ok":
        raise ApiError(
            409,
            "delivery_not_replayable",
            f"the message's delivery to {endpoint['id']} is {result or 'gone'}; only a dead "
            "or succeeded one is sent again",
        )
    return json({}, status=202)
