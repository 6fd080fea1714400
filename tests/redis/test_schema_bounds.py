"""What a tenant's JSON Schema may cost: recursive schemas, exponential ``$ref`` expansion and
patterns RE2 cannot run are refused when written; ``pattern`` runs in linear time and
``uniqueItems`` in about linear time when a payload is checked.

The time bounds are "not stalled" bounds, far above what a check takes and far below what
a backtracking pattern or a quadratic ``uniqueItems`` would take."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import pytest
from jsonschema import Draft202012Validator, validators

from relay.domain.eventtypes import EventTypeIn, check_schema, event_type_record, payload_error

NOT_STALLED = 1.0  # seconds

BACKTRACKS = r"^(\w+\s?)*$"
BAD_WORD = "a" * 27 + "!"


def doubling(levels: int) -> dict[str, Any]:
    """``levels`` definitions, each an ``allOf`` of the next one twice: 2**levels to apply."""
    defs: dict[str, Any] = {
        f"l{i}": {"allOf": [{"$ref": f"#/$defs/l{i + 1}"}, {"$ref": f"#/$defs/l{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"l{levels}"] = {"type": "string", "minLength": 1}
    return {"$defs": defs, "$ref": "#/$defs/l0"}


ORDER = {"type": "object", "properties": {"order": {"type": "integer"}}}
RECURSIVE = [
    {"$ref": "#"},
    {"allOf": [{"$ref": "#"}]},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}}},
    # a tree: recursion that descends into the payload; refused too (see docs/event-types.md)
    {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}},
]
DYNAMIC = [
    {"$dynamicAnchor": "node", "$dynamicRef": "#node"},
    {"$recursiveRef": "#"},
]


async def call(api: Any, method: str, path: str, want: int, **kw: Any) -> Any:
    async with api(method, path, **kw) as r:
        text = await r.text()
        assert r.status == want, f"{method} {path}: {r.status} {text}"
        return await r.json() if text else None


async def refused_at_write(api: Any, schema: Any) -> str:
    """POST and PATCH of ``schema`` are both 422 ``schema_invalid``; nothing is written.
    Returns the message of the POST."""
    got = await call(api, "POST", "/v1/event-types", 422, json={"name": "x.y", "schema": schema})
    assert got["error"] == "schema_invalid", got
    await call(api, "GET", "/v1/event-types/x.y", 404)
    patched = await call(
        api, "PATCH", "/v1/event-types/kept", 422, json={"schema": schema, "description": "new"}
    )
    assert patched["error"] == "schema_invalid", patched
    kept = await call(api, "GET", "/v1/event-types/kept", 200)
    assert kept["schema"] is None and kept["description"] == ""
    return str(got["message"])


@pytest.mark.realredis
async def test_recursive_and_dynamic_schemas_are_refused_at_write(
    make_store: Any, make_api: Any
) -> None:
    api = await make_api(await make_store())
    await call(api, "POST", "/v1/event-types", 201, json={"name": "kept"})
    for schema in RECURSIVE:
        message = await refused_at_write(api, schema)
        assert "schema is recursive" in message and "$ref" in message, (schema, message)
    for schema in DYNAMIC:
        message = await refused_at_write(api, schema)
        assert "not supported" in message and "Ref" in message, (schema, message)
    listed = await call(api, "GET", "/v1/event-types", 200)
    assert [t["name"] for t in listed["data"]] == ["kept"]


@pytest.mark.realredis
async def test_exponential_ref_expansion_is_refused_at_write(
    make_store: Any, make_api: Any
) -> None:
    api = await make_api(await make_store())
    await call(api, "POST", "/v1/event-types", 201, json={"name": "kept"})
    schema = doubling(20)
    assert len(str(schema)) < 2000  # small as text, 2**20 subschemas to apply
    message = await refused_at_write(api, schema)
    assert "$ref" in message and "inlined" in message, message
    chain = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(200)}
    chain["d200"] = {"type": "integer"}
    message = await refused_at_write(api, {"$defs": chain, "$ref": "#/$defs/d0"})
    assert "deep" in message and "inlined" in message, message
    # a schema that shares definitions as ordinary schemas do is accepted
    await call(api, "POST", "/v1/event-types", 201, json={"name": "ok", "schema": doubling(6)})


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        (  # a $ref to an $anchor
            {
                "$defs": {"count": {"$anchor": "count", "type": "integer", "minimum": 0}},
                "properties": {"n": {"$ref": "#count"}, "m": {"$ref": "#count"}},
            },
            {"n": 1, "m": 0},
            {"n": 1, "m": -1},
        ),
        (  # a $ref inside a subschema with its own $id resolves against that $id
            {
                "properties": {
                    "a": {
                        "$id": "https://example.com/a",
                        "$defs": {"x": {"type": "string", "pattern": "^[a-z]+$"}},
                        "$ref": "#/$defs/x",
                    }
                }
            },
            {"a": "abc"},
            {"a": "ABC"},
        ),
    ],
    ids=["anchor", "nested-id"],
)
def test_references_within_the_limits_resolve_as_before(
    schema: dict[str, Any], valid: Any, invalid: Any
) -> None:
    validator = check_schema(schema)
    assert payload_error(validator, valid) is None
    assert payload_error(validator, invalid) is not None


@pytest.mark.realredis
async def test_a_pattern_re2_cannot_run_is_refused_at_write(make_store: Any, make_api: Any) -> None:
    api = await make_api(await make_store())
    await call(api, "POST", "/v1/event-types", 201, json={"name": "kept"})
    for schema in (
        {"type": "string", "pattern": r"^(a+)\1$"},  # a backreference
        {"type": "string", "pattern": r"^(?=.*\d).+$"},  # lookahead
        {"properties": {"s": {"pattern": r"(?<!x)y"}}},  # lookbehind, nested
        {"patternProperties": {r"^(\w)\1$": {"type": "integer"}}},  # in a property pattern
    ):
        message = await refused_at_write(api, schema)
        assert "RE2" in message and "pattern" in message, (schema, message)


@pytest.mark.realredis
async def test_checking_a_large_schema_does_not_hold_up_other_requests(
    make_store: Any, make_api: Any
) -> None:
    """The metaschema check of a schema near the limits takes a second or more of CPU; the
    API's event loop keeps answering meanwhile."""
    api = await make_api(await make_store())
    heavy = {"anyOf": [{} for _ in range(9_000)]}
    lags: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - started)

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    await call(api, "POST", "/v1/event-types", 201, json={"name": "heavy", "schema": heavy})
    took = time.perf_counter() - started
    done.set()
    await ticker
    assert max(lags) < 0.5, (max(lags), took)


