"""Shared parts of the HTTP API: app keys, errors, request parsing, the route table.

Routes are declared with :func:`route`, naming the models that validate their input
and describe their answers; the OpenAPI document is generated from that table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError
from pydantic import BaseModel, ValidationError

from relay.api import access, bodies
from relay.api.svix import errors as svix_errors
from relay.archive.history import History
from relay.archive.tables import ArchiveUnavailable
from relay.domain import jsonlimits
from relay.domain.schema import refusal
from relay.endpoints.cache import EndpointCache
from relay.endpoints.catalog import EventTypeCache
from relay.publishing import Publisher
from relay.queue.errors import ReplicationTimeout, is_unavailable
from relay.queue.store import Store
from relay.sandbox import SandboxUnavailable
from relay.settings import Settings

log = structlog.get_logger("relay.api")

STORE = web.AppKey("store", Store)
HISTORY = web.AppKey("history", History)  # reads over Redis and the archive
ENDPOINT_CACHE = web.AppKey("endpoint_cache", EndpointCache)
EVENT_TYPE_CACHE = web.AppKey("event_type_cache", EventTypeCache)
PUBLISHER = web.AppKey("publisher", Publisher)
SETTINGS = web.AppKey("settings", Settings)

REQUEST_OVERHEAD = 64 * 1024  # room for the envelope around the largest payload

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class ApiError(web.HTTPException):
    """An error answer: ``{"error": code, "message": text}`` with a 4xx status."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        self.status_code = status
        # text=, not body=: aiohttp deprecates body= on web exceptions (a warning that
        # tests turn into an error, which would make every 4xx a 500).
        super().__init__(
            text=orjson.dumps({"error": code, "message": message, **extra}).decode(),
            content_type="application/json",
        )


def found(thing: T | None, kind: str, ident: str) -> T:
    """``thing``, or a 404 ``not_found`` naming the ``kind`` and id that do not exist."""
    if thing is None:
        raise ApiError(404, "not_found", f"{kind} {ident} does not exist")
    return thing


def headers_refused(exc: ValueError) -> ApiError:
    """The 422 of a write that would give a broker endpoint custom headers
    (relay.domain.schema.HeadersOnBroker), as a refused field reads."""
    return ApiError(
        422, "validation_error", str(exc), details=[{"field": "headers", "message": str(exc)}]
    )


