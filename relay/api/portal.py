"""``/portal/``: the page an app's customer opens with a portal session URL.

The page (its content is the portal's own work) reads its token from the URL fragment
(``#token=rp_...``), which browsers never send to a server: the token is in no request
line, no access log and no ``Referer``. It then calls the ``/v1`` API with
``Authorization: Bearer <token>``. Every ``/portal/`` answer carries
:func:`security_headers`: ``Referrer-Policy: no-referrer`` and a CSP whose
``frame-ancestors`` is ``RELAY_PORTAL_FRAME_ANCESTORS`` (``'none'`` by default: the page
may be embedded only in the sites the operator names).
"""

from __future__ import annotations

from aiohttp import web

from relay.api.common import SETTINGS, route
from relay.settings import Settings

PLACEHOLDER = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>relay portal</title></head>
<body><h1>relay portal</h1><p>The portal page is not built into this version.</p></body>
</html>
"""


def security_headers(settings: Settings) -> dict[str, str]:
    """The headers of every ``/portal/`` answer (page, script, style sheet)."""
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


@route("GET", "/portal/", summary="The portal page (a portal session URL opens it)", auth=False)
async def portal_index(request: web.Request) -> web.Response:
    resp = web.Response(body=PLACEHOLDER, content_type="text/html", charset="utf-8")
    resp.headers.update(security_headers(request.app[SETTINGS]))
    return resp
