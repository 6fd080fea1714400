"""Errors aiohttp answers before any relay code runs, in relay's error format.

A malformed request line or header (a DEL byte after the token, a header line too long)
is refused by aiohttp's parser, which by default answers ``text/plain`` and logs the
exception, whose message quotes the raw header: an ``Authorization`` value included.
:func:`install` replaces that answer with ``{"error", "message"}`` JSON and a log line
that names the status and the error class only: nothing the client sent reaches a log.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import orjson
import structlog
from aiohttp import web, web_protocol

log = structlog.get_logger("relay.api")

_CODES = {
    400: "bad_request",
    413: "payload_too_large",
    414: "uri_too_long",
    431: "header_too_large",
    500: "internal_error",
}
_MESSAGES = {
    400: "malformed HTTP request (request line or a header)",
    500: "internal error",
}


def _handle_error(
    self: web_protocol.RequestHandler,
    request: Any,
    status: int = 500,
    exc: BaseException | None = None,
    message: str | None = None,
) -> web.StreamResponse:
    error = type(exc).__name__ if exc is not None else None
    if status >= 500:
        # a bug in a handler: its traceback is wanted (it does not hold the headers)
        log.error("api.internal_error", status=status, error=error, exc_info=exc)
    else:  # the parser's message quotes the raw request: never logged
        log.warning("api.bad_request", status=status, error=error)
    if request.writer.output_size > 0:  # some of an answer went out: the connection is done
        raise ConnectionError("response already started; cannot send the error answer")
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    text = _MESSAGES.get(status, phrase.lower())
    resp = web.Response(
        status=status,
        body=orjson.dumps({"error": _CODES.get(status, "http_error"), "message": text}),
        content_type="application/json",
    )
    resp.force_close()
    # said even to an HTTP/1.0 answer (the parser's stand-in request is HTTP/1.0)
    resp.headers["Connection"] = "close"
    return resp


def install() -> None:
    """Use :func:`_handle_error` for every aiohttp server of this process (idempotent)."""
    web_protocol.RequestHandler.handle_error = _handle_error  # type: ignore[method-assign,assignment]
