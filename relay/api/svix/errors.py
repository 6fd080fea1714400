"""Error answers of ``/api/v1/`` in the shape the Svix SDKs read.

Svix answers ``{"code": ..., "detail": text}`` with a 4xx, and a 422 with ``detail`` a
list of ``{"loc": [...], "msg": ..., "type": ...}`` (the SDKs raise ``HttpError`` and
``HTTPValidationError`` from them). Handlers and the shared middleware raise relay's
own ``ApiError`` (``{"error", "message", "details"}``); :func:`translate` rewrites it,
keeping its status and headers (``Retry-After``, ``Allow``).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

PREFIX = "/api/v1/"


class SvixError(web.HTTPException):
    """An error answer of ``/api/v1/``: ``{"code", "detail"}`` with its status."""

    def __init__(self, status: int, data: dict[str, Any]) -> None:
        self.status_code = status
        super().__init__(text=orjson.dumps(data).decode(), content_type="application/json")


def _loc(field: str) -> list[str]:
    parts = [p for p in field.split(".") if p]
    if parts[:1] in (["body"], ["query"], ["path"], ["header"]):
        return parts
    return ["body", *parts]


def shape(status: int, data: dict[str, Any]) -> dict[str, Any]:
    """relay's error body ``data`` as Svix's: 422 with a ``detail`` list, else a text."""
    code = str(data.get("error", "error"))
    message = str(data.get("message", ""))
    if status != 422:
        return {"code": code, "detail": message}
    details = data.get("details") or [{"field": "body", "message": message}]
    return {
        "code": code,
        "detail": [
            {"loc": _loc(str(d["field"])), "msg": d["message"], "type": code} for d in details
        ],
    }


def translate(exc: web.HTTPException) -> web.HTTPException:
    """``exc`` (a JSON 4xx or 5xx of relay's) in Svix's shape; other answers unchanged."""
    if exc.status < 400 or exc.content_type != "application/json" or exc.text is None:
        return exc
    try:
        data = orjson.loads(exc.text)
    except orjson.JSONDecodeError:
        return exc
    if not isinstance(data, dict) or "error" not in data:
        return exc
    out = SvixError(exc.status, shape(exc.status, data))
    for name in ("Retry-After", "Allow", "Accept-Encoding"):
        if name in exc.headers:
            out.headers[name] = exc.headers[name]
    if exc.keep_alive is False:
        out.force_close()
    return out
