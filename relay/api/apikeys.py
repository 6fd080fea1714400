"""``/v1/api-keys`` (the operator's), ``/v1/apps/{app}/portal`` (portal sessions) and
``/v1/endpoints/{id}/test`` (a test event to one endpoint, the portal's "send a test").

Who may call them is in :mod:`relay.api.access`; the answer models live here, beside
the routes, as they are these routes' only.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import BaseModel, Field, TypeAdapter, ValidationError, field_validator

from relay.api.access import principal
from relay.api.common import PUBLISHER, SETTINGS, STORE, ApiError, body, json, query, route
from relay.api.endpoints import load as load_endpoint
from relay.api.models import EventOut
from relay.api.portal import Branding, PortalIn
from relay.domain import access
from relay.domain.schema import App, EventIn, Strict, StrictBody
from relay.publishing import Publisher, PublishError

Scope = Literal["publish", "read", "manage"]
TEST_EVENT_TYPE = "relay.test"
APP_NAME: TypeAdapter[str] = TypeAdapter(App)


class ApiKeyIn(StrictBody):
    app: App
    scopes: Annotated[list[Scope], Field(min_length=1, max_length=3)]
    name: Annotated[str, Field(max_length=200)] = ""

    @field_validator("scopes")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("scopes must not repeat")
        return value


class ApiKeyOut(BaseModel):
    id: str = Field(description="key_...")
    app: str
    scopes: list[Scope]
    name: str | None
    created_at: int = Field(description="ms since the epoch")


class ApiKeyCreated(ApiKeyOut):
    token: str = Field(description="the bearer token (rk_...), shown in this answer only")


class ApiKeyList(BaseModel):
    data: list[ApiKeyOut]


class ApiKeyQuery(Strict):
    app: App | None = None


class PortalOut(BaseModel):
    url: str = Field(description="/portal/#token=...: the token in the fragment only")
    token: str = Field(description="rp_...: a bearer token for the app, read and manage")
    expires_at: int = Field(description="ms since the epoch (RELAY_PORTAL_TTL from now)")
    branding: Branding | None = Field(description="as given; the page applies it")


@route(
    "POST",
    "/v1/api-keys",
    summary="Create an API key of one app (its token is shown once)",
    operation_id="createApiKey",
    tag="Tenants",
    body=ApiKeyIn,
    responses={201: ApiKeyCreated},
    errors={409: ("conflict",), 503: ("replication_timeout",)},
    examples={
        "backend": (
            "A key for the shop's backend: publish its events, read its deliveries",
            {"app": "shop", "scopes": ["publish", "read"], "name": "shop backend"},
        ),
    },
)
async def create(request: web.Request) -> web.Response:
    """A key of one app with some of the scopes ``publish``, ``read`` and ``manage``
    (which includes ``read``). Its ``token`` (``rk_...``) is in this answer only; relay
    keeps its SHA-256."""
    data, _ = await body(request, ApiKeyIn)
    token = access.new_token(access.KEY_TOKEN_PREFIX)
    key_id = access.new_key_id()
    scopes: list[str] = [s for s in access.SCOPES if s in data.scopes]
    created = await request.app[STORE].create_api_key(
        key_id=key_id,
        app=data.app,
        scopes=scopes,
        name=data.name,
        token_hash=access.token_hash(token),
    )
    if not created:  # 96 random bits of id, 256 of token: not seen in practice
        raise ApiError(409, "conflict", "key id taken; retry")
    answer = {
        "id": key_id,
        "app": data.app,
        "scopes": scopes,
        "name": data.name or None,
        "created_at": created,
        "token": token,
    }
    return json(answer, status=201)


@route(
    "GET",
    "/v1/api-keys",
    summary="List API keys (never their tokens)",
    operation_id="listApiKeys",
    tag="Tenants",
    query=ApiKeyQuery,
    responses={200: ApiKeyList},
)
async def list_(request: web.Request) -> web.Response:
    """Every API key (of ``app`` when given), newest first; never a token."""
    q = query(request, ApiKeyQuery)
    return json({"data": await request.app[STORE].list_api_keys(q.app)})


@route(
    "DELETE",
    "/v1/api-keys/{id}",
    summary="Revoke an API key: its next request is 401, on every API replica",
    operation_id="revokeApiKey",
    tag="Tenants",
    responses={204: None},
    errors={503: ("replication_timeout",)},
)
async def revoke(request: web.Request) -> web.Response:
    """The key and every portal session it opened stop working at once, on every API
    replica (nothing is cached)."""
    ident = request.match_info["id"]
    if not await request.app[STORE].revoke_api_key(ident):
        raise ApiError(404, "not_found", f"api key {ident} does not exist")
    return web.Response(status=204)


def base_url(request: web.Request) -> str:
    """``RELAY_PUBLIC_URL``; unset, the request's own scheme and Host, when that Host is a
    loopback ``host[:port]`` (else 400 ``public_url_required``: a Host is the client's
    word, and a link built from it could send the token to another site)."""
    public = request.app[SETTINGS].public_url
    if public:
        return public
    host = request.headers.get("Host", "")
    if not access.loopback_host(host):
        raise ApiError(
            400,
            "public_url_required",
            "RELAY_PUBLIC_URL is not set and this request's Host is not a loopback "
            "host[:port]; set RELAY_PUBLIC_URL to the API's public base URL",
        )
    return f"{request.scheme}://{host}"


@route(
    "POST",
    "/v1/apps/{app}/portal",
    summary="Open a portal session for one app: a URL for the app's customer",
    operation_id="createPortalSession",
    tag="Tenants",
    body=PortalIn,
    responses={201: PortalOut},
    examples={
        "branded": (
            "A session of the app shop, branded with the SaaS's name, logo and colour",
            {
                "branding": {
                    "name": "Acme Webhooks",
                    "logo_url": "https://acme.example/logo.svg",
                    "accent_color": "#0a7cff",
                }
            },
        ),
        "plain": ("A session without branding", {}),
    },
    errors={
        400: ("public_url_required",),
        422: ("validation_error",),
        503: ("replication_timeout",),
    },
    body_required=False,
)
async def portal_session(request: web.Request) -> web.Response:
    """A session of the app with ``read`` and ``manage`` for ``RELAY_PORTAL_TTL`` (1 h),
    and the portal's ``url`` with its token in the fragment (``#token=rp_...``), which a
    browser never sends to a server. The operator's, or a ``manage`` key's of that app.
    The body (optional) may pass ``branding``: a name, a logo and an accent colour the
    portal page shows; kept with the session and ended with it."""
    app = request.match_info["app"]
    try:
        APP_NAME.validate_python(app)  # the same app name rule as everywhere
    except ValidationError:
        raise ApiError(422, "validation_error", f"app: {app!r} is not an app name") from None
    given = (await body(request, PortalIn))[0] if request.can_read_body else PortalIn()
    branding = given.branding.model_dump(exclude_none=True) if given.branding else None
    settings = request.app[SETTINGS]
    opened = await open_session(
        request, app, sorted(access.PORTAL_SCOPES), int(settings.portal_ttl * 1000), branding
    )
    return json(opened, status=201)


async def open_session(
    request: web.Request,
    app: str,
    scopes: list[str],
    ttl_ms: int,
    branding: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A portal session of ``app``: ``url`` (the token in the fragment), ``token``,
    ``expires_at`` and the ``branding`` it was opened with (None: none). Opened by a key,
    it ends when that key is revoked."""
    base = base_url(request)  # before anything is written
    who = principal(request)
    token = access.new_token(access.PORTAL_TOKEN_PREFIX)
    expires_at = await request.app[STORE].create_portal_session(
        session_id=access.new_portal_id(),
        app=app,
        scopes=scopes,
        token_hash=access.token_hash(token),
        ttl_ms=ttl_ms,
        opened_by=None if who.is_admin else who.id,  # revoking that key ends the session
        branding=branding or None,
    )
    url = f"{base}/portal/#token={token}"
    return {"url": url, "token": token, "expires_at": expires_at, "branding": branding or None}


