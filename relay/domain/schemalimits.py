"""What a JSON Schema of the catalog may cost, checked when it is written. Pure: no I/O.

:func:`check_limits` walks a schema as the validator applies it, following every ``$ref``,
and refuses (:class:`SchemaInvalid`, saying why):

* a ``$ref`` outside the schema, to nothing, or to a value that is not a schema;
* a recursive schema: a ``$ref`` that leads back into a schema containing it (a tree
  type whose node refers to itself included); ``$dynamicRef`` and ``$recursiveRef``;
* more than :data:`MAX_EXPANDED` JSON values once every ``$ref`` is replaced by what it
  points to (``$defs`` count where they are used), or subschemas nested deeper than
  :data:`MAX_DEPTH` that way: what the validator may visit for one payload value;
* a ``pattern`` or ``patternProperties`` name that RE2 cannot compile within
  :data:`PATTERN_MEMORY` (backreferences, lookaround), or patterns of more than
  :data:`MAX_PATTERN_PROGRAM` RE2 instructions in all.

:func:`regex` is the one way a pattern is compiled, at write and when validating.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson
import re2
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

MAX_EXPANDED = 10_000
MAX_DEPTH = 64
PATTERN_MEMORY = 512 * 1024  # bytes, RE2's max_mem for one pattern
MAX_PATTERN_PROGRAM = 100_000
PATTERN_CACHE = 256

# Draft 2020-12 keywords whose value is a schema, a list of schemas, a map of schemas
_ONE = frozenset(
    {
        "additionalProperties",
        "contains",
        "contentSchema",
        "else",
        "if",
        "items",
        "not",
        "propertyNames",
        "then",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAP = frozenset({"dependentSchemas", "patternProperties", "properties"})
_DEFS = frozenset({"$defs", "definitions"})  # applied only where a $ref points
_UNSUPPORTED = ("$dynamicRef", "$recursiveRef")

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.max_mem = PATTERN_MEMORY


class SchemaInvalid(ValueError):
    """A schema that is not a valid, self-contained Draft 2020-12 JSON Schema, or one
    that breaks a limit of this module."""


@lru_cache(maxsize=PATTERN_CACHE)
def regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (linear-time matching); raises ``re2.error``."""
    return re2.compile(pattern, _OPTIONS)


def regex_error(exc: Exception) -> str:
    """The reason RE2 gives, as text."""
    reason = exc.args[0] if exc.args else exc
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


def check_values(schema: Any) -> None:
    """Raise :class:`SchemaInvalid` when ``schema`` has more than :data:`MAX_EXPANDED` JSON
    values as written: cheap, so it runs before anything else reads the schema."""
    if _values(schema) > MAX_EXPANDED:
        raise SchemaInvalid(
            f"schema has more than {MAX_EXPANDED:,} JSON values, the limit (with every $ref "
            "inlined)"
        )


def check_limits(schema: Any) -> None:
    """Raise :class:`SchemaInvalid` when ``schema`` (valid against the metaschema) breaks
    a limit of this module."""
    walk = _Walk()
    if isinstance(schema, dict):
        resource = DRAFT202012.create_resource(schema)
        base = resource.id() or ""
        registry = Registry().with_resource(base, resource)
        raw = orjson.dumps(schema)
        if b'"$id"' in raw or b'"$anchor"' in raw or b'"$dynamicAnchor"' in raw:
            try:  # once, not once per $ref that needs it
                registry = registry.crawl()
            except ValueError as exc:  # urllib, on an $id that is not a URI reference
                raise SchemaInvalid(
                    f"an $id of the schema is not a valid URI reference: {exc}"
                ) from None
        walk.schema(schema, registry.resolver(base_uri=base), "#", 1)
    walk.check_patterns()


