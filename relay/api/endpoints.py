"""``/v1/endpoints``: create, list, read, change, delete, rotate the secret."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from relay.api.common import STORE, ApiError, body, json, query, route
from relay.api.models import (
    EndpointIn,
    EndpointList,
    EndpointOut,
    EndpointPatch,
    EndpointQuery,
    ErrorOut,
    SecretOut,
)
from relay.domain import signing
from relay.domain.schema import endpoint_record, public_endpoint
from relay.endpoints.health import Health

ROTATION_GRACE_MS = 24 * 3600 * 1000


async def load(request: web.Request) -> dict[str, Any]:
    endpoint = await request.app[STORE].get_endpoint(request.match_info["id"])
    if endpoint is None:
        raise ApiError(404, "not_found", f"endpoint {request.match_info['id']} does not exist")
    return endpoint


@route(
    "POST",
    "/v1/endpoints",
    summary="Create an endpoint",
    body=EndpointIn,
    responses={201: EndpointOut, 422: ErrorOut},
)
async def create(request: web.Request) -> web.Response:
    data, _ = await body(request, EndpointIn)
    endpoint = endpoint_record(**data.model_dump())
    await request.app[STORE].put_endpoint(endpoint)
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
    endpoints = await request.app[STORE].list_endpoints(q.app)
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
    summary="Read an endpoint's signing secret",
    responses={200: SecretOut, 404: ErrorOut},
)
async def read_secret(request: web.Request) -> web.Response:
    return json({"secret": (await load(request))["secret"]})


@route(
    "PATCH",
    "/v1/endpoints/{id}",
    summary="Change an endpoint",
    body=EndpointPatch,
    responses={200: EndpointOut, 404: ErrorOut, 422: ErrorOut},
)
async def patch(request: web.Request) -> web.Response:
    await load(request)
    data, _ = await body(request, EndpointPatch)
    changes = data.model_dump(exclude_unset=True)

    def apply(endpoint: dict[str, Any]) -> dict[str, Any]:
        endpoint.update(changes, updated_at=int(time.time() * 1000))
        if endpoint["enabled"]:
            endpoint.pop("disabled_reason", None)
        return endpoint

    done = await request.app[STORE].update_endpoint(request.match_info["id"], apply)
    if done is None:
        raise ApiError(404, "not_found", f"endpoint {request.match_info['id']} does not exist")
    before, endpoint = done
    if endpoint["enabled"] and not before.get("enabled", True):  # held deliveries resume
        health = Health(request.app[STORE])
        await health.reset_failing(endpoint["id"])
        await health.resume(endpoint["id"])
    return json((await with_breakers(request, [endpoint]))[0])


@route(
    "DELETE",
    "/v1/endpoints/{id}",
    summary="Delete an endpoint",
    responses={204: None, 404: ErrorOut},
)
async def delete(request: web.Request) -> web.Response:
    endpoint = await load(request)
    await request.app[STORE].delete_endpoint(endpoint)
    # Held deliveries come back and, their endpoint gone, are recorded dead.
    await Health(request.app[STORE]).resume(endpoint["id"])
    await request.app[STORE].delete_endpoint_state(endpoint["id"])
    return web.Response(status=204)


@route(
    "POST",
    "/v1/endpoints/{id}/rotate-secret",
    summary="Rotate the signing secret",
    responses={200: SecretOut, 404: ErrorOut},
)
async def rotate(request: web.Request) -> web.Response:
    def rotated(endpoint: dict[str, Any]) -> dict[str, Any]:
        now = int(time.time() * 1000)
        previous = [p for p in endpoint.get("previous_secrets", []) if p["expires_at"] > now]
        previous.append({"secret": endpoint["secret"], "expires_at": now + ROTATION_GRACE_MS})
        endpoint.update(secret=signing.generate_secret(), previous_secrets=previous, updated_at=now)
        return endpoint

    done = await request.app[STORE].update_endpoint(request.match_info["id"], rotated)
    if done is None:
        raise ApiError(404, "not_found", f"endpoint {request.match_info['id']} does not exist")
    return json({"secret": done[1]["secret"]})
