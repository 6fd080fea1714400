"""The consumer portal: static files under ``/portal/`` that a SaaS embeds for its customers.

The page (``relay/ui/portal*``, beside the dashboard's files, sharing ``kit.js``, the
endpoint form ``epform.js`` and the other shared modules) is plain HTML, CSS and JavaScript
ES modules: no build step, nothing
from another origin. It reads its bearer token from the URL fragment (``#token=...``,
which browsers never send to a server), removes it from the address bar at once, keeps
it in memory and in ``sessionStorage``, and calls the ordinary ``/v1`` routes with it;
what the token may see and change is the API's business, not the page's.

The token is in no request line, no access log and no ``Referer``. Every ``/portal/``
answer carries :func:`security_headers`: ``Referrer-Policy: no-referrer`` and a CSP whose
``frame-ancestors`` is ``RELAY_PORTAL_FRAME_ANCESTORS`` (default ``'none'``: no site may
frame it, and ``X-Frame-Options: DENY`` is sent too; with ancestors set,
``X-Frame-Options`` is left out, since it cannot name an origin).
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from relay.api.common import SETTINGS, page
from relay.api.ui import ui_file_kind
from relay.settings import Settings


def security_headers(settings: Settings) -> dict[str, str]:
    """The headers of every ``/portal/`` answer (page, scripts, style sheets)."""
    ancestors = settings.portal_frame_ancestors or "'none'"
    csp = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
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
