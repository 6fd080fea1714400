"""The consumer portal: static files under ``/portal/`` that a SaaS embeds for its customers.

The page (``relay/ui/portal*``, beside the dashboard's files, sharing ``kit.js``, the
endpoint form ``epform.js`` and the other shared modules) is plain HTML, CSS and JavaScript
ES modules: no build step, nothing
from another origin. It reads its bearer token from the URL fragment (``#token=...``,
which browsers never send to a server), removes it from the address bar at once, keeps
it in memory and in ``sessionStorage``, and calls the ordinary ``/v1`` routes with it;
what the token may see and change is the API's business, not the page's.

The page reads its session (``GET /v1/portal/session``): the app, when it ends, and the
branding the SaaS passed when it opened it (:class:`Branding`: a name, a logo, an accent
colour), which the page applies.

The token is in no request line, no access log and no ``Referer``. Every ``/portal/``
answer carries :func:`security_headers`: ``Referrer-Policy: no-referrer`` and a CSP whose
``frame-ancestors`` is ``RELAY_PORTAL_FRAME_ANCESTORS`` (default ``'none'``: no site may
frame it, and ``X-Frame-Options: DENY`` is sent too; with ancestors set,
``X-Frame-Options`` is left out, since it cannot name an origin). Images may come from
any ``https:`` origin (a branding logo), besides the page's own and ``data:``.
"""

from __future__ import annotations

import base64
import binascii
import re
from importlib import resources
from typing import Annotated
from urllib.parse import urlsplit

from aiohttp import web
from pydantic import BaseModel, Field, field_validator

from relay.api.common import SETTINGS, STORE, ApiError, json, page, route
from relay.api.ui import ui_file_kind
from relay.domain import access
from relay.domain.schema import StrictBody
from relay.settings import Settings

LOGO_URL_MAX = 2048
LOGO_DATA_MAX = 65536
_DATA_LOGO = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml);base64,([A-Za-z0-9+/]+={0,2})")
_COLOUR = re.compile(r"#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})")


class Branding(StrictBody):
    """How the portal presents itself for this session: the SaaS's name, logo and colour."""

    name: Annotated[str | None, Field(min_length=1, max_length=80)] = None
    logo_url: str | None = Field(
        default=None,
        description="an https:// URL (up to 2,048 characters) or a data:image/(png|jpeg|gif|"
        "webp|svg+xml);base64 URL (up to 65,536)",
    )
    accent_color: str | None = Field(default=None, description="#rgb or #rrggbb")

    @field_validator("name")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("name must be printable characters")
        return value

    @field_validator("logo_url")
    @classmethod
    def _logo(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if value.startswith("data:"):
            found = _DATA_LOGO.fullmatch(value)
            if len(value) > LOGO_DATA_MAX or found is None or not _decodes(found[2]):
                raise ValueError(
                    "a data: logo must be data:image/(png|jpeg|gif|webp|svg+xml);base64,... "
                    f"up to {LOGO_DATA_MAX} characters"
                )
            return value
        parts = urlsplit(value)
        if (
            len(value) > LOGO_URL_MAX
            or parts.scheme != "https"
            or not parts.hostname
            or "@" in parts.netloc
            or not value.isprintable()
            or any(c.isspace() or c in "\"'<>" for c in value)
        ):
            raise ValueError(f"logo_url must be an https:// URL up to {LOGO_URL_MAX} characters")
        return value

    @field_validator("accent_color")
    @classmethod
    def _colour(cls, value: str | None) -> str | None:
        if value is not None and not _COLOUR.fullmatch(value):
            raise ValueError("accent_color must be #rgb or #rrggbb")
        return value


def _decodes(data: str) -> bool:
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


class PortalIn(StrictBody):
    branding: Branding | None = None


class PortalSessionOut(BaseModel):
    app: str
    scopes: list[str]
    expires_at: int = Field(description="ms since the epoch")
    branding: Branding | None = Field(description="as passed when the session was opened")


@route(
    "GET",
    "/v1/portal/session",
    summary="The portal session of this token: its app, end and branding",
    operation_id="getPortalSession",
    tag="Tenants",
    responses={200: PortalSessionOut},
    errors={404: ("not_found",)},
)
async def portal_session_info(request: web.Request) -> web.Response:
    """For the portal page, with its own token: the session's app, scopes, ``expires_at``
    and the ``branding`` given to ``POST /v1/apps/{app}/portal``. Any other token (the
    operator's, an API key) is 404 ``not_found``: it has no portal session."""
    token = request.headers.get("Authorization", "").partition(" ")[2].strip()
    session = await request.app[STORE].portal_session(access.token_hash(token))
    if session is None:
        raise ApiError(404, "not_found", "this token is not a portal session's")
    return json(session)


STATIC = {
    "portal.html": "text/html",
    "portal.js": "text/javascript",
    "portal.css": "text/css",
    "kit.js": "text/javascript",
    "epform.js": "text/javascript",
    "app.css": "text/css",
}


def security_headers(settings: Settings) -> dict[str, str]:
    """The headers of every ``/portal/`` answer (page, scripts, style sheets)."""
    ancestors = settings.portal_frame_ancestors or "'none'"
    csp = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: https:; "
        f"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors {ancestors}"
    )
    headers = {
        "Content-Security-Policy": csp,
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
    }
    if not settings.portal_frame_ancestors:
        headers["X-Frame-Options"] = "DENY"  # older browsers, when nothing may embed it
    return headers


async def _static(request: web.Request, name: str, kind: str) -> web.Response:
    data = resources.files("relay").joinpath("ui", name).read_bytes()
    resp = web.Response(body=data, content_type=kind, charset="utf-8")
    resp.headers.update(security_headers(request.app[SETTINGS]))
    return resp


@page("/portal")
async def portal_redirect(request: web.Request) -> web.Response:
    # A fragment stays with the browser across a redirect; nothing to carry here.
    raise web.HTTPFound("/portal/")


@page("/portal/")
async def portal_index(request: web.Request) -> web.Response:
    return await _static(request, "portal.html", "text/html")


@page("/portal/{file}")
async def portal_file(request: web.Request) -> web.Response:
    name = request.match_info["file"]
    kind = ui_file_kind(name, "portal")
    if kind is None:
        raise web.HTTPNotFound()
    return await _static(request, name, kind)
