"""``POST /v1/events/batch`` on a real Redis: each event answered alone, as ``POST
/v1/events`` answers it; a refused event writes nothing, and neither does a refused batch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relay.api.models import MAX_BATCH
from relay.domain import ids
from relay.domain.schema import EventIn, endpoint_record
from relay.publishing import Published, Publisher
from relay.queue.store import Store
from tests.helpers import event_ids
from tests.helpers.api import assert_error, call, new_endpoint, snapshot

pytestmark = pytest.mark.realredis

BATCH = "/v1/events/batch"
SCHEMA = {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer"}}}


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Store, Any]:
    store = await make_store(max_payload_bytes=2000)
    return store, await make_api(store)


def item(key: str, **fields: Any) -> dict[str, Any]:
    return {"type": "order.paid", "payload": {"amount": 1}, "idempotency_key": key, **fields}


async def batch(api: Any, *events: dict[str, Any]) -> list[dict[str, Any]]:
    status, data = await call(api, "POST", BATCH, json={"events": list(events)})
    assert status == 200, data
    assert len(data["results"]) == len(events)
    return data["results"]  # type: ignore[no-any-return]


async def with_schema(api: Any) -> None:
    """order.checked gets a schema; returns once the API's catalog cache applies it."""
    status, _ = await call(api, "POST", "/v1/event-types", json={"name": "order.checked",
                                                                 "schema": SCHEMA})  # fmt: skip
    assert status == 201
    for _ in range(500):
        bad = {"type": "order.checked", "payload": {"amount": "x"}}
        status, _ = await call(api, "POST", "/v1/events", json=bad)
        if status == 422:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the schema never applied")


async def test_each_event_gets_the_answer_a_single_publish_gets(env: tuple[Store, Any]) -> None:
    store, api = env
    ep = await new_endpoint(api)
    await with_schema(api)
    before = await event_ids(store)
    sent = [
        item("k-ok"),
        {"payload": 1, "idempotency_key": "k-notype"},
        {"type": "order.paid", "payload": 1},
        item("k-big", payload="x" * 3000),
        item("k-schema", type="order.checked", payload={"amount": "ten"}),
        item("k-unknown", endpoint_ids=["ep_nope"]),
        item("k-ok"),
        item("k-ok", payload={"amount": 2}),
        item("k-ops", app="relay-ops"),
        "not an object",
        item("k-extra", colour="red"),
    ]
    results = await batch(api, *sent)
    assert [r["status"] for r in results] == [201, 422, 422, 413, 422, 422, 200, 409, 422, 422, 422]
    first = results[0]["event"]
    assert first["deliveries"] == [{"id": first["deliveries"][0]["id"], "endpoint_id": ep["id"]}]
    assert results[6]["event"] == first  # the same key and event: the first answer again
    assert results[2]["details"] == [{"field": "idempotency_key", "message": results[2]["message"]}]
    # the refusals are the ones POST /v1/events gives the same event, field for field
    for i in (1, 3, 4, 5, 7, 8, 10):
        fields = dict(sent[i])  # type: ignore[call-overload]
        key = fields.pop("idempotency_key")
        status, single = await call(
            api, "POST", "/v1/events", json=fields, headers={"Idempotency-Key": key}
        )
        assert {"status": status, **single} == results[i], i
    # one event written: the first; GET answers it
    assert await event_ids(store) == sorted([*before, first["id"]])
    status, got = await call(api, "GET", f"/v1/events/{first['id']}")
    assert status == 200 and got["payload"] == {"amount": 1}


async def test_a_batch_sent_again_answers_its_first_events(env: tuple[Store, Any]) -> None:
    store, api = env
    await new_endpoint(api)
    events = [item(f"again-{i}", payload={"amount": i}) for i in range(MAX_BATCH)]
    first = await batch(api, *events)
    assert {r["status"] for r in first} == {201}
    assert len({r["event"]["id"] for r in first}) == MAX_BATCH
    written = await snapshot(store)
    again = await batch(api, *events)
    assert [r["status"] for r in again] == [200] * MAX_BATCH
    assert [r["event"] for r in again] == [r["event"] for r in first]
    assert await snapshot(store) == written
    # a key is one key whether it came as a header or in a batch
    status, single = await call(
        api, "POST", "/v1/events", json={"type": "order.paid", "payload": {"amount": 3}},
        headers={"Idempotency-Key": "again-3"},
    )  # fmt: skip
    assert status == 200 and single == first[3]["event"]


