"""What a valid event type is, and what its JSON Schema says about a payload. Pure: no I/O.

An event type of the catalog has a ``name`` (the event ``type`` it describes), a
``description``, an optional JSON Schema of the payload (Draft 2020-12, checked against
its metaschema when written) and ``deprecated``. Schemas are bounded (``MAX_SCHEMA_BYTES``
serialized, the request nesting limit, the cost limits of
:mod:`relay.domain.schemalimits`) and self-contained: a ``$ref`` must point inside the
schema (``#...``), so validating never fetches anything. ``format`` is an annotation, as
Draft 2020-12 says by default, not an assertion. The validator is
:data:`relay.domain.schemakeywords.Bounded`: patterns run under RE2.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Annotated, Any, cast

import orjson
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from jsonschema.protocols import Validator
from pydantic import Field, model_validator
from referencing.exceptions import Unresolvable

from relay.domain.schema import TYPE_PATTERN, StrictBody
from relay.domain.schemakeywords import Bounded
from relay.domain.schemalimits import SchemaInvalid, check_limits, check_values

MAX_SCHEMA_BYTES = 64 * 1024
MAX_MESSAGE = 300
JsonSchema = dict[str, Any] | bool
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


_METASCHEMA_FORMATS = FormatChecker(
    [f for f in Draft202012Validator.FORMAT_CHECKER.checkers if f != "regex"]
)  # patterns are RE2's, checked by check_limits


def check_schema(schema: JsonSchema) -> Validator:
    """The compiled validator of a schema; raises :class:`SchemaInvalid` saying why not."""
    size = len(orjson.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        raise SchemaInvalid(f"schema is {size} bytes; the limit is {MAX_SCHEMA_BYTES}")
    check_values(schema)
    try:
        Draft202012Validator.check_schema(schema, format_checker=_METASCHEMA_FORMATS)
    except SchemaError as exc:
        where = "".join(f"[{p!r}]" for p in exc.absolute_path)
        raise SchemaInvalid(f"not a Draft 2020-12 schema: {where} {exc.message}"[:500]) from None
    check_limits(schema)
    return Bounded(schema)


class _Refused:
    """Stands in for the validator of a stored schema that :func:`check_limits` refuses:
    applying it raises :class:`SchemaInvalid` with the reason."""

    def __init__(self, schema: JsonSchema, reason: str) -> None:
        self.schema = schema
        self.reason = reason

    def iter_errors(self, instance: Any) -> Iterator[ValidationError]:
        raise SchemaInvalid(f"the event type's schema cannot be applied: {self.reason}"[:500])

    def is_valid(self, instance: Any) -> bool:
        raise SchemaInvalid(f"the event type's schema cannot be applied: {self.reason}"[:500])


def compile_schema(schema: JsonSchema) -> Validator:
    """The validator of a stored schema (checked by :func:`check_schema` when written;
    a schema stored before a limit of :mod:`relay.domain.schemalimits` held gets one
    that refuses every payload with that limit's reason)."""
    try:
        check_limits(schema)
    except SchemaInvalid as exc:
        return cast(Validator, _Refused(schema, str(exc)))
    return Bounded(schema)


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
    it is valid, in one pass over the schema. Raises :class:`SchemaInvalid` if the schema
    cannot be applied."""
    try:
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
