"""``/v1/endpoints``: create, list, read, change, delete, rotate the secret."""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from relay.api.access import pinned_app, scoped_app
from relay.api.common import STORE, ApiError, body, headers_refused, json, query, route
from relay.api.models import (
    EndpointIn,
    EndpointList,
    EndpointOut,
    EndpointPatch,
    EndpointQuery,
    HeadersOut,
    RotatedOut,
    SecretOut,
    UrlOut,
)
from relay.domain.schema import HeadersOnBroker, public_endpoint, public_keys
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
    operation_id="createEndpoint",
    tag="Endpoints",
    body=EndpointIn,
    responses={201: EndpointOut},
    errors={
        422: ("filter_invalid", "unknown_event_type"),
        503: ("replication_timeout",),
    },
    examples={
        "orders": (
            "Every order event, signed with HMAC",
            {"url": "https://hooks.example.com/relay", "event_types": ["order.*"]},
        ),
        "filtered": (
            "Large EUR orders only, one at a time per order, at most 50 requests/s",
            {
                "url": "https://billing.example.com/hooks",
                "event_types": ["order.paid"],
                "filter": 'payload.amount >= 1000 && payload.currency == "EUR"',
                "ordering": "key",
                "rate_limit": 50,
            },
        ),
        "ed25519": (
            "Signed with an ed25519 key (Standard Webhooks v1a)",
            {"url": "https://hooks.example.com/relay", "signing": "ed25519"},
        ),
    },
)
async def create(request: web.Request) -> web.Response:
    """An endpoint of ``app`` (default ``default``; an API key's own app) that receives
    the events whose type matches one of ``event_types`` (``*``, ``order.*`` or an exact
    name) and, when set, for which its CEL ``filter`` is true. The answer carries the
    signing ``secret`` (``whsec_...``; with ``"signing": "ed25519"`` the ``public_key``
    instead), the only answer that shows it besides ``/secret`` and ``rotate-secret``."""
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
    operation_id="listEndpoints",
    tag="Endpoints",
    query=EndpointQuery,
    responses={200: EndpointList},
)
async def list_(request: web.Request) -> web.Response:
    """Every endpoint (of ``app`` when given; an API key sees its own app's only), with
    its breaker state. Reads never show a secret and mask custom header values."""
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
    operation_id="getEndpoint",
    tag="Endpoints",
    responses={200: EndpointOut},
)
async def read(request: web.Request) -> web.Response:
    """The endpoint with its breaker state and ``previous_secret_expires_at``; never the
    secret, custom header values masked."""
    return json((await with_breakers(request, [await load(request)]))[0])


@route(
    "GET",
    "/v1/endpoints/{id}/secret",
    summary="Read an endpoint's signing secret (ed25519: its public keys)",
    operation_id="getEndpointSecret",
    tag="Endpoints",
    responses={200: SecretOut},
)
async def read_secret(request: web.Request) -> web.Response:
    """What a receiver verifies with: the HMAC ``secret``, or for an ed25519 endpoint its
    ``public_key`` and the rotated-out keys still signing. The private key never leaves
    relay."""
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
    operation_id="getEndpointHeaders",
    tag="Endpoints",
    responses={200: HeadersOut},
)
async def read_headers(request: web.Request) -> web.Response:
    """The custom headers sent with every request to the endpoint, values in clear."""
    return json({"headers": (await load(request)).get("headers") or {}})


@route(
    "GET",
    "/v1/endpoints/{id}/url",
    summary="Read an endpoint's url with its credentials in clear (other reads mask them)",
    operation_id="getEndpointUrl",
    tag="Endpoints",
    responses={200: UrlOut},
)
async def read_url(request: web.Request) -> web.Response:
    """The url deliveries go to, a broker's password (or NATS token) in clear."""
    return json({"url": (await load(request))["url"]})


@route(
    "PATCH",
    "/v1/endpoints/{id}",
    summary="Change an endpoint",
    operation_id="updateEndpoint",
    tag="Endpoints",
    body=EndpointPatch,
    responses={200: EndpointOut},
    errors={
        422: ("filter_invalid", "unknown_event_type"),
        503: ("replication_timeout",),
    },
    examples={
        "disable": ("Disable it: its deliveries are held until it is enabled", {"enabled": False}),
        "subscriptions": (
            "Change what it subscribes to",
            {"event_types": ["order.paid", "order.refunded"]},
        ),
        "no-filter": ("Remove its filter: every matching event again", {"filter": None}),
    },
)
async def patch(request: web.Request) -> web.Response:
    """Change the fields given, leave the rest. Disabling holds the endpoint's deliveries
    (status ``held``) and enabling resumes them; ``ordering`` applies to events published
    afterwards; ``signing`` cannot change."""
    await load(request)
    data, _ = await body(request, EndpointPatch)
    changes = data.model_dump(exclude_unset=True)
    if changes.get("app") is not None:  # a key cannot move an endpoint to another app
        changes["app"] = pinned_app(request, changes["app"], True, ApiError)
    try:
        endpoint = await Lifecycle(request.app[STORE]).update(request.match_info["id"], changes)
    except UnknownEventTypes as exc:
        raise ApiError(422, "unknown_event_type", str(exc)) from None
    except HeadersOnBroker as exc:
        raise headers_refused(exc) from None
    if endpoint is None:
        raise not_found(request)
    return json((await with_breakers(request, [endpoint]))[0])


@route(
    "DELETE",
    "/v1/endpoints/{id}",
    summary="Delete an endpoint",
    operation_id="deleteEndpoint",
    tag="Endpoints",
    responses={204: None},
    errors={503: ("replication_timeout",)},
)
async def delete(request: web.Request) -> web.Response:
    """The endpoint goes, with its breaker, rate and in-flight state; its waiting
    deliveries become ``dead`` with ``endpoint_deleted``."""
    await Lifecycle(request.app[STORE]).delete(await load(request))
    return web.Response(status=204)


@route(
    "POST",
    "/v1/endpoints/{id}/rotate-secret",
    summary="Rotate the signing secret or ed25519 key (at most once a minute)",
    operation_id="rotateEndpointSecret",
    tag="Endpoints",
    responses={200: RotatedOut},
    errors={429: ("rotation_too_soon",), 503: ("replication_timeout",)},
)
async def rotate(request: web.Request) -> web.Response:
    """A new secret (or key); the old one keeps signing beside it for 24 hours, so each
    request carries a signature per secret still signing (at most two old ones)."""
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
