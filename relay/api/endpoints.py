"""``/v1/endpoints``: create, list, read, change, delete, rotate the secret."""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from relay.api.access import pinned_app, scoped_app
from relay.api.common import STORE, ApiError, body, json, query, route
from relay.api.models import (
    EndpointIn,
    EndpointList,
    EndpointOut,
    EndpointPatch,
    EndpointQuery,
    ErrorOut,
    HeadersOut,
    RotatedOut,
    SecretOut,
)
from relay.domain.schema import public_endpoint, public_keys
from relay.endpoints.catalog import UnknownEventTypes
from relay.endpoints.health import Health, previous_secret_expires_at
from relay.endpoints.lifecycle import Lifecycle, RotationTooSoon


def not_found(request: web.Request) -> ApiError:
    return ApiError(404, "not_found", f"endpoint {request.match_info['id']} does not exist")


async def load(request: web.Request) -> dict[str, Any]:
    endpoint = await request.app[STORE].get_endpoint(request.match_info["id"])
    if endpoint is None:
        raise not_found(request)
    return endpoint


@route(
    "POST",
    "/v1/endpoints",
    summary="Create an endpoint",
    body=EndpointIn,
    responses={201: EndpointOut, 422: ErrorOut, 503: ErrorOut},
)
async def create(request: web.Request) -> web.Response:
    data, _ = await body(request, EndpointIn)
    app = pinned_app(request, data.app, "app" in data.model_fields_set, ApiError)
    try:
        endpoint = await Lifecycle(request.app[STORE]).create({**data.model_dump(), "app": app})
    except UnknownEventTypes as exc:
        raise ApiError(422, "unknown_event_type", str(exc)) from None
    return json(public_endpoint(endpoint, with_secret=True), status=201)


async def with_breakers(request: web.Request, endpoints: list[dict[str, Any]]) -> list[dict]:
    return await Health(request.app[STORE]).endpoint_views(endpoints)


@route(
    "GET",
    "/v1/endpoints",
    summary="List endpoints",
    query=EndpointQuery,
    responses={200: EndpointList},
)
async def list_(request: web.Request) -> web.Response:
    q = query(request, EndpointQuery)
    own = scoped_app(request)  # a key lists its own app's only
    if own is not None and q.app not in (None, own):
        return json({"data": []})
    endpoints = await request.app[STORE].list_endpoints(own or q.app)
    return json({"data": await with_breakers(request, endpoints)})


@route(
    "GET",
    "/v1/endpoints/{id}",
    summary="Read an endpoint",
    responses={200: EndpointOut, 404: ErrorOut},
)
async def read(request: web.Request) -> web.Response:
    return json((await with_breakers(request, [await load(request)]))[0])


@route(
    "GET",
    "/v1/endpoints/{id}/secret",
    summary="Read an endpoint's signing secret (ed25519: its public keys)",
    responses={200: SecretOut, 404: ErrorOut},
)
async def read_secret(request: web.Request) -> web.Response:
    return json(signing_key(await load(request)))


def signing_key(endpoint: dict[str, Any]) -> dict[str, Any]:
    """What a receiver verifies with: the hmac ``secret``, or for ed25519 the public keys
    (the ``whsk_`` private key is never in an answer)."""
    if endpoint.get("signing") == "ed25519":
        return public_keys(endpoint)
    return {"secret": endpoint["secret"]}


@route(
    "GET",
    "/v1/endpoints/{id}/headers",
    summary="Read an endpoint's custom headers in clear (other reads mask their values)",
    responses={200: HeadersOut, 404: ErrorOut},
)
async def read_headers(request: web.Request) -> web.Response:
    return json({"headers": (await load(request)).get("headers") or {}})


@route(
    "PATCH",
    "/v1/endpoints/{id}",
    summary="Change an endpoint",
    body=EndpointPatch,
    responses={200: EndpointOut, 404: ErrorOut, 422: ErrorOut, 503: ErrorOut},
)
async def patch(request: web.Request) -> web.Response:
    await load(request)
    data, _ = await body(request, EndpointPatch)
    changes = data.model_dump(exclude_unset=True)
    if changes.get("app") is not None:  # a key cannot move an endpoint to another app
        changes["app"] = pinned_app(request, changes["app"], True, ApiError)
    try:
        endpoint = await Lifecycle(request.app[STORE]).update(request.match_info["id"], changes)
    except UnknownEventTypes as exc:
        raise ApiError(422, "unknown_event_type", str(exc)) from None
    if endpoint is None:
        raise not_found(request)
    return json((await with_breakers(request, [endpoint]))[0])


@route(
    "DELETE",
    "/v1/endpoints/{id}",
    summary="Delete an endpoint",
    responses={204: None, 404: ErrorOut, 503: ErrorOut},
)
async def delete(request: web.Request) -> web.Response:
    await Lifecycle(request.app[STORE]).delete(await load(request))
    return web.Response(status=204)


@route(
    "POST",
    "/v1/endpoints/{id}/rotate-secret",
    summary="Rotate the signing secret or ed25519 key (at most once a minute)",
    responses={200: RotatedOut, 404: ErrorOut, 429: ErrorOut, 503: ErrorOut},
)
async def rotate(request: web.Request) -> web.Response:
    try:
        endpoint = await Lifecycle(request.app[STORE]).rotate_secret(request.match_info["id"])
    except RotationTooSoon as exc:
        error = ApiError(429, "rotation_too_soon", str(exc))
        error.headers["Retry-After"] = str(math.ceil(exc.retry_after_ms / 1000))
        raise error from None
    if endpoint is None:
        raise not_found(request)
    return json(
        {
            **signing_key(endpoint),
            "previous_secret_expires_at": previous_secret_expires_at(endpoint),
        }
    )