@route(
    "POST",
    "/v1/endpoints/{id}/test",
    summary="Send a relay.test event to this one endpoint (whatever its event types)",
    operation_id="sendTestEvent",
    tag="Endpoints",
    responses={201: EventOut},
    errors={409: ("endpoint_disabled",), 503: ("replication_timeout",)},
    body_required=False,
)
async def send_test(request: web.Request) -> web.Response:
    """Publish a ``relay.test`` event to this endpoint only, whatever its ``event_types``
    and filter: the portal's "send a test"."""
    endpoint = await load_endpoint(request)
    if not endpoint.get("enabled", True):
        raise ApiError(409, "endpoint_disabled", f"endpoint {endpoint['id']} is disabled")
    # this endpoint only, subscribed or not, its payload filter aside
    target = {**endpoint, "event_types": ["*"], "filter": None}

    async def only(app: str) -> list[dict[str, Any]]:
        return [target]

    event = EventIn(
        type=TEST_EVENT_TYPE,
        payload={"test": True, "endpoint_id": endpoint["id"], "sent_at": int(time.time() * 1000)},
        app=endpoint["app"],
        endpoint_ids=[endpoint["id"]],
    )
    # relay's own event (a fixed type and payload): an endpoint of the ops app gets it too
    publisher = Publisher(
        request.app[STORE], only, judge=request.app[PUBLISHER].judge, relay_events=True
    )
    try:
        done = await publisher.publish(event)
    except PublishError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None
    return json(done.answer, status=201)
