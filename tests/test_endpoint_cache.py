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
    """Seen failing: with the PUBLISH removed from endpoint_put.lua, replica B keeps
    serving its cached list and the new endpoint never gets the event."""
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