@pytest.mark.realredis
async def test_a_stored_schema_beyond_the_limits_refuses_payloads_with_422(
    make_store: Any, make_api: Any
) -> None:
    """A schema stored before the limits held (written around the API) answers 422
    ``schema_invalid`` at publish, saying why, and nothing is written."""
    store = await make_store()
    api = await make_api(store)
    await call(api, "POST", "/v1/endpoints", 201, json={"url": "http://127.0.0.1:9/"})
    for name, schema in (("old.recursive", {"allOf": [{"$ref": "#"}]}), ("old.ok", ORDER)):
        record = event_type_record(EventTypeIn.model_validate({"name": name, "schema": schema}))
        assert await store.put_event_type(record)
    body = {"type": "old.recursive", "payload": {"order": 1}}
    got = await call(api, "POST", "/v1/events", 422, json=body)
    assert got["error"] == "schema_invalid" and "recursive" in got["message"], got
    await call(api, "POST", "/v1/events", 201, json={"type": "old.ok", "payload": {"order": 1}})
    assert (await store.stats())["counts"]["pending"] == 1  # the accepted one only


def timed(validator: Any, payload: Any) -> tuple[tuple[str, str] | None, float]:
    started = time.perf_counter()
    error = payload_error(validator, payload)
    return error, time.perf_counter() - started


def test_a_backtracking_pattern_is_checked_in_linear_time() -> None:
    validator = check_schema({"type": "string", "pattern": BACKTRACKS})
    error, took = timed(validator, BAD_WORD)
    assert error is not None and error[0] == "$" and "does not match" in error[1]
    assert took < NOT_STALLED
    assert payload_error(validator, "ab cd ef") is None


@pytest.mark.parametrize(
    "schema",
    [
        {"patternProperties": {BACKTRACKS: {"type": "integer"}}, "additionalProperties": False},
        {"patternProperties": {BACKTRACKS: {"type": "integer"}}, "unevaluatedProperties": False},
    ],
    ids=["additionalProperties", "unevaluatedProperties"],
)
def test_property_patterns_are_checked_in_linear_time(schema: dict[str, Any]) -> None:
    validator = check_schema(schema)
    error, took = timed(validator, {BAD_WORD: 1})
    assert error is not None and took < NOT_STALLED
    assert payload_error(validator, {"ab cd": 1}) is None
    assert payload_error(validator, {"ab cd": "one"}) is not None  # the pattern's schema holds


def counted(validator: Any, payload: Any) -> tuple[tuple[str, str] | None, int]:
    """The check's answer and how many function calls it made (Python and C): a count of
    work that a loaded machine does not change, unlike its duration."""
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        error = payload_error(validator, payload)
    finally:
        sys.setprofile(None)
    return error, calls


# Hashing 3,000 items is some tens of thousands of calls; comparing them pairwise (what
# jsonschema's own uniqueItems does) is over a hundred million, and 300 items over a million.
LINEAR_CALLS = 1_000_000


def test_unique_items_over_thousands_of_objects_is_linear() -> None:
    validator = check_schema({"type": "array", "uniqueItems": True})
    items = [{"id": i, "name": f"n{i}", "tags": ["a", i]} for i in range(3000)]
    error, calls = counted(validator, items)
    assert error is None and calls < LINEAR_CALLS
    repeated = [*items, {"tags": ["a", 1500], "name": "n1500", "id": 1500.0}]
    error, calls = counted(validator, repeated)
    assert error is not None and "non-unique" in error[1] and calls < LINEAR_CALLS


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([1, 1.0], False),  # one number
        ([True, 1], True),  # a boolean is not a number
        ([False, 0, None, ""], True),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),  # objects: key order does not count
        ([{"a": 1}, {"a": 1, "b": None}], True),
        ([[1, 2], [2, 1]], True),  # arrays: order counts
        ([[1, [True]], [1.0, [True]]], False),
        ([{"a": [True]}, {"a": [1]}], True),
        (["1", 1], True),
        ([2**53 + 1, float(2**53)], True),  # numbers compare exactly
        ([{"x": {}}, {"x": []}], True),
        ([None, None], False),
    ],
)
def test_unique_items_keeps_json_schema_equality(items: list[Any], unique: bool) -> None:
    validator = check_schema({"uniqueItems": True})
    assert (payload_error(validator, items) is None) is unique


def test_a_failing_payload_is_checked_once() -> None:
    runs: list[Any] = []

    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        runs.append(instance)
        return iter(())

    counting = validators.extend(Draft202012Validator, {"x-counted": counted})
    validator = counting({"x-counted": True, "type": "integer"})
    assert payload_error(validator, "not an integer") is not None
    assert len(runs) == 1