def _values(value: Any) -> int:
    """JSON values in ``value``, itself included."""
    if isinstance(value, dict):
        return 1 + sum(_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    return 1


def _at(where: str, key: object) -> str:
    """The JSON pointer of ``key`` in the schema at ``where``."""
    return f"{where}/{str(key).replace('~', '~0').replace('/', '~1')}"


@dataclass
class _Walk:
    done: dict[int, tuple[int, int]] = field(default_factory=dict)  # id: (values, height)
    open: dict[int, str] = field(default_factory=dict)  # id: where, of the schemas entered
    patterns: dict[str, str] = field(default_factory=dict)  # pattern: where

    def schema(self, node: Any, resolver: Any, where: str, depth: int) -> tuple[int, int]:
        """(JSON values with every $ref inlined, nesting of subschemas) of ``node``."""
        if not isinstance(node, dict):
            return 1, 1
        known = self.done.get(id(node))
        if known is None:
            known = self._enter(node, resolver, where, depth)
        if depth + known[1] - 1 > MAX_DEPTH:
            raise SchemaInvalid(
                f"schema nests more than {MAX_DEPTH} subschemas deep at {where} "
                "with every $ref inlined"
            )
        return known

    def _enter(
        self, node: dict[str, Any], resolver: Any, where: str, depth: int
    ) -> tuple[int, int]:
        if depth > MAX_DEPTH:
            raise SchemaInvalid(
                f"schema nests more than {MAX_DEPTH} subschemas deep at {where} "
                "with every $ref inlined"
            )
        self.open[id(node)] = where
        if isinstance(node.get("$id"), str):
            try:
                resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
            except ValueError as exc:
                raise SchemaInvalid(f"$id at {where} is not a valid URI reference: {exc}") from None
        values, height = 1, 1
        for key, value in node.items():
            if key in _UNSUPPORTED:
                raise SchemaInvalid(
                    f"{key} at {where} is not supported: dynamic references can make a "
                    "schema recursive (use $ref to a schema in $defs)"
                )
            if key == "$ref" and isinstance(value, str):
                v, h = self._ref(value, resolver, where, depth)
            elif key in _ONE:
                v, h = self.schema(value, resolver, _at(where, key), depth + 1)
            elif key in _LIST and isinstance(value, list):
                v, h = self._many(enumerate(value), resolver, _at(where, key), depth)
            elif key in _MAP and isinstance(value, dict):
                v, h = self._many(value.items(), resolver, _at(where, key), depth)
                if key == "patternProperties":
                    self.patterns.update((p, _at(where, key)) for p in value)
            elif key in _DEFS and isinstance(value, dict):
                self._many(value.items(), resolver, _at(where, key), depth)
                v, h = 1, 0
            else:
                if key == "pattern" and isinstance(value, str):
                    self.patterns[value] = _at(where, key)
                v, h = _values(value), 0
            values += v
            height = max(height, 1 + h)
        if values > MAX_EXPANDED:
            raise SchemaInvalid(
                f"schema is too large with every $ref inlined: more than {MAX_EXPANDED:,} "
                f"JSON values at {where}, the limit (a $ref costs what it points to, "
                "each time it is used)"
            )
        del self.open[id(node)]
        self.done[id(node)] = (values, height)
        return values, height

    def _many(self, items: Any, resolver: Any, where: str, depth: int) -> tuple[int, int]:
        values, height = 1, 0
        for key, sub in items:
            v, h = self.schema(sub, resolver, _at(where, key), depth + 1)
            values += v
            height = max(height, h)
        return values, height

    def _ref(self, ref: str, resolver: Any, where: str, depth: int) -> tuple[int, int]:
        if not ref.startswith("#"):
            raise SchemaInvalid(f"$ref must point inside the schema (#...), not {ref!r}")
        try:
            resolved = resolver.lookup(ref)
        except (Unresolvable, ValueError):
            raise SchemaInvalid(f"$ref {ref!r} points to nothing in the schema") from None
        target = resolved.contents
        if not isinstance(target, dict | bool):
            raise SchemaInvalid(f"$ref {ref!r} at {where} points to a value that is not a schema")
        if id(target) in self.open:
            raise SchemaInvalid(
                f"schema is recursive: $ref {ref!r} at {where} refers to "
                f"{self.open[id(target)]}, a schema that contains this $ref; "
                "recursive schemas are not supported"
            )
        return self.schema(target, resolved.resolver, ref, depth + 1)

    def check_patterns(self) -> None:
        program = 0
        for pattern, where in self.patterns.items():
            try:
                program += regex(pattern).programsize
            except re2.error as exc:
                raise SchemaInvalid(
                    f"pattern {pattern!r} at {where} is not supported: RE2 says "
                    f"{regex_error(exc)!r}. Patterns run under RE2 (linear time), which has "
                    f"no backreferences or lookaround and compiles a pattern in at most "
                    f"{PATTERN_MEMORY // 1024} KiB"
                ) from None
            if program > MAX_PATTERN_PROGRAM:
                raise SchemaInvalid(
                    f"the schema's patterns compile to more than {MAX_PATTERN_PROGRAM:,} RE2 "
                    f"instructions (at {where}); use fewer or smaller patterns"
                )
