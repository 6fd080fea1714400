"""Endpoint changes are compare-and-set; deleting an endpoint leaves no state behind."""

from __future__ import annotations

from typing import Any

import orjson
import redis

from relay.domain.schema import endpoint_record
from relay.endpoints.health import Health
from relay.queue.store import Store


async def _endpoint(store: Store) -> dict[str, Any]:
    ep = endpoint_record(url="http://127.0.0.1:9/", app="shop")
    await store.put_endpoint(ep)
    return ep


async def test_a_write_between_read_and_write_is_not_lost(store: Store, redis_server) -> None:
    """Someone else's change lands between our read and our write: both survive.

    Seen failing: with the expected value dropped from ``update_endpoint``'s script call
    (unconditional write, the old read-modify-write), ``rate_limit`` comes back None.
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
