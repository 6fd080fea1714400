"""``/api/v1/app/{app_id}/endpoint``: relay endpoints, through the same lifecycle as
``/v1/endpoints`` (create, change, rotate, delete, recover).

Field by field: ``throttleRate`` is ``rate_limit``, ``disabled`` is ``not enabled``,
``eventTypes`` is ``event_types`` (absent or empty: every type), ``headers`` and
``secret`` are relay's own. Endpoint ``uid``, non-empty ``channels`` and ``metadata``
are refused (422 ``unsupported``).
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from relay.api.common import STORE, ApiError, body, headers_refused, json, route
from relay.api.svix.applications import POST_HEADERS, TAG
from relay.api.svix.base import (
    OrderedQuery,
    app_of,
    by_key,
    endpoint_of,
    idempotent,
    ms,
    not_found,
    page,
    query,
    refuse,
    refuse_set,
    relay_fields,
    when,
)
from relay.api.svix.models import (
    SvixEndpointIn,
    SvixEndpointOut,
    SvixEndpointPatch,
    SvixEndpointUpdate,
    SvixHeadersIn,
    SvixHeadersOut,
    SvixHeadersPatchIn,
    SvixRecoverIn,
    SvixRecoverOut,
    SvixSecretOut,
    SvixSecretRotateIn,
    listing,
)
from relay.domain import ids
from relay.domain.schema import EndpointIn, EndpointPatch, HeadersOnBroker
from relay.endpoints.catalog import UnknownEventTypes
from relay.endpoints.lifecycle import Lifecycle, RotationTooSoon

UNSUPPORTED = {
    "uid": "relay endpoints have ids (ep_...) only, no uid",
    "channels": "relay has no channels: subscribe with eventTypes (order.* matches by prefix)",
    "metadata": "relay endpoints have no metadata (use description)",
}


def endpoint_out(endpoint: dict[str, Any]) -> dict[str, Any]:
    """A relay endpoint as Svix shows one."""
    types = endpoint.get("event_types") or ["*"]
    rate = endpoint.get("rate_limit")
    return {
        "id": endpoint["id"],
        "uid": None,
        "url": endpoint["url"],
        "description": endpoint.get("description") or "",
        "throttleRate": None if rate is None else max(1, math.floor(rate)),
        "disabled": not endpoint.get("enabled", True),
        "eventTypes": None if types == ["*"] else types,
        "channels": None,
        "metadata": {},
        "createdAt": when(endpoint["created_at"]),
        "updatedAt": when(endpoint["updated_at"]),
    }


def changes_of(data: SvixEndpointIn | SvixEndpointUpdate | SvixEndpointPatch) -> dict[str, Any]:
    """The relay fields ``data`` sets (what a PATCH of ``/v1/endpoints`` would carry)."""
    refuse_set(data, UNSUPPORTED)
    given = data.model_fields_set
    out: dict[str, Any] = {}
    if "url" in given and data.url is not None:
        out["url"] = data.url
    if "description" in given:
        out["description"] = data.description or ""
    if "throttle_rate" in given:
        out["rate_limit"] = data.throttle_rate
    if "disabled" in given and data.disabled is not None:
        out["enabled"] = not data.disabled
    if "event_types" in given:
        out["event_types"] = data.event_types or ["*"]
    for name in ("headers", "secret"):
        if name in given and getattr(data, name, None) is not None:
            out[name] = getattr(data, name)
    return out


async def _write(request: web.Request, endpoint_id: str, changes: dict[str, Any]) -> web.Response:
    """Change the endpoint through relay's lifecycle (validated as a ``/v1`` PATCH)."""
    fields = relay_fields(EndpointPatch, changes)
    try:
        endpoint = await Lifecycle(request.app[STORE]).update(endpoint_id, fields)
    except UnknownEventTypes as exc:
        raise ApiError(422, "unknown_event_type", str(exc)) from None
    except HeadersOnBroker as exc:
        raise headers_refused(exc) from None
    if endpoint is None:
        raise ApiError(404, "not_found", f"endpoint {endpoint_id} does not exist")
    return json(endpoint_out(endpoint))


