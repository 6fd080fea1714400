"""``/v1/event-types``: the event type catalog (name, description, JSON Schema, deprecated).

A name holding ``/`` is sent URL-encoded (``%2F``) in the path.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field

from relay.api.common import STORE, ApiError, body, found, json, route
from relay.domain.eventtypes import EventTypeIn, EventTypePatch
from relay.endpoints.catalog import Catalog, EventTypeExists, EventTypeInUse, SchemaInvalid


class EventTypeOut(BaseModel):
    name: str
    description: str
    schema_: dict[str, Any] | bool | None = Field(
        alias="schema", description="JSON Schema (Draft 2020-12) of the payload; null: any"
    )
    deprecated: bool = Field(description="still accepted; publishing it says type_deprecated")
    created_at: int = Field(description="ms since the epoch")
    updated_at: int


class EventTypeList(BaseModel):
    data: list[EventTypeOut]


def schema_invalid(exc: SchemaInvalid) -> ApiError:
    return ApiError(422, "schema_invalid", str(exc))


@route(
    "POST",
    "/v1/event-types",
    summary="Add an event type to the catalog",
    operation_id="createEventType",
    tag="Event types",
    body=EventTypeIn,
    responses={201: EventTypeOut},
    errors={
        409: ("event_type_exists",),
        422: ("schema_invalid",),
        503: ("replication_timeout",),
    },
    examples={
        "order-paid": (
            "A type whose payloads must carry an integer order and amount",
            {
                "name": "order.paid",
                "description": "An order was paid",
                "schema": {
                    "type": "object",
                    "required": ["order", "amount"],
                    "properties": {
                        "order": {"type": "integer"},
                        "amount": {"type": "integer", "minimum": 0},
                    },
                },
            },
        ),
    },
)
async def create(request: web.Request) -> web.Response:
    """A type publishers may send, with a description and an optional JSON Schema (Draft
    2020-12, self-contained) that every payload of the type is validated against."""
    data, _ = await body(request, EventTypeIn)
    try:
        record = await Catalog(request.app[STORE]).create(data)
    except SchemaInvalid as exc:
        raise schema_invalid(exc) from None
    except EventTypeExists as exc:
        raise ApiError(409, "event_type_exists", str(exc)) from None
    return json(record, status=201)


@route(
    "GET",
    "/v1/event-types",
    summary="List the event type catalog, by name",
    operation_id="listEventTypes",
    tag="Event types",
    responses={200: EventTypeList},
)
async def list_(request: web.Request) -> web.Response:
    """Every event type of the catalog, with its schema and deprecation."""
    return json({"data": await request.app[STORE].list_event_types()})


@route(
    "GET",
    "/v1/event-types/{name}",
    summary="Read an event type",
    operation_id="getEventType",
    tag="Event types",
    responses={200: EventTypeOut},
)
async def read(request: web.Request) -> web.Response:
    """The event type with its description, schema and deprecation."""
    name = request.match_info["name"]
    return json(found(await request.app[STORE].get_event_type(name), "event type", name))


@route(
    "PATCH",
    "/v1/event-types/{name}",
    summary="Change an event type (schema: null removes the schema)",
    operation_id="updateEventType",
    tag="Event types",
    body=EventTypePatch,
    responses={200: EventTypeOut},
    errors={422: ("schema_invalid",), 503: ("replication_timeout",)},
    examples={
        "deprecate": (
            "Deprecate it: still accepted, publishing it says type_deprecated",
            {"deprecated": True},
        ),
        "no-schema": ("Remove its schema: any payload", {"schema": None}),
    },
)
async def patch(request: web.Request) -> web.Response:
    """Change the description, the schema (``null`` removes it) or the deprecation."""
    name = request.match_info["name"]
    data, _ = await body(request, EventTypePatch)
    try:
        record = await Catalog(request.app[STORE]).update(
            name, data.model_dump(exclude_unset=True, by_alias=True)
        )
    except SchemaInvalid as exc:
        raise schema_invalid(exc) from None
    return json(found(record, "event type", name))


@route(
    "DELETE",
    "/v1/event-types/{name}",
    summary="Remove an event type (409 while endpoints subscribe to it by name)",
    operation_id="deleteEventType",
    tag="Event types",
    responses={204: None},
    errors={409: ("event_type_in_use",), 503: ("replication_timeout",)},
)
async def delete(request: web.Request) -> web.Response:
    """Remove the type from the catalog, unless an endpoint subscribes to it by its exact
    name (wildcards do not hold it). Deprecate a type before removing it."""
    name = request.match_info["name"]
    try:
        gone = await Catalog(request.app[STORE]).delete(name)
    except EventTypeInUse as exc:
        raise ApiError(409, "event_type_in_use", str(exc), endpoint_ids=exc.endpoint_ids) from None
    found(gone or None, "event type", name)
    return web.Response(status=204)