async def test_concurrent_batches_with_the_same_keys_make_one_event_per_key(
    env: tuple[Store, Any],
) -> None:
    store, api = env
    await new_endpoint(api)
    events = [item(f"race-{i}", payload={"amount": i}) for i in range(20)]
    answers = await asyncio.gather(*(batch(api, *events[j:] + events[:j]) for j in range(6)))
    assert {r["status"] for rs in answers for r in rs} == {200, 201}
    by_key: dict[int, set[str]] = {}
    for j, results in enumerate(answers):
        for k, result in enumerate(results):
            by_key.setdefault((k + j) % 20, set()).add(result["event"]["id"])
    assert all(len(v) == 1 for v in by_key.values()), by_key
    assert sum(r["status"] == 201 for rs in answers for r in rs) == 20
    assert len(await event_ids(store)) == 20


async def test_refused_batches_write_nothing(env: tuple[Store, Any]) -> None:
    store, api = env
    await new_endpoint(api)
    before = await snapshot(store)
    for kw, status, code in (
        ({"data": b"{"}, 400, "invalid_json"),
        ({"json": []}, 422, "validation_error"),
        ({"json": {"events": []}}, 422, "validation_error"),
        ({"json": {"events": item("k")}}, 422, "validation_error"),
        ({"json": {"events": [item("k")], "extra": 1}}, 422, "validation_error"),
        ({"json": {"events": [item(f"k{i}") for i in range(MAX_BATCH + 1)]}}, 422, None),
        ({"json": {"events": [item(f"k{i}", payload="y" * 1900) for i in range(40)]}}, 413, None),
    ):
        got, data = await call(api, "POST", BATCH, **kw)
        assert_error(got, data, status, code)
    assert await snapshot(store) == before


async def test_scripts_flushed_mid_life_are_loaded_again(env: tuple[Store, Any]) -> None:
    store, api = env
    await new_endpoint(api)
    await store.redis.script_flush()
    results = await batch(api, item("flush-1"), item("flush-2"), item("flush-1"))
    assert [r["status"] for r in results] == [201, 201, 200]
    assert len(await event_ids(store)) == 2


async def test_an_app_key_publishes_to_its_own_app(env: tuple[Store, Any]) -> None:
    _, api = env
    status, key = await call(api, "POST", "/v1/api-keys", json={"app": "A", "scopes": ["publish"]})
    assert status == 201
    as_a = {"Authorization": f"Bearer {key['token']}"}
    status, data = await call(
        api, "POST", BATCH, headers=as_a,
        json={"events": [item("a-1"), item("a-2", app="A"), item("a-3", app="B")]},
    )  # fmt: skip
    assert status == 200, data
    results = data["results"]
    assert [r["status"] for r in results] == [201, 201, 403]
    assert results[0]["event"]["app"] == results[1]["event"]["app"] == "A"
    assert_error(403, results[2], 403, "forbidden")


async def test_a_batch_on_a_cluster_goes_to_every_shard_it_names(cluster_store: Any) -> None:
    """A cluster refuses scripts in a pipeline: each write goes on its own, all at once."""
    store = await cluster_store()
    await store.put_endpoint(endpoint_record(url="http://127.0.0.1:9/hook"))
    publisher = Publisher(store)
    keyed = [(EventIn(type="order.paid", payload={"n": i}), f"c-{i}") for i in range(10)]
    free = [(EventIn(type="order.paid", payload={"n": i}), None) for i in range(20)]
    first = await publisher.publish_batch([*keyed, *free, keyed[0]])
    assert [isinstance(a, Published) and a.created for a in first] == [True] * 30 + [False]
    answers = [a.answer for a in first if isinstance(a, Published)]
    again = await publisher.publish_batch(keyed)
    assert [a.answer for a in again if isinstance(a, Published)] == answers[:10]
    assert len({ids.shard_of(a["id"]) for a in answers}) > 1  # the unkeyed: random shards
    assert len(await event_ids(store)) == 30


async def test_a_batch_event_may_be_scheduled_as_a_single_one_may(env: tuple[Store, Any]) -> None:
    _, api = env
    await new_endpoint(api)
    results = await batch(
        api,
        item("k-later", deliver_at="2999-01-01T00:00:00Z"),
        item("k-soon", deliver_at="2000-01-01T00:00:00Z"),
        item("k-naive", deliver_at="2030-01-01T00:00:00"),
    )
    assert [r["status"] for r in results] == [422, 201, 422], results
    assert results[0]["error"] == "deliver_at_too_far"
    assert "deliver_at" not in results[1]["event"]  # a past time means now
    assert results[2]["error"] == "validation_error"
    status, later = await call(api, "POST", BATCH, json={"events": [
        item("k-hour", deliver_at="2100-01-01T00:00:00+01:00")]})  # fmt: skip
    assert status == 200 and later["results"][0]["status"] == 422  # still past the bound