@route(
    "POST",
    "/api/v1/app/{app_id}/endpoint",
    summary="Create an endpoint",
    operation_id="svixCreateEndpoint",
    tag=TAG,
    body=SvixEndpointIn,
    examples={
        "orders": (
            "Order events, at most 50 requests/s",
            {
                "url": "https://hooks.example.com/svix",
                "eventTypes": ["order.paid"],
                "throttleRate": 50,
            },
        )
    },
    headers=POST_HEADERS,
    responses={201: SvixEndpointOut},
    errors={
        409: ("conflict", "idempotency_key_reused"),
        422: ("unsupported", "unknown_event_type"),
    },
)
@idempotent
async def create(request: web.Request) -> web.Response:
    """An endpoint of the application, as ``POST /v1/endpoints`` makes one (its secret
    made when none is given; ``GET .../secret`` shows it)."""
    app = await app_of(request)
    data, _ = await body(request, SvixEndpointIn)
    fields = relay_fields(EndpointIn, {**changes_of(data), "app": app})
    try:
        endpoint = await Lifecycle(request.app[STORE]).create(fields)
    except UnknownEventTypes as exc:
        raise ApiError(422, "unknown_event_type", str(exc)) from None
    return json(endpoint_out(endpoint), status=201)


@route(
    "GET",
    "/api/v1/app/{app_id}/endpoint",
    summary="List an application's endpoints",
    operation_id="svixListEndpoints",
    tag=TAG,
    query=OrderedQuery,
    responses={200: listing(SvixEndpointOut)},
)
async def list_(request: web.Request) -> web.Response:
    """The application's endpoints, by id."""
    app = await app_of(request)
    q = query(request, OrderedQuery)
    endpoints = sorted(await request.app[STORE].list_endpoints(app), key=lambda e: e["id"])
    endpoints, iterator = by_key(endpoints, "id", q)
    return page([endpoint_out(e) for e in endpoints], iterator)


@route(
    "GET",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}",
    summary="Read an endpoint",
    operation_id="svixGetEndpoint",
    tag=TAG,
    responses={200: SvixEndpointOut},
)
async def read(request: web.Request) -> web.Response:
    """The endpoint (never its secret: ``.../secret`` shows it)."""
    return json(endpoint_out(await endpoint_of(request, await app_of(request))))


@route(
    "PUT",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}",
    summary="Replace an endpoint's settings",
    operation_id="svixUpdateEndpoint",
    tag=TAG,
    body=SvixEndpointUpdate,
    examples={"all": ("Every event type, enabled", {"url": "https://hooks.example.com/svix"})},
    responses={200: SvixEndpointOut},
    errors={422: ("unsupported", "unknown_event_type")},
)
async def update(request: web.Request) -> web.Response:
    """Every setting given anew (absent ones back to their defaults); an id that does not
    exist is 404: relay makes endpoint ids itself."""
    endpoint = await endpoint_of(request, await app_of(request))
    data, _ = await body(request, SvixEndpointUpdate)
    changes = {"description": "", "rate_limit": None, "enabled": True, "event_types": ["*"]}
    return await _write(request, endpoint["id"], {**changes, **changes_of(data)})


@route(
    "PATCH",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}",
    summary="Change an endpoint",
    operation_id="svixPatchEndpoint",
    tag=TAG,
    body=SvixEndpointPatch,
    examples={"disable": ("Disable it: its deliveries are held", {"disabled": True})},
    responses={200: SvixEndpointOut},
    errors={422: ("unsupported", "unknown_event_type")},
)
async def patch(request: web.Request) -> web.Response:
    """Change the settings given; ``disabled: true`` holds its deliveries as on ``/v1``."""
    endpoint = await endpoint_of(request, await app_of(request))
    data, _ = await body(request, SvixEndpointPatch)
    if data.secret is not None:
        raise refuse("secret", "a secret changes by rotation (POST .../secret/rotate)")
    return await _write(request, endpoint["id"], changes_of(data))


@route(
    "DELETE",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}",
    summary="Delete an endpoint",
    operation_id="svixDeleteEndpoint",
    tag=TAG,
    responses={204: None},
)
async def delete(request: web.Request) -> web.Response:
    """As ``DELETE /v1/endpoints/{id}``: its waiting deliveries become dead."""
    endpoint = await endpoint_of(request, await app_of(request))
    await Lifecycle(request.app[STORE]).delete(endpoint)
    return web.Response(status=204)


@route(
    "GET",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret",
    summary="Read an endpoint's signing secret",
    operation_id="svixGetEndpointSecret",
    tag=TAG,
    responses={200: SvixSecretOut},
    errors={422: ("unsupported",)},
)
async def secret(request: web.Request) -> web.Response:
    """The ``whsec_`` secret the Svix verifier takes (an ed25519 endpoint is 422)."""
    endpoint = await endpoint_of(request, await app_of(request))
    if endpoint.get("signing") == "ed25519":
        raise refuse(
            "signing", "an ed25519 endpoint has public keys: GET /v1/endpoints/{id}/secret"
        )
    return json({"key": endpoint["secret"]})


