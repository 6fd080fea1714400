"""``/api/v1/event-type``: relay's event type catalog, as ``/v1/event-types`` keeps it.

Svix's ``schemas`` is a map of versions; relay keeps one JSON Schema per type, shown
and taken as version ``"1"`` (``{"1": schema}``). Another version, ``archived: true``,
``groupName`` and ``featureFlags`` are refused (422 ``unsupported``). The catalog is
shared by every app: keys read it, the operator writes it.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import Field

from relay.api.common import STORE, ApiError, body, json, route
from relay.api.eventtypes import schema_invalid
from relay.api.svix.applications import POST_HEADERS, TAG
from relay.api.svix.base import (
    OrderedQuery,
    by_key,
    idempotent,
    not_found,
    page,
    query,
    refuse,
    refuse_set,
    relay_fields,
    when,
)
from relay.api.svix.models import (
    SvixEventTypeIn,
    SvixEventTypeOut,
    SvixEventTypePatch,
    SvixEventTypeUpsertIn,
    listing,
)
from relay.domain.eventtypes import EventTypeIn, EventTypePatch
from relay.domain.schemalimits import SchemaInvalid
from relay.endpoints.catalog import Catalog, EventTypeExists, EventTypeInUse

UNSUPPORTED = {
    "group_name": "relay has no event type groups",
    "feature_flags": "relay has no feature flags",
}
VERSION = "1"  # the one schema version relay keeps


class EventTypeQuery(OrderedQuery):
    with_content: bool = Field(default=True, description="false: schemas left out (null)")
    include_archived: bool = Field(default=False, description="accepted: none is archived")


def event_type_out(record: dict[str, Any], with_content: bool = True) -> dict[str, Any]:
    schema = record.get("schema") if with_content else None
    return {
        "name": record["name"],
        "description": record.get("description") or "",
        "archived": False,
        "deprecated": bool(record.get("deprecated")),
        "schemas": None if schema is None else {VERSION: schema},
        "createdAt": when(record["created_at"]),
        "updatedAt": when(record["updated_at"]),
        "groupName": None,
        "featureFlags": None,
    }


def changes_of(data: SvixEventTypeIn | SvixEventTypeUpsertIn | SvixEventTypePatch) -> dict:
    """The relay fields ``data`` sets (``schema``: the one version of ``schemas``)."""
    refuse_set(data, UNSUPPORTED)
    if data.archived:
        raise refuse("archived", "relay does not archive event types: deprecate, then delete")
    given = data.model_fields_set
    out: dict[str, Any] = {}
    if "description" in given and data.description is not None:
        out["description"] = data.description
    if "deprecated" in given and data.deprecated is not None:
        out["deprecated"] = data.deprecated
    if "schemas" in given:
        schemas = data.schemas or {}
        if set(schemas) - {VERSION}:
            raise refuse("schemas", f'relay keeps one schema per type: {{"{VERSION}": schema}}')
        out["schema"] = schemas.get(VERSION)
    return out


async def _create(request: web.Request, name: str, changes: dict[str, Any]) -> web.Response:
    fields = EventTypeIn.model_validate(relay_fields(EventTypeIn, {**changes, "name": name}))
    try:
        record = await Catalog(request.app[STORE]).create(fields)
    except SchemaInvalid as exc:
        raise schema_invalid(exc) from None
    except EventTypeExists as exc:
        raise ApiError(409, "event_type_exists", str(exc)) from None
    return json(event_type_out(record), status=201)


async def _update(request: web.Request, changes: dict[str, Any]) -> dict[str, Any] | None:
    name = request.match_info["event_type_name"]
    checked = relay_fields(EventTypePatch, changes)
    try:
        return await Catalog(request.app[STORE]).update(name, checked)
    except SchemaInvalid as exc:
        raise schema_invalid(exc) from None


@route(
    "POST",
    "/api/v1/event-type",
    summary="Add an event type to the catalog",
    operation_id="svixCreateEventType",
    tag=TAG,
    body=SvixEventTypeIn,
    examples={
        "paid": (
            "A type with a schema",
            {
                "name": "order.paid",
                "description": "An order was paid",
                "schemas": {"1": {"type": "object", "required": ["order"]}},
            },
        )
    },
    headers=POST_HEADERS,
    responses={201: SvixEventTypeOut},
    errors={
        409: ("event_type_exists", "conflict", "idempotency_key_reused"),
        422: ("unsupported", "schema_invalid"),
    },
)
@idempotent
async def create(request: web.Request) -> web.Response:
    """A type of relay's catalog; ``schemas["1"]`` is its JSON Schema (Draft 2020-12)."""
    data, _ = await body(request, SvixEventTypeIn)
    return await _create(request, data.name, changes_of(data))


