"""``/docs/``: the documentation site, served by ``relay api`` from where ``make docs``
builds it (``build/site`` of the checkout), so the dashboard's Docs link opens the docs of
the version that runs. Without a built site (an installed wheel, the image) ``/docs/`` is a
404 that says how to build it. Only files inside the site are served.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from relay.api.common import ApiError, page

SITE = Path(__file__).resolve().parents[2] / "build" / "site"


@page("/docs")
async def docs_redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/docs/")


@page("/docs/{path:.*}")
async def docs_file(request: web.Request) -> web.StreamResponse:
    root = SITE.resolve()
    if not (root / "index.html").is_file():
        raise ApiError(404, "not_found", "the documentation is not built here: run `make docs`")
    target = (root / request.match_info["path"]).resolve()
    if target.is_dir():
        target = target / "index.html"
    if root not in target.parents or not target.is_file():
        raise ApiError(404, "not_found", f"no page {request.path}")
    return web.FileResponse(target, headers={"X-Content-Type-Options": "nosniff"})
