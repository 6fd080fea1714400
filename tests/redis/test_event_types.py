"""The event type catalog: CRUD, JSON Schema validation at publish, strict mode, and the
API's cache of compiled validators (invalidated across replicas over ``{cfg}:changed``)."""

from __future__ import annotations

from functools import partial
from typing import Any

import orjson
import pytest

from relay.api.common import ENDPOINT_CACHE, EVENT_TYPE_CACHE
from relay.endpoints.catalog import EventTypeCache
from relay.queue.store import Store
from tests.helpers import waiting

pytestmark = pytest.mark.realredis

ORDER = {
    "type": "object",
    "properties": {
        "order": {"type": "integer"},
        "amount": {"type": "integer", "minimum": 0},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
    },
    "required": ["order", "amount"],
    "$defs": {"line": {"type": "object", "required": ["sku"]}},
}


async def call(api: Any, method: str, path: str, want: int, **kw: Any) -> Any:
    async with api(method, path, **kw) as r:
        text = await r.text()
        assert r.status == want, f"{method} {path}: {r.status} {text}"
        return await r.json() if text else None


async def publish(api: Any, payload: Any, want: int, type_: str = "order.paid", **kw: Any) -> Any:
    return await call(
        api, "POST", "/v1/events", want, json={"type": type_, "payload": payload}, **kw
    )


until = partial(waiting.until, every=0.005)


async def test_catalog_crud_and_schema_checked_when_written(make_store: Any, make_api: Any) -> None:
    store = await make_store()
    api = await make_api(store)
    body = {"name": "order.paid", "description": "an order was paid", "schema": ORDER}
    made = await call(api, "POST", "/v1/event-types", 201, json=body)
    assert made["schema"] == ORDER and made["deprecated"] is False
    again = await call(api, "POST", "/v1/event-types", 409, json=body)
    assert again["error"] == "event_type_exists"
    for bad in (
        {"type": "nope"},  # not a Draft 2020-12 schema
        {"$ref": "https://example.com/order.json"},  # would need a fetch
        {"$ref": "#/$defs/missing"},  # points to nothing
        {"enum": ["x" * 1000] * 70},  # over 64 KiB
    ):
        got = await call(api, "POST", "/v1/event-types", 422, json={"name": "x.y", "schema": bad})
        assert got["error"] == "schema_invalid", bad
    got = await call(api, "POST", "/v1/event-types", 422, json={"name": "bad name"})
    assert got["error"] == "validation_error"
    await call(api, "POST", "/v1/event-types", 201, json={"name": "shop/v2:item.added"})

    listed = await call(api, "GET", "/v1/event-types", 200)
    assert [t["name"] for t in listed["data"]] == ["order.paid", "shop/v2:item.added"]
    assert (await call(api, "GET", "/v1/event-types/shop%2Fv2:item.added", 200))["schema"] is None
    await call(api, "GET", "/v1/event-types/order.nope", 404)

    path = "/v1/event-types/order.paid"
    changed = await call(api, "PATCH", path, 200, json={"deprecated": True, "description": "old"})
    assert changed["deprecated"] and changed["schema"] == ORDER and changed["description"] == "old"
    got = await call(api, "PATCH", path, 422, json={"schema": {"type": 5}})
    assert got["error"] == "schema_invalid"
    await call(api, "PATCH", path, 422, json={"deprecated": None})
    await call(api, "PATCH", "/v1/event-types/order.nope", 404, json={"deprecated": True})
    assert (await call(api, "PATCH", path, 200, json={"schema": None}))["schema"] is None
    assert (await store.get_event_type("order.paid") or {})["description"] == "old"

    # delete: refused while an endpoint subscribes to the type by name (not by wildcard)
    ep = await call(
        api,
        "POST",
        "/v1/endpoints",
        201,
        json={"url": "http://127.0.0.1:9/", "event_types": ["order.paid"]},
    )
    busy = await call(api, "DELETE", path, 409)
    assert busy["error"] == "event_type_in_use" and busy["endpoint_ids"] == [ep["id"]]
    await call(api, "PATCH", f"/v1/endpoints/{ep['id']}", 200, json={"event_types": ["order.*"]})
    await call(api, "DELETE", path, 204)
    await call(api, "DELETE", path, 404)
    assert await store.event_type_names() == ["shop/v2:item.added"]


