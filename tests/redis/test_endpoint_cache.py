"""The API's per-app endpoint cache: used while subscribed, dropped on every change."""

from __future__ import annotations

import asyncio
from typing import Any

from relay.api.common import ENDPOINT_CACHE
from relay.endpoints.cache import EndpointCache
from relay.queue.store import Store


async def _publish(api: Any, app: str = "shop") -> list[str]:
    async with api(
        "POST", "/v1/events", json={"type": "order.paid", "payload": {}, "app": app}
    ) as r:
        assert r.status == 201
        return [d["endpoint_id"] for d in (await r.json())["deliveries"]]


async def _endpoint(api: Any, app: str = "shop") -> str:
    async with api("POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/", "app": app}) as r:
        assert r.status == 201
        return (await r.json())["id"]


async def _until(predicate: Any, within: float = 5.0) -> None:
    async def loop() -> None:
        while not predicate():  # noqa: ASYNC110  (watching the cache's private state)
            await asyncio.sleep(0.005)

    await asyncio.wait_for(loop(), within)


async def test_cache_hits_and_own_writes_are_seen_at_once(make_store, make_api) -> None:
    store = await make_store()
    api = await make_api(store)
    cache: EndpointCache = _cache(api)
    await _until(lambda: cache._subscribed)
    first = await _endpoint(api)
    assert await _publish(api) == [first]
    hits = cache.hits
    assert await _publish(api) == [first]
    assert cache.hits == hits + 1  # the second publish did not ask Redis for endpoints
    second = await _endpoint(api)  # written through this process: seen by the next publish
    assert sorted(await _publish(api)) == sorted([first, second])


async def test_another_replicas_write_invalidates(make_store, make_api) -> None:
    """Fails with the PUBLISH removed from endpoint_put.lua: replica B keeps serving its
    cached list and the new endpoint never gets the event."""
    store_a: Store = await make_store()
    store_b: Store = await make_store()  # same prefix, its own connection: another replica
    api_a, api_b = await make_api(store_a), await make_api(store_b)
    cache_b: EndpointCache = _cache(api_b)
    await _until(lambda: cache_b._subscribed)
    first = await _endpoint(api_a)
    assert await _publish(api_b) == [first]
    assert await _publish(api_b) == [first]  # now cached in B
    generation = cache_b._generation
    second = await _endpoint(api_a)
    await _until(lambda: cache_b._generation > generation)  # the change message arrived
    assert sorted(await _publish(api_b)) == sorted([first, second])


async def test_not_cached_while_unsubscribed(store: Store) -> None:
    cache = EndpointCache(store)  # its listener never ran
    await cache.endpoints_for_app("shop")
    await cache.endpoints_for_app("shop")
    assert (cache.hits, cache.misses) == (0, 2)


def _cache(api: Any) -> EndpointCache:
    return api.app[ENDPOINT_CACHE]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------- by id (the worker's)


async def test_by_ids_serves_from_the_cache_and_drops_it_on_any_change(make_store) -> None:
    """Fails with ``_by_id.clear()`` left out of ``invalidate``: the id keeps reading its
    old URL after another replica's change, and a deleted one is served."""
    store: Store = await make_store()
    other: Store = await make_store()  # another replica (the API) writes
    cache = EndpointCache(store)
    listener = asyncio.create_task(cache.run())
    try:
        await _until(lambda: cache._subscribed)
        generation = cache._generation
        await other.put_endpoint({**_record("ep_a"), "url": "http://127.0.0.1:9/old"})
        await _until(lambda: cache._generation > generation)
        assert (await cache.by_ids(["ep_a", "ep_gone"]))["ep_a"]["url"].endswith("/old")
        misses = cache.misses
        got = await cache.by_ids(["ep_a", "ep_gone"])  # both answered from the cache
        assert cache.misses == misses and set(got) == {"ep_a"}
        generation = cache._generation
        await other.update_endpoint("ep_a", lambda e: {**e, "url": "http://127.0.0.1:9/new"})
        await _until(lambda: cache._generation > generation)
        assert (await cache.by_ids(["ep_a"]))["ep_a"]["url"].endswith("/new")
        generation = cache._generation
        await other.delete_endpoint((await other.get_endpoint("ep_a")) or {})
        await _until(lambda: cache._generation > generation)
        assert await cache.by_ids(["ep_a"]) == {}
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)


async def test_by_ids_sees_its_own_stores_write_at_once(make_store) -> None:
    """A write through the cache's own Store (a worker disabling an endpoint) is seen by
    the next read, before any change message arrives (the epoch)."""
    store: Store = await make_store()
    cache = EndpointCache(store)
    cache._subscribed = True  # as if subscribed: only the epoch can tell it
    await store.put_endpoint(_record("ep_b"))
    assert (await cache.by_ids(["ep_b"]))["ep_b"]["enabled"] is True
    await store.update_endpoint("ep_b", lambda e: {**e, "enabled": False}, confirm=False)
    assert (await cache.by_ids(["ep_b"]))["ep_b"]["enabled"] is False


async def test_by_ids_not_cached_while_unsubscribed(store: Store) -> None:
    cache = EndpointCache(store)  # its listener never ran
    await store.put_endpoint(_record("ep_c"))
    await cache.by_ids(["ep_c"])
    await cache.by_ids(["ep_c"])
    assert (cache.hits, cache.misses) == (0, 2)


def _record(endpoint_id: str) -> dict[str, Any]:
    return {
        "id": endpoint_id,
        "url": "http://127.0.0.1:9/",
        "app": "shop",
        "event_types": ["*"],
        "secret": "whsec_" + "A" * 32,
        "enabled": True,
    }
