"""Shared parts of the ``/api/v1`` handlers: the app a path names, refusals, list
envelopes and iterators, and the ``idempotency-key`` every POST carries."""

from __future__ import annotations

import functools
import hashlib
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel, Field, ValidationError

from relay.api import common
from relay.api.access import principal, scoped_app
from relay.api.common import STORE, ApiError, Handler, M, json, read_body
from relay.api.svix.models import CamelIn
from relay.domain import cursors, signing
from relay.domain.schema import Strict, refusal

IDEMPOTENCY_HEADER = "idempotency-key"
IDEMPOTENCY_DOC = (
    "1-256 printable characters (the SDKs send auto_<uuid>). The same key with the same "
    "request answers the first answer again; with another request 409. Kept for "
    "RELAY_IDEMPOTENCY_TTL (24 h) per caller."
)


def when(ms: int | float) -> str:
    """A time in ms since the epoch as Svix writes it (RFC 3339, UTC)."""
    return signing.rfc3339_ms(int(ms))


def ms(moment: datetime) -> int:
    """An SDK's datetime (naive means UTC) in ms since the epoch."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def not_found(kind: str, ident: str) -> ApiError:
    return ApiError(404, "not_found", f"{kind} {ident} does not exist")


def refuse(field: str, why: str) -> ApiError:
    """The 422 for a Svix field relay does not have (docs/guides/svix.md)."""
    return ApiError(422, "unsupported", why, details=[{"field": field, "message": why}])


def refuse_set(data: CamelIn, fields: dict[str, str]) -> None:
    """Refuse the first of ``fields`` (name: why) that ``data`` sets to a value other than
    null, an empty list or an empty object."""
    for name, why in fields.items():
        if getattr(data, name) not in (None, [], {}):
            raise refuse(data.model_fields[name].alias or name, why)


# relay's field names in its refusals, as the Svix fields that set them
SVIX_NAMES = {
    "rate_limit": "throttleRate",
    "event_types": "eventTypes",
    "enabled": "disabled",
    "type": "eventType",
}


def relay_fields(model: type[BaseModel], fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` validated by relay's own ``model`` (what ``/v1`` takes), the ones given;
    a refusal names the Svix field (422 ``validation_error``)."""
    try:
        return model.model_validate(fields).model_dump(exclude_unset=True, by_alias=True)
    except ValidationError as exc:
        text, details = refusal(exc)
        for d in details:
            first, _, rest = str(d["field"]).partition(".")
            d["field"] = SVIX_NAMES.get(first, first) + (f".{rest}" if rest else "")
        raise ApiError(422, "validation_error", text, details=details) from None


async def app_record(request: web.Request, name: str) -> dict[str, Any]:
    """The application ``name``, if the caller may see it; else the 404 of a missing one."""
    own = scoped_app(request)
    raw = await request.app[STORE].get_app_raw(name)
    if raw is None or own not in (None, name):
        raise not_found("application", name)
    record: dict[str, Any] = orjson.loads(raw)
    return record


async def app_of(request: web.Request) -> str:
    """The relay app the path's ``{app_id}`` names, if the caller may see it (an app's key
    or portal session sees its own only; another app's answers as a missing one)."""
    return str((await app_record(request, request.match_info["app_id"]))["app"])


async def endpoint_of(request: web.Request, app: str) -> dict[str, Any]:
    """The path's ``{endpoint_id}``, an endpoint of ``app``; else 404."""
    ident = request.match_info["endpoint_id"]
    endpoint = await request.app[STORE].get_endpoint(ident)
    if endpoint is None or endpoint["app"] != app:
        raise not_found("endpoint", ident)
    return endpoint


class ListQuery(Strict):
    """``limit`` and ``iterator`` (query parameters are snake_case, as Svix's are)."""

    limit: Annotated[int, Field(ge=1, le=250)] = 50
    iterator: Annotated[str | None, Field(max_length=512)] = None


class OrderedQuery(ListQuery):
    """A list in relay's one order, by id (``order=descending`` is 422)."""

    order: Literal["ascending"] = Field(default="ascending", description="by id")


def by_key(
    items: list[dict[str, Any]], key: str, q: ListQuery
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of ``items`` (sorted by ``key``) after ``q.iterator``, and the next page's
    iterator: the last ``key`` of this page, when more follow."""
    if q.iterator:
        items = [i for i in items if i[key] > q.iterator]
    more = len(items) > q.limit
    items = items[: q.limit]
    return items, str(items[-1][key]) if more else None


def page(data: list[dict[str, Any]], iterator: str | None) -> web.Response:
    """A list answer: ``{data, iterator, prevIterator, done}``."""
    return json(
        {"data": data, "iterator": iterator, "prevIterator": None, "done": iterator is None}
    )


async def iterator_of(request: web.Request, at: str | None) -> str | None:
    """A queue position sealed for this caller, as the next page's iterator."""
    if at is None:
        return None
    return cursors.seal(await request.app[STORE].cursor_key(), scoped_app(request), at)


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is not None and (not 1 <= len(key) <= 256 or not key.isprintable()):
        raise ApiError(422, "validation_error", "idempotency-key must be 1-256 printable chars")
    return key


def idempotent(handler: Handler) -> Handler:
    """A POST handler that honours ``idempotency-key``: the same key and request again
    answers the first answer (a 2xx), another request with the key is 409
    ``idempotency_key_reused``, and one while the first runs is 409 ``conflict``. A
    refused request keeps nothing: its retry runs again."""

    @functools.wraps(handler)
    async def run(request: web.Request) -> web.StreamResponse:
        key = _idempotency_key(request)
        if key is None:
            return await handler(request)
        raw = await read_body(request)
        digest = hashlib.sha256(
            b"\0".join([request.method.encode(), request.path_qs.encode(), raw])
        ).hexdigest()
        caller, slot = principal(request).id, hashlib.sha256(key.encode()).hexdigest()[:32]
        store = request.app[STORE]
        kept = await store.claim_request(caller, slot, digest)
        if kept is not None:
            return _again(kept, digest)
        try:
            answer = await handler(request)
        except BaseException:
            await store.drop_request(caller, slot)
            raise
        if isinstance(answer, web.Response) and answer.status < 300:
            sent = answer.body if isinstance(answer.body, bytes) else b""
            await store.answer_request(caller, slot, digest, answer.status, sent)
        else:
            await store.drop_request(caller, slot)
        return answer

    return run


def _again(kept: dict[str, Any], digest: str) -> web.Response:
    if kept["h"] != digest:
        raise ApiError(
            409, "idempotency_key_reused", "this idempotency-key came before with another request"
        )
    if "status" not in kept:
        raise ApiError(409, "conflict", "a request with this idempotency-key is running; retry")
    if not kept["body"]:
        return web.Response(status=kept["status"])
    return web.Response(
        body=kept["body"].encode(), status=kept["status"], content_type="application/json"
    )


def query(request: web.Request, model: type[M]) -> M:
    """``request``'s query string as ``model``; a refusal names each field where Svix's
    422 does, under ``query``."""
    return common.query(request, model, within="query")