async def test_publish_validates_the_payload_and_writes_nothing_when_it_fails(
    make_store: Any, make_api: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    await call(api, "POST", "/v1/endpoints", 201, json={"url": "http://127.0.0.1:9/"})
    await call(api, "POST", "/v1/event-types", 201, json={"name": "order.paid", "schema": ORDER})
    ok = await publish(api, {"order": 1, "amount": 5, "lines": [{"sku": "a"}]}, 201)
    assert "type_deprecated" not in ok and len(ok["deliveries"]) == 1
    cases = [
        ({"order": 1, "amount": "5"}, "$.amount"),
        ({"order": 1, "amount": -1}, "$.amount"),
        ({"order": 1}, "$.amount"),  # required: the missing property's path
        ({"order": 1, "amount": 1, "lines": [{"sku": "a"}, {}]}, "$.lines[1].sku"),
        ([1, 2], "$"),
    ]
    key = {"Idempotency-Key": "first-try"}
    for payload, where in cases:
        got = await publish(api, payload, 422, headers=key)
        assert got["error"] == "payload_invalid" and got["path"] == where, (payload, got)
        assert where in got["message"]
    assert (await store.stats())["counts"]["pending"] == 1  # only the valid one
    # the refused publishes did not take the Idempotency-Key either
    assert (await publish(api, {"order": 2, "amount": 0}, 201, headers=key))["deliveries"]
    await publish(api, {"anything": True}, 201, type_="order.uncatalogued")  # not strict

    await call(api, "PATCH", "/v1/event-types/order.paid", 200, json={"deprecated": True})
    late = await publish(api, {"order": 3, "amount": 1}, 201)
    assert late["type_deprecated"] is True  # accepted, and said so
    shown = await call(api, "GET", "/v1/event-types/order.paid", 200)
    assert shown["deprecated"] is True


async def test_strict_mode_refuses_unknown_types_and_subscriptions(
    make_store: Any, make_api: Any
) -> None:
    store = await make_store(event_types_strict=True)
    api = await make_api(store)
    url = "http://127.0.0.1:9/"
    made = await call(api, "POST", "/v1/endpoints", 201, json={"url": url})  # "*" is fine
    got = await publish(api, {}, 422, type_="order.paid")
    assert got["error"] == "unknown_event_type"
    for types in (["order.paid"], ["order.*"], ["*", "invoice.sent"]):
        got = await call(api, "POST", "/v1/endpoints", 422, json={"url": url, "event_types": types})
        assert got["error"] == "unknown_event_type", types
    await call(api, "POST", "/v1/event-types", 201, json={"name": "order.paid"})
    assert (await publish(api, {}, 201))["deliveries"] == [
        {"id": (await store.list_deliveries())[0][0]["id"], "endpoint_id": made["id"]}
    ]
    sub = await call(
        api, "POST", "/v1/endpoints", 201, json={"url": url, "event_types": ["order.*"]}
    )
    await call(api, "POST", "/v1/endpoints", 201, json={"url": url, "event_types": ["order.paid"]})
    got = await call(
        api, "PATCH", f"/v1/endpoints/{sub['id']}", 422, json={"event_types": ["refund.*"]}
    )
    assert got["error"] == "unknown_event_type"
    assert (await store.get_endpoint(sub["id"]) or {})["event_types"] == ["order.*"]
    assert len(await store.list_endpoints()) == 3
    # deprecated types are still known
    await call(api, "PATCH", "/v1/event-types/order.paid", 200, json={"deprecated": True})
    await call(api, "POST", "/v1/endpoints", 201, json={"url": url, "event_types": ["order.paid"]})


async def test_validators_are_cached_and_another_replicas_write_invalidates(
    make_store: Any, make_api: Any
) -> None:
    """Fails with ``endpoint_cache.listeners.append(self.invalidate)`` removed from
    EventTypeCache: replica B keeps its cached "no such type" and accepts the bad
    payload until the 30 s backstop (the wait below gives up at 10 s)."""
    store_a: Store = await make_store()
    store_b: Store = await make_store()  # same prefix, its own connection: another replica
    api_a, api_b = await make_api(store_a), await make_api(store_b)
    cache_b: EventTypeCache = api_b.app[EVENT_TYPE_CACHE]
    await until(lambda: api_b.app[ENDPOINT_CACHE].subscribed)
    bad = {"order": "one", "amount": 1}
    await publish(api_b, bad, 201)
    hits = cache_b.hits
    await publish(api_b, bad, 201)
    assert cache_b.hits == hits + 1  # the lookup cost no Redis call

    generation = cache_b._generation
    await call(api_a, "POST", "/v1/event-types", 201, json={"name": "order.paid", "schema": ORDER})
    await until(lambda: cache_b._generation > generation)  # A's write reached B
    assert (await publish(api_b, bad, 422))["path"] == "$.order"
    await publish(api_b, {"order": 1, "amount": 1}, 201)
    hits = cache_b.hits
    await publish(api_b, {"order": 2, "amount": 1}, 201)
    assert cache_b.hits == hits + 1  # the compiled validator is cached too

    generation = cache_b._generation
    await call(api_a, "PATCH", "/v1/event-types/order.paid", 200, json={"schema": None})
    await until(lambda: cache_b._generation > generation)
    await publish(api_b, bad, 201)


async def test_own_write_is_seen_by_the_next_lookup(make_store: Any) -> None:
    """An entry filled before this process's own write is not served after it, even if
    the change message has not arrived (here it never does: the subscription is faked).
    Fails without the epoch check in EventTypeCache.lookup: the second lookup returns the
    cached None."""
    store: Store = await make_store()

    class Subscribed:
        subscribed = True
        listeners: list[Any] = []

    cache = EventTypeCache(store, Subscribed())  # type: ignore[arg-type]
    assert await cache.lookup("order.paid") is None
    assert await cache.lookup("order.paid") is None and cache.hits == 1
    record = {"name": "order.paid", "description": "", "schema": ORDER, "deprecated": False}
    assert await store.put_event_type(record)
    known = await cache.lookup("order.paid")
    assert known is not None and known.validator is not None
    assert not known.validator.is_valid({"order": 1})


async def test_publisher_without_a_cache_reads_the_catalog(make_store: Any) -> None:
    """Other publishers (the outbox connector) use the uncached read: same checks."""
    from relay.domain.schema import EventIn
    from relay.publishing import PayloadInvalid, Publisher, UnknownEventType

    store: Store = await make_store()
    record = {"name": "order.paid", "description": "", "schema": ORDER, "deprecated": True}
    assert await store.put_event_type(record)
    publisher = Publisher(store)
    with pytest.raises(PayloadInvalid) as refused:
        await publisher.publish(EventIn(type="order.paid", payload={"order": 1}))
    assert refused.value.extra == {"path": "$.amount"}
    done = await publisher.publish(EventIn(type="order.paid", payload={"order": 1, "amount": 2}))
    assert done.answer["type_deprecated"] is True
    strict = Publisher(await make_store(event_types_strict=True))
    with pytest.raises(UnknownEventType):
        await strict.publish(EventIn(type="order.other", payload={}))


async def test_the_publish_path_leaves_compiling_to_the_judge(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog hands the judge the schema serialized; the publishing process (the
    API's event loop, with a sandbox) compiles and limit-checks nothing of it. Fails when
    a catalog read compiles the schema."""
    from relay.domain.schema import EventIn
    from relay.endpoints import catalog
    from relay.publishing import PayloadInvalid, Publisher
    from relay.sandbox import Inline, Verdict, Work

    compiled: list[Any] = []
    real = catalog.compile_schema
    monkeypatch.setattr(catalog, "compile_schema", lambda s: compiled.append(s) or real(s))
    judged: list[Work] = []

    class Recording(Inline):
        async def judge(self, work: Work) -> Verdict:
            judged.append(work)
            return await super().judge(work)

    store: Store = await make_store()
    record = {"name": "order.paid", "description": "", "schema": ORDER, "deprecated": False}
    assert await store.put_event_type(record)
    publisher = Publisher(store, judge=Recording())
    with pytest.raises(PayloadInvalid):
        await publisher.publish(EventIn(type="order.paid", payload={"order": 1}))
    await publisher.publish(EventIn(type="order.paid", payload={"order": 1, "amount": 2}))
    assert compiled == []
    assert [orjson.loads(w.schema or b"null") for w in judged] == [ORDER, ORDER]


def test_strict_mode_is_read_from_the_environment() -> None:
    from relay.settings import Settings, SettingsError

    assert Settings.from_env({}).event_types_strict is False
    assert Settings.from_env({"RELAY_EVENT_TYPES_STRICT": "1"}).event_types_strict is True
    with pytest.raises(SettingsError):
        Settings.from_env({"RELAY_EVENT_TYPES_STRICT": "maybe"})


async def test_a_retry_of_an_accepted_publish_gets_its_first_answer_after_the_schema_changed(
    make_store: Any, make_api: Any
) -> None:
    """Fails without Publisher._first_answer: the retry is 422 payload_invalid."""
    store = await make_store()
    api = await make_api(store)
    await call(api, "POST", "/v1/event-types", 201, json={"name": "order.paid", "schema": ORDER})
    key = {"Idempotency-Key": "order-7"}
    first = await publish(api, {"order": 7, "amount": 1}, 201, headers=key)
    stricter = {**ORDER, "required": ["order", "amount", "currency"]}
    await call(api, "PATCH", "/v1/event-types/order.paid", 200, json={"schema": stricter})
    assert await publish(api, {"order": 7, "amount": 1}, 200, headers=key) == first
    # a new key, or the same key with another body, is held to the new schema
    got = await publish(api, {"order": 7, "amount": 1}, 422, headers={"Idempotency-Key": "k2"})
    assert got["path"] == "$.currency"
    assert (await publish(api, {"order": 8, "amount": 1}, 422, headers=key))["path"] == "$.currency"


async def test_the_catalog_on_a_cluster(cluster_store: Any, make_api: Any) -> None:
    """The catalog's scripts and reads on a real 3-master Redis Cluster (one slot: {cfg}),
    with an ed25519 endpoint beside it."""
    store: Store = await cluster_store(event_types_strict=True)
    api = await make_api(store)
    await call(api, "POST", "/v1/event-types", 201, json={"name": "order.paid", "schema": ORDER})
    ep = await call(
        api,
        "POST",
        "/v1/endpoints",
        201,
        json={"url": "http://127.0.0.1:9/", "event_types": ["order.*"], "signing": "ed25519"},
    )
    assert ep["public_key"].startswith("whpk_")
    await call(api, "PATCH", "/v1/event-types/order.paid", 200, json={"deprecated": True})
    assert (await publish(api, {"order": 1}, 422))["path"] == "$.amount"
    done = await publish(api, {"order": 1, "amount": 2}, 201)
    assert done["type_deprecated"] is True and len(done["deliveries"]) == 1
    assert (await publish(api, {}, 422, type_="order.other"))["error"] == "unknown_event_type"
    await call(api, "DELETE", f"/v1/endpoints/{ep['id']}", 204)
    await call(api, "DELETE", "/v1/event-types/order.paid", 204)
    assert await store.list_event_types() == []
