"""Endpoint changes are compare-and-set; deleting an endpoint leaves no state behind."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
import redis

from relay.connectors.opsevents import OpsRelay
from relay.domain.schema import endpoint_record
from relay.endpoints.health import Health
from relay.endpoints.lifecycle import Lifecycle
from relay.queue.store import Store


async def _endpoint(store: Store) -> dict[str, Any]:
    ep = endpoint_record(url="http://127.0.0.1:9/", app="shop")
    await store.put_endpoint(ep)
    return ep


async def test_a_write_between_read_and_write_is_not_lost(store: Store, redis_server) -> None:
    """Someone else's change lands between our read and our write: both survive.

    Fails with the expected value dropped from ``update_endpoint``'s script call (an
    unconditional read-modify-write): ``rate_limit`` comes back None.
    """
    ep = await _endpoint(store)
    other = redis.Redis.from_url(redis_server.url, decode_responses=True)
    calls = 0

    def change(current: dict[str, Any]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:  # a concurrent PATCH of another field, after our read
            theirs = dict(current, rate_limit=5.0)
            other.hset(store.keys.endpoints, ep["id"], orjson.dumps(theirs))
        current["description"] = "ours"
        return current

    try:
        before, after = await store.update_endpoint(ep["id"], change)  # type: ignore[misc]
    finally:
        other.close()
    stored = await store.get_endpoint(ep["id"])
    assert calls == 2  # the first write was refused and the change re-applied
    assert stored is not None
    assert (stored["description"], stored["rate_limit"]) == ("ours", 5.0)
    assert after == stored and before["rate_limit"] == 5.0


async def test_app_move_is_conditional_too(store: Store) -> None:
    ep = await _endpoint(store)
    await store.update_endpoint(ep["id"], lambda e: dict(e, app="billing"))
    assert [e["id"] for e in await store.list_endpoints("billing")] == [ep["id"]]
    assert await store.list_endpoints("shop") == []
    assert await store.update_endpoint("ep_missing", lambda e: e) is None


async def test_delete_removes_breaker_rate_and_slots(store: Store, make_api) -> None:
    api = await make_api(store)
    async with api(
        "POST",
        "/v1/endpoints",
        json={"url": "http://127.0.0.1:9/", "rate_limit": 5, "max_in_flight": 1},
    ) as r:
        ep = await r.json()
    health = Health(store)
    _, waits = await health.admit(ep, ["tok:1"], 10)
    assert waits == [0]
    await health.settle(ep["id"], [("tok:2", "0")])
    ek = store.keys.endpoint_state(ep["id"])
    assert await store.redis.exists(ek.breaker, ek.rate, ek.inflight) == 3
    async with api("DELETE", f"/v1/endpoints/{ep['id']}") as r:
        assert r.status == 204
    assert await store.redis.exists(ek.breaker, ek.rate, ek.inflight) == 0


@pytest.fixture(params=["fake", "real"])
def backend(request: pytest.FixtureRequest) -> Any:
    # resolved here, outside the loop, as in tests/helpers/store.py: one test for both backends
    if request.param == "fake":
        return request.getfixturevalue("fake_store")
    return request.getfixturevalue("make_store")


@pytest.fixture
async def either(backend: Any) -> Store:
    store = backend if isinstance(backend, Store) else await backend()
    # one failure opens the breaker: a late failure would open it (and tell the ops app)
    store.settings = dataclasses.replace(store.settings, breaker_threshold=1)
    return store


@pytest.mark.parametrize("late", [["0"], ["1"], ["0", "1"], ["-"], ["0@1"]])
async def test_a_settle_after_the_delete_leaves_no_state(either: Store, late: list[str]) -> None:
    """Sends still in flight when their endpoint is deleted settle afterwards: nothing of
    the endpoint may come back (no sweep visits a deleted endpoint's keys). Seen
    failing: ``settle.lua`` made the breaker hash again (and a late failure opened it
    and put ``endpoint.failing`` in its ops outbox), kept forever."""
    store = either
    life, health = Lifecycle(store), Health(store)
    ep = await life.create(
        {"url": "http://127.0.0.1:9/", "app": "shop", "rate_limit": 100, "max_in_flight": 9}
    )
    tokens = [f"tok:{i}" for i in range(len(late))]
    _, waits = await health.admit(ep, tokens, 10)
    assert waits == [0] * len(tokens)
    await life.delete(ep)
    for token, verdict in zip(tokens, late, strict=True):
        settled = await health.settle(ep["id"], [(token, verdict)])
        assert (settled.state, settled.ops) == ("closed", 0)
    ek = store.keys.endpoint_state(ep["id"])
    for f in dataclasses.fields(ek):
        key = getattr(ek, f.name)
        ttl = await store.redis.pttl(key)
        if f.name == "deleted":  # the tombstone: it expires
            assert 0 < ttl <= 86_400_000, key
        else:
            assert ttl == -2, f"{key} is left (ttl {ttl})"
    assert (await health.breakers([ep["id"]]))[ep["id"]]["state"] == "closed"


async def test_an_ops_event_appended_before_the_delete_is_still_published(
    either: Store,
) -> None:
    """The breaker opened just before the delete: its ``endpoint.failing`` waits in the
    endpoint's ops outbox for the worker that appended it, which still publishes it; the
    outbox expires with the tombstone instead of staying forever. Seen failing: the
    outbox had no TTL (-1)."""
    store = either
    life, health = Lifecycle(store), Health(store)
    ep = await life.create({"url": "http://127.0.0.1:9/", "app": "shop"})
    ops = endpoint_record(url="http://127.0.0.1:9/ops", app="relay-ops", event_types=["*"])
    await store.put_endpoint(ops)
    assert (await health.settle(ep["id"], [("t", "0")])).ops == 1  # opened: one entry
    await life.delete(ep)
    box = store.keys.endpoint_state(ep["id"]).ops
    assert 0 < await store.redis.pttl(box) <= 86_400_000
    relay = OpsRelay(store)
    relay.poke(ep["id"])  # as the settling worker does
    assert await relay.once() == 1
    assert await store.redis.exists(box) == 0
    rows, _ = await store.list_deliveries(endpoint_id=ops["id"])
    assert len(rows) == 1 and rows[0]["type"] == "endpoint.failing"
