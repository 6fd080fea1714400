"""When Redis is down the API answers 503 with Retry-After, never a 500."""

from __future__ import annotations

from pathlib import Path

from relay.queue.store import Store, connect
from relay.redisproc import RedisServer
from tests.helpers import make_settings


async def test_publish_while_redis_is_down_is_503(tmp_path: Path, make_api) -> None:
    server = RedisServer(data_dir=tmp_path, appendonly=False)
    server.start()
    settings = make_settings(redis_url=server.url)
    store = Store(connect(settings), settings)
    await store.start()
    try:
        api = await make_api(store)
        server.kill()
        async with api("POST", "/v1/events", json={"type": "order.paid", "payload": {}}) as r:
            assert r.status == 503
            assert r.headers["Retry-After"] == "1"
            assert (await r.json())["error"] == "unavailable"
        async with api("GET", "/readyz") as r:
            assert r.status == 503
        async with api("GET", "/healthz") as r:
            assert r.status == 200
    finally:
        await store.close()
        server.stop()


async def test_publish_when_redis_is_full_is_503_and_writes_nothing(
    tmp_path: Path, make_api
) -> None:
    """maxmemory under noeviction: Redis refuses the publish script; nothing is half-written."""
    server = RedisServer(
        data_dir=tmp_path, appendonly=False, extra_args=["--maxmemory-policy", "noeviction"]
    )
    server.start()
    settings = make_settings(redis_url=server.url)
    store = Store(connect(settings), settings)
    await store.start()
    try:
        api = await make_api(store)
        async with api("POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/"}) as r:
            assert r.status == 201
        await store.redis.config_set("maxmemory", 1)  # below what is used: every write fails
        before = await store.redis.dbsize()
        async with api("POST", "/v1/events", json={"type": "order.paid", "payload": {}}) as r:
            assert r.status == 503
            assert (await r.json())["error"] == "unavailable"
        assert await store.redis.dbsize() == before
        await store.redis.config_set("maxmemory", 0)
        async with api("POST", "/v1/events", json={"type": "order.paid", "payload": {}}) as r:
            assert r.status == 201
    finally:
        await store.close()
        server.stop()
