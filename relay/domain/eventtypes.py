"""What a valid event type is, and what its JSON Schema says about a payload. Pure: no I/O.

An event type of the catalog has a ``name`` (the event ``type`` it describes), a
``description``, an optional JSON Schema of the payload (Draft 2020-12, checked against
its metaschema when written) and ``deprecated``. Schemas are bounded (``MAX_SCHEMA_BYTES``
serialized, the request nesting limit) and self-contained: a ``$ref`` must point inside
the schema (``#...``), so validating never fetches anything. ``format`` is an
annotation, as Draft 2020-12 says by default, not an assertion.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Annotated, Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from jsonschema.protocols import Validator
from pydantic import Field, model_validator
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from relay.domain.schema import TYPE_PATTERN, StrictBody

MAX_SCHEMA_BYTES = 64 * 1024
MAX_MESSAGE = 300
JsonSchema = dict[str, Any] | bool
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SchemaInvalid(ValueError):
    """A schema that is not a valid, self-contained Draft 2020-12 JSON Schema."""


class EventTypeIn(StrictBody):
    """Add an event type to the catalog."""

    name: Annotated[str, Field(pattern=TYPE_PATTERN, description="the event type, e.g. order.paid")]
    description: Annotated[str, Field(max_length=1024)] = ""
    schema_: JsonSchema | None = Field(
        default=None,
        alias="schema",
        description="JSON Schema (Draft 2020-12) of the payload; null: any payload",
    )
    deprecated: bool = Field(
        default=False,
        description="still accepted; flagged in reads, the dashboard and the publish answer",
    )


class EventTypePatch(StrictBody):
    """Change an event type: only the fields given change (``schema: null`` removes it)."""

    description: Annotated[str | None, Field(max_length=1024)] = None
    schema_: JsonSchema | None = Field(default=None, alias="schema")
    deprecated: bool | None = None

    @model_validator(mode="after")
    def _no_nulls(self) -> EventTypePatch:
        nulled = sorted(
            f
            for f in self.model_fields_set & {"description", "deprecated"}
            if getattr(self, f) is None
        )
        if nulled:
            raise ValueError(f"{', '.join(nulled)} cannot be null")
        return self


def _refs(node: Any) -> Iterator[str]:
    """Every ``$ref`` / ``$dynamicRef`` string of a schema (a property *named* ``$ref``
    has a schema, not a string, as its value)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("$ref", "$dynamicRef") and isinstance(v, str):
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def _has_nested_id(node: Any, root: bool = True) -> bool:
    if isinstance(node, dict):
        if not root and isinstance(node.get("$id"), str):
            return True
        return any(_has_nested_id(v, False) for v in node.values())
    if isinstance(node, list):
        return any(_has_nested_id(v, False) for v in node)
    return False


def check_schema(schema: JsonSchema) -> Validator:
    """The compiled validator of a schema; raises :class:`SchemaInvalid` saying why not."""
    size = len(orjson.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        raise SchemaInvalid(f"schema is {size} bytes; the limit is {MAX_SCHEMA_BYTES}")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "".join(f"[{p!r}]" for p in exc.absolute_path)
        raise SchemaInvalid(f"not a Draft 2020-12 schema: {where} {exc.message}"[:500]) from None
    refs = list(_refs(schema))
    remote = [r for r in refs if not r.startswith("#")]
    if remote:
        raise SchemaInvalid(f"$ref must point inside the schema (#...), not {remote[0]!r}")
    if isinstance(schema, dict) and refs and not _has_nested_id(schema):
        resource = DRAFT202012.create_resource(schema)
        resolver = Registry().with_resource("", resource).resolver()
        for ref in refs:
            try:
                resolver.lookup(ref)
            except Unresolvable:
                raise SchemaInvalid(f"$ref {ref!r} points to nothing in the schema") from None
    return compile_schema(schema)


def compile_schema(schema: JsonSchema) -> Validator:
    """The validator of a schema already checked (by :func:`check_schema`, when written)."""
    return Draft202012Validator(schema)


def json_path(error: ValidationError) -> str:
    """``$.amount``, ``$.items[2]``, ``$['odd key']``; for a missing required property,
    the path of that property."""
    parts: list[Any] = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [p for p in error.validator_value if p not in error.instance]
        if missing:
            parts.append(missing[0])
    out = "$"
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _NAME.match(p):
            out += f".{p}"
        else:
            out += "[" + orjson.dumps(p).decode() + "]"
    return out


def payload_error(validator: Validator, payload: Any) -> tuple[str, str] | None:
    """``(json path, message)`` of the most relevant reason ``payload`` fails, or None when
    it is valid. The valid case, the common one, runs the fast ``is_valid`` only. Raises
    :class:`SchemaInvalid` if the schema cannot be applied (a reference that resolves to
    nothing, which ``check_schema`` can only rule out for schemas without nested ``$id``)."""
    try:
        if validator.is_valid(payload):
            return None
        error = best_match(validator.iter_errors(payload))
    except Unresolvable as exc:
        raise SchemaInvalid(f"the event type's schema cannot be applied: {exc}"[:500]) from None
    if error is None:
        return None
    return json_path(error), error.message[:MAX_MESSAGE]


def event_type_record(fields: EventTypeIn) -> dict[str, Any]:
    """A new event type as it is stored (its schema already checked)."""
    now = int(time.time() * 1000)
    return {
        "name": fields.name,
        "description": fields.description,
        "schema": fields.schema_,
        "deprecated": fields.deprecated,
        "created_at": now,
        "updated_at": now,
    }
