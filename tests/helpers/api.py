"""API calls and checks shared by the API tests."""

from __future__ import annotations

from typing import Any

import orjson

from relay.queue.store import Store


async def call(api: Any, method: str, path: str, **kw: Any) -> tuple[int, Any]:
    async with api(method, path, **kw) as r:
        raw = await r.read()
        assert r.status < 500, (method, path, r.status, raw[:300])
        return r.status, orjson.loads(raw) if raw else None


async def snapshot(store: Store) -> dict[str, Any]:
    """Every key under the test's prefix with a dump of its value: 'nothing written'."""
    out = {}
    async for k in store.redis.scan_iter(match=store.settings.key_prefix + "*"):
        kind = await store.redis.type(k)
        if kind == "hash":
            out[k] = await store.redis.hgetall(k)
        elif kind == "zset":
            out[k] = await store.redis.zrange(k, 0, -1, withscores=True)
        elif kind == "set":
            out[k] = sorted(await store.redis.smembers(k))
        elif kind == "list":
            out[k] = await store.redis.lrange(k, 0, -1)
        else:
            out[k] = await store.redis.get(k)
    return out


def assert_error(status: int, data: Any, expected: int, code: str | None = None) -> None:
    assert status == expected, (status, data)
    assert isinstance(data, dict) and set(data) >= {"error", "message"}, data
    assert isinstance(data["error"], str) and isinstance(data["message"], str)
    if code is not None:
        assert data["error"] == code, data


async def new_endpoint(api: Any, **fields: Any) -> dict[str, Any]:
    fields.setdefault("url", "http://127.0.0.1:9/hook")
    status, data = await call(api, "POST", "/v1/endpoints", json=fields)
    assert status == 201, data
    return data  # type: ignore[no-any-return]