def json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def validate(model: type[M], data: Any, within: str = "") -> M:
    """``data`` as ``model``, or a 422 naming each field refused (``within``: the part of
    the request the data came from, before each field's name: ``query.limit``)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        text, details = refusal(exc)
        if within:
            details = [{**d, "field": f"{within}.{d['field']}"} for d in details]
        bad_filter = any(e["type"] == "filter_invalid" for e in exc.errors())
        code = "filter_invalid" if bad_filter else "validation_error"
        raise ApiError(422, code, text, details=details) from None


def max_request_bytes(settings: Settings) -> int:
    """The largest request body the API reads, as sent and as decoded."""
    return settings.max_payload_bytes * 2 + REQUEST_OVERHEAD


async def read_body(request: web.Request) -> bytes:
    """The request's body, its Content-Encoding decoded (relay.api.bodies); one that has
    not arrived within ``RELAY_BODY_TIMEOUT`` is 408."""
    settings = request.app[SETTINGS]
    try:
        if request.content.is_eof():  # all there already (most bodies): no timer
            raw = await request.read()
        else:
            async with asyncio.timeout(settings.body_timeout):
                raw = await request.read()
    except TimeoutError:
        late = f"request body did not arrive within {settings.body_timeout:g} s"
        raise ApiError(408, "request_timeout", late) from None
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, "payload_too_large", "request body is too large") from None
    except RequestPayloadError:  # its framing broke (chunked): the parser is out of step
        raise ApiError(400, "invalid_body", "request body could not be read") from None
    header = ",".join(request.headers.getall("Content-Encoding", ()))
    try:
        return bodies.decode(header, raw, max_request_bytes(settings))
    except bodies.BodyTooLarge:
        raise ApiError(413, "payload_too_large", "request body is too large") from None
    except bodies.BodyError as exc:
        refused = ApiError(400, "invalid_body", str(exc))
        refused.headers["Accept-Encoding"] = bodies.ACCEPTED
        raise refused from None


async def body(request: web.Request, model: type[M]) -> tuple[M, bytes]:
    """Read, parse and validate a JSON body; returns the model and the raw bytes."""
    raw = await read_body(request)
    if not raw:
        raise ApiError(400, "invalid_json", "request body is empty; send a JSON object")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "invalid_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(422, "validation_error", "request body must be a JSON object")
    try:
        jsonlimits.check(raw, data)
    except jsonlimits.JsonLimitError as exc:
        raise ApiError(422, "validation_error", str(exc)) from None
    return validate(model, data), raw


def query(request: web.Request, model: type[M], within: str = "") -> M:
    return validate(model, dict(request.query), within)


@dataclass
class RouteSpec:
    """One operation of the API. Its handler's docstring is the operation's description."""

    method: str
    path: str
    handler: Handler
    summary: str
    operation_id: str  # unique, camelCase: generated clients name their functions after it
    tag: str  # one of relay.api.openapi.TAGS
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    responses: dict[int, type[BaseModel] | None] = field(default_factory=dict)
    # error codes this route answers beyond the shared ones (relay.api.openapi.shared_errors)
    errors: dict[int, tuple[str, ...]] = field(default_factory=dict)
    examples: dict[str, tuple[str, Any]] = field(default_factory=dict)  # name: (summary, body)
    headers: dict[str, str] = field(default_factory=dict)  # request header: description
    auth: bool = True
    body_required: bool = True  # False: the body may be left out (OpenAPI says so)
    creates: bool = False  # a PUT that creates what it does not find: never 404


ROUTES: list[RouteSpec] = []


def route(
    method: str,
    path: str,
    *,
    summary: str,
    operation_id: str,
    tag: str,
    body: type[BaseModel] | None = None,
    query: type[BaseModel] | None = None,
    responses: dict[int, type[BaseModel] | None] | None = None,
    errors: dict[int, tuple[str, ...]] | None = None,
    examples: dict[str, tuple[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
    auth: bool = True,
    body_required: bool = True,
    creates: bool = False,
) -> Callable[[Handler], Handler]:
    """Declare an operation of the API: routed, and described in the OpenAPI document."""

    def register(handler: Handler) -> Handler:
        ROUTES.append(
            RouteSpec(
                method,
                path,
                handler,
                summary,
                operation_id,
                tag,
                body=body,
                query=query,
                responses=responses or {},
                errors=errors or {},
                examples=examples or {},
                headers=headers or {},
                auth=auth,
                body_required=body_required,
                creates=creates,
            )
        )
        return handler

    return register


def _announce_close(request: web.Request, answer: web.StreamResponse) -> None:
    """An answer sent before the request's body was all received says ``Connection:
    close``: aiohttp reads and drops the rest for a while (``lingering_time``), then
    closes the connection, and a pooled client must not send its next request on it."""
    if not request.content.is_eof() and not answer.prepared:
        answer.force_close()


@dataclass(frozen=True)
class PageSpec:
    path: str
    handler: Handler


PAGES: list[PageSpec] = []


def page(path: str) -> Callable[[Handler], Handler]:
    """A ``GET`` of the dashboard's or the portal's files: served, but no API operation."""

    def register(handler: Handler) -> Handler:
        PAGES.append(PageSpec(path, handler))
        return handler

    return register


@web.middleware
async def errors_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        answer = await _answer(request, handler)
    except web.HTTPException as exc:
        if request.path.startswith(svix_errors.PREFIX):  # the Svix SDKs' error shape
            exc = svix_errors.translate(exc)
        _announce_close(request, exc)
        raise exc from None
    _announce_close(request, answer)
    return answer


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        if request.path.startswith(("/v1/", svix_errors.PREFIX)):
            # who is asking, and may they (relay.api.access: one rule per route)
            await access.authorize(
                request, ApiError, request.app[STORE], request.app[SETTINGS], request.app[HISTORY]
            )
        return await handler(request)
    except ApiError:
        raise
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, "payload_too_large", "request body is too large") from None
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status, "http_error")
            error = ApiError(exc.status, code, exc.reason)
            if "Allow" in exc.headers:  # 405: the methods the route has
                error.headers["Allow"] = exc.headers["Allow"]
            raise error from None
        raise
    except ReplicationTimeout as exc:
        # Written on the primary, not confirmed by RELAY_ACK_REPLICAS replicas in time: not
        # acknowledged. A retry with the same Idempotency-Key writes nothing twice.
        log.warning("api.replication_timeout", path=request.path, error=str(exc))
        late = ApiError(
            503, "replication_timeout", f"not confirmed by enough replicas ({exc}); retry"
        )
        late.headers["Retry-After"] = "1"
        raise late from None
    except ArchiveUnavailable as exc:  # PostgreSQL away: Redis's tier alone would miss rows
        log.warning("api.archive_unavailable", path=request.path, error=str(exc))
        away = ApiError(503, "archive_unavailable", "the history archive does not answer; retry")
        away.headers["Retry-After"] = "1"
        raise away from None
    except SandboxUnavailable:  # no evaluator for filters and schemas: nothing written
        busy = ApiError(503, "unavailable", "filters and schemas cannot be run now; retry shortly")
        busy.headers["Retry-After"] = "1"
        raise busy from None
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        # Redis is down, stalled, read-only (failover), busy, loading or full: nothing was
        # acknowledged, so the client retries (same Idempotency-Key) rather than a 500.
        log.warning("api.redis_unavailable", path=request.path, error=type(exc).__name__)
        unavailable = ApiError(503, "unavailable", "storage is unavailable; retry shortly")
        unavailable.headers["Retry-After"] = "1"
        raise unavailable from None