@route(
    "GET",
    "/api/v1/event-type",
    summary="List the event type catalog",
    operation_id="svixListEventTypes",
    tag=TAG,
    query=EventTypeQuery,
    responses={200: listing(SvixEventTypeOut)},
)
async def list_(request: web.Request) -> web.Response:
    """Every event type, by name."""
    q = query(request, EventTypeQuery)
    types = await request.app[STORE].list_event_types()
    types, iterator = by_key(types, "name", q)
    return page([event_type_out(t, q.with_content) for t in types], iterator)


@route(
    "GET",
    "/api/v1/event-type/{event_type_name}",
    summary="Read an event type",
    operation_id="svixGetEventType",
    tag=TAG,
    responses={200: SvixEventTypeOut},
)
async def read(request: web.Request) -> web.Response:
    """The event type with its schema as version ``"1"``."""
    name = request.match_info["event_type_name"]
    record = await request.app[STORE].get_event_type(name)
    if record is None:
        raise not_found("event type", name)
    return json(event_type_out(record))


@route(
    "PUT",
    "/api/v1/event-type/{event_type_name}",
    summary="Create or replace an event type",
    operation_id="svixUpsertEventType",
    tag=TAG,
    body=SvixEventTypeUpsertIn,
    creates=True,
    examples={"paid": ("Its description", {"description": "An order was paid"})},
    responses={200: SvixEventTypeOut, 201: SvixEventTypeOut},
    errors={422: ("unsupported", "schema_invalid")},
)
async def upsert(request: web.Request) -> web.Response:
    """The type with this description, schema and deprecation, created when new."""
    data, _ = await body(request, SvixEventTypeUpsertIn)
    changes = {"deprecated": False, "schema": None, **changes_of(data)}
    record = await _update(request, changes)
    if record is None:
        return await _create(request, request.match_info["event_type_name"], changes)
    return json(event_type_out(record))


@route(
    "PATCH",
    "/api/v1/event-type/{event_type_name}",
    summary="Change an event type",
    operation_id="svixPatchEventType",
    tag=TAG,
    body=SvixEventTypePatch,
    examples={"deprecate": ("Deprecate it", {"deprecated": True})},
    responses={200: SvixEventTypeOut},
    errors={422: ("unsupported", "schema_invalid")},
)
async def patch(request: web.Request) -> web.Response:
    """Change the description, the schema (``schemas: null`` removes it) or the
    deprecation."""
    data, _ = await body(request, SvixEventTypePatch)
    record = await _update(request, changes_of(data))
    if record is None:
        raise not_found("event type", request.match_info["event_type_name"])
    return json(event_type_out(record))


@route(
    "DELETE",
    "/api/v1/event-type/{event_type_name}",
    summary="Remove an event type (409 while endpoints subscribe to it by name)",
    operation_id="svixDeleteEventType",
    tag=TAG,
    responses={204: None},
    errors={409: ("event_type_in_use",)},
)
async def delete(request: web.Request) -> web.Response:
    """As ``DELETE /v1/event-types/{name}``: Svix's archiving has no counterpart."""
    name = request.match_info["event_type_name"]
    try:
        gone = await Catalog(request.app[STORE]).delete(name)
    except EventTypeInUse as exc:
        raise ApiError(409, "event_type_in_use", str(exc)) from None
    if not gone:
        raise not_found("event type", name)
    return web.Response(status=204)