@route(
    "POST",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret/rotate",
    summary="Rotate an endpoint's signing secret",
    operation_id="svixRotateEndpointSecret",
    tag=TAG,
    body=SvixSecretRotateIn,
    examples={"fresh": ("A secret relay makes", {})},
    body_required=False,
    headers=POST_HEADERS,
    responses={200: SvixSecretOut},
    errors={
        409: ("conflict", "idempotency_key_reused"),
        422: ("unsupported",),
        429: ("rotation_too_soon",),
    },
)
@idempotent
async def rotate(request: web.Request) -> web.Response:
    """A new secret relay makes; the old one keeps signing beside it for 24 hours (each
    request carries a signature per secret), as ``rotate-secret`` on ``/v1``; the answer
    is the new secret."""
    endpoint = await endpoint_of(request, await app_of(request))
    if request.can_read_body:
        data, _ = await body(request, SvixSecretRotateIn)
        refuse_set(
            data,
            {
                "key": "relay makes the new secret itself",
                "grace_period_seconds": "the old secret signs for 24 hours",
            },
        )
    try:
        rotated = await Lifecycle(request.app[STORE]).rotate_secret(endpoint["id"])
    except RotationTooSoon as exc:
        error = ApiError(429, "rotation_too_soon", str(exc))
        error.headers["Retry-After"] = str(math.ceil(exc.retry_after_ms / 1000))
        raise error from None
    if rotated is None:
        raise not_found("endpoint", endpoint["id"])
    return json({"key": rotated["secret"]})


@route(
    "GET",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers",
    summary="Read an endpoint's custom headers",
    operation_id="svixGetEndpointHeaders",
    tag=TAG,
    responses={200: SvixHeadersOut},
)
async def headers(request: web.Request) -> web.Response:
    """The custom headers, values in clear (``sensitive`` is empty)."""
    endpoint = await endpoint_of(request, await app_of(request))
    return json({"headers": endpoint.get("headers") or {}, "sensitive": []})


@route(
    "PUT",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers",
    summary="Replace an endpoint's custom headers",
    operation_id="svixSetEndpointHeaders",
    tag=TAG,
    body=SvixHeadersIn,
    examples={"team": ("One custom header", {"headers": {"x-team": "billing"}})},
    responses={204: None},
)
async def set_headers(request: web.Request) -> web.Response:
    """These headers, and no others, go with every request to the endpoint."""
    endpoint = await endpoint_of(request, await app_of(request))
    data, _ = await body(request, SvixHeadersIn)
    await _write(request, endpoint["id"], {"headers": data.headers})
    return web.Response(status=204)


@route(
    "PATCH",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers",
    summary="Add, change or delete some of an endpoint's custom headers",
    operation_id="svixPatchEndpointHeaders",
    tag=TAG,
    body=SvixHeadersPatchIn,
    examples={
        "team": (
            "Add one, delete another",
            {"headers": {"x-team": "billing"}, "deleteHeaders": ["x-old"]},
        )
    },
    responses={204: None},
)
async def patch_headers(request: web.Request) -> web.Response:
    """``headers`` added or changed, ``deleteHeaders`` removed, the rest kept."""
    endpoint = await endpoint_of(request, await app_of(request))
    data, _ = await body(request, SvixHeadersPatchIn)
    gone = {h.lower() for h in data.delete_headers or ()}
    kept = {k: v for k, v in (endpoint.get("headers") or {}).items() if k.lower() not in gone}
    await _write(request, endpoint["id"], {"headers": {**kept, **data.headers}})
    return web.Response(status=204)


@route(
    "POST",
    "/api/v1/app/{app_id}/endpoint/{endpoint_id}/recover",
    summary="Send an endpoint's failed messages again",
    operation_id="svixRecoverEndpoint",
    tag=TAG,
    body=SvixRecoverIn,
    examples={"since": ("What died since a time", {"since": "2026-12-01T00:00:00Z"})},
    headers=POST_HEADERS,
    responses={202: SvixRecoverOut},
    errors={409: ("conflict", "idempotency_key_reused")},
)
@idempotent
async def recover(request: web.Request) -> web.Response:
    """Every dead delivery of the endpoint that died in ``[since, until)`` back to
    pending, in the order they died (relay's recover); done when it answers."""
    endpoint = await endpoint_of(request, await app_of(request))
    data, _ = await body(request, SvixRecoverIn)
    until = None if data.until is None else ms(data.until)
    sent, _ = await request.app[STORE].replay_dead(
        endpoint_id=endpoint["id"], since=ms(data.since), until=until
    )
    now = await request.app[STORE].now_ms()
    return json(
        {
            "id": ids.new_id("qtask"),
            "status": "finished",
            "task": "endpoint.recover",
            "updatedAt": when(now),
            "data": {"messagesSent": sent},
        },
        status=202,
    )
