"""The validator of the catalog's schemas: Draft 2020-12 (``jsonschema``) with the keywords
whose library versions can take super-linear time replaced. Pure: no I/O.

* ``pattern``, ``patternProperties``, and the property names that ``additionalProperties``
  and ``unevaluatedProperties`` test against ``patternProperties``, match with RE2
  (:func:`relay.domain.schemalimits.regex`): linear in the string, never backtracking.
* ``uniqueItems`` hashes a canonical form of each item, so a check is about linear in
  the array. The canonical form keeps JSON Schema's equality: numbers by value (``1`` and
  ``1.0`` are one number), booleans apart from numbers, objects by their members in any
  order, arrays by their items in order.

The others are the library's. ``additionalProperties`` and ``unevaluatedProperties``
follow the library's code, with RE2 for the patterns.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from relay.domain.schemalimits import SchemaInvalid, regex, regex_error

Errors = Iterator[ValidationError]


_UNANCHORED = re2._Anchor.UNANCHORED


def _matches(pattern: str, text: str) -> bool:
    """``re.search(pattern, text)`` under RE2. Calls the extension's ``Match`` itself: the
    public ``search`` builds a match object, several times the cost of the search."""
    try:
        compiled = regex(pattern)
    except re2.error as exc:
        raise SchemaInvalid(
            f"the event type's schema cannot be applied: pattern {pattern!r}: {regex_error(exc)}"
        ) from None
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate: match the code points as they are
        data = text.encode("utf-8", "surrogatepass")
    return bool(compiled._regexp.Match(_UNANCHORED, data, 0, len(data))[0][0] >= 0)


def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Errors:
    if validator.is_type(instance, "string") and not _matches(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Errors:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(patrn, key):
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def _additional(instance: dict[str, Any], schema: dict[str, Any]) -> Iterator[str]:
    """The names ``properties`` and ``patternProperties`` leave to ``additionalProperties``."""
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    for name in instance:
        if name not in properties and not any(_matches(p, name) for p in patterns):
            yield name


def additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Errors:
    if not validator.is_type(instance, "object"):
        return
    extras = set(_additional(instance, schema))
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        names = ", ".join(repr(each) for each in sorted(extras))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{names} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({names} {verb} unexpected)"
            )


def _valid(errors: Errors) -> bool:
    return next(errors, None) is None


def _evaluated(validator: Any, instance: dict[str, Any], schema: Any) -> list[str]:
    """The names of ``instance`` that ``schema`` evaluates (for ``unevaluatedProperties``)."""
    if validator.is_type(schema, "boolean"):
        return []
    keys: list[str] = []
    ref = schema.get("$ref")
    if ref is not None:
        resolved = validator._resolver.lookup(ref)
        inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
        keys += _evaluated(inner, instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys += properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (sub := schema.get(keyword)) is not None:
            keys += (k for k, v in instance.items() if _valid(validator.descend(v, sub)))
    for patrn in schema.get("patternProperties", {}):
        keys += (k for k in instance if _matches(patrn, k))
    for name, sub in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys += _evaluated(validator, instance, sub)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(keyword, []):
            if _valid(validator.descend(instance, sub)):
                keys += _evaluated(validator, instance, sub)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys += _evaluated(validator, instance, schema["if"])
            if "then" in schema:
                keys += _evaluated(validator, instance, schema["then"])
        elif "else" in schema:
            keys += _evaluated(validator, instance, schema["else"])
    return keys


def unevaluated_properties(validator: Any, up: Any, instance: Any, schema: Any) -> Errors:
    if not validator.is_type(instance, "object"):
        return
    evaluated = set(_evaluated(validator, instance, schema))
    bad = [
        name
        for name in instance
        if name not in evaluated
        and next(validator.descend(instance[name], up, path=name, schema_path=name), None)
    ]
    if not bad:
        return
    names = ", ".join(repr(each) for each in (sorted(bad) if up is False else bad))
    verb = "was" if len(bad) == 1 else "were"
    if up is False:
        yield ValidationError(f"Unevaluated properties are not allowed ({names} {verb} unexpected)")
    else:
        yield ValidationError(
            "Unevaluated properties are not valid under the given schema "
            f"({names} {verb} unevaluated and invalid)"
        )


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value, equal for values JSON Schema calls equal."""
    if value is True or value is False:
        return ("bool", value)
    if isinstance(value, list):
        return ("array", tuple(canonical(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, canonical(v)) for k, v in value.items()))
    return value


def unique_items(validator: Any, ui: Any, instance: Any, schema: Any) -> Errors:
    if not ui or not validator.is_type(instance, "array"):
        return
    seen: dict[Any, int] = {}
    for i, item in enumerate(instance):
        first = seen.setdefault(canonical(item), i)
        if first != i:
            yield ValidationError(
                f"{reprlib.repr(instance)} has non-unique elements (items {first} and {i})"
            )
            return


Bounded = validators.extend(
    Draft202012Validator,
    {
        "pattern": pattern,
        "patternProperties": pattern_properties,
        "additionalProperties": additional_properties,
        "unevaluatedProperties": unevaluated_properties,
        "uniqueItems": unique_items,
    },
)
