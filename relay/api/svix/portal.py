"""``POST /api/v1/auth/app-portal-access/{app_id}``: a relay portal session for the
application's customer, as ``POST /v1/apps/{app}/portal`` opens one.

``url`` is relay's portal with the session's token in the fragment; ``token`` is the
session's bearer token (``rp_...``), good on ``/v1`` and ``/api/v1`` for that app.
``readOnly`` (or ``capabilities`` without ``ManageEndpoint``, ``ManageEndpointSecret``)
opens a ``read`` session; ``expiry`` (seconds) is capped by ``RELAY_PORTAL_TTL``.
"""

from __future__ import annotations

from aiohttp import web

from relay.api.apikeys import open_session
from relay.api.common import SETTINGS, body, json, route
from relay.api.svix.applications import POST_HEADERS, TAG, app_or_create
from relay.api.svix.base import idempotent, refuse_set
from relay.api.svix.models import SvixPortalAccessIn, SvixPortalAccessOut

MANAGING = {"ManageEndpoint", "ManageEndpointSecret", "ManageTransformations", "CreateAttempts"}
UNSUPPORTED = {
    "feature_flags": "relay has no feature flags",
    "session_id": "relay's portal sessions end by expiry or by revoking the key that opened them",
}


def scopes_of(data: SvixPortalAccessIn) -> list[str]:
    """``read`` and ``manage``, or ``read`` alone for a read-only session."""
    if data.read_only or (data.capabilities is not None and not MANAGING & set(data.capabilities)):
        return ["read"]
    return ["manage", "read"]


@route(
    "POST",
    "/api/v1/auth/app-portal-access/{app_id}",
    summary="Open a portal session for an application's customer",
    operation_id="svixAppPortalAccess",
    tag=TAG,
    body=SvixPortalAccessIn,
    examples={"read": ("A read-only session", {"readOnly": True})},
    body_required=False,
    headers=POST_HEADERS,
    responses={200: SvixPortalAccessOut},
    errors={
        400: ("public_url_required",),
        409: ("conflict", "idempotency_key_reused"),
        422: ("unsupported",),
    },
)
@idempotent
async def portal_access(request: web.Request) -> web.Response:
    """relay's portal for the application (created first from ``application`` when it
    does not exist): ``url`` opens it, ``token`` is its session's bearer token."""
    data = SvixPortalAccessIn()
    if request.can_read_body:
        data, _ = await body(request, SvixPortalAccessIn)
    refuse_set(data, UNSUPPORTED)
    app = await app_or_create(request, data.application)
    settings = request.app[SETTINGS]
    ttl_s = settings.portal_ttl if data.expiry is None else min(data.expiry, settings.portal_ttl)
    opened = await open_session(request, app, scopes_of(data), int(ttl_s * 1000))
    return json({"url": opened["url"], "token": opened["token"]})
