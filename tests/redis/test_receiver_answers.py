"""What the receiver answered, as a worker records it: the body excerpt up to
RELAY_RESPONSE_BODY_CAP and, for an answer that is not a success, its headers without
cookies or credentials."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from relay.queue.store import Store
from tests.helpers.worker import add_endpoint, publish, until

pytestmark = pytest.mark.realredis


@asynccontextmanager
async def running(store: Store) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        yield
    finally:
        stop.set()
        await task


async def logged(store: Store, delivery_id: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        d = await store.get_delivery(delivery_id)
        return d["attempt_log"][0] if d and d["attempt_log"] else None

    return await until(check)  # type: ignore[no-any-return]


def failing(request: web.Request) -> web.Response:
    headers = [
        ("X-Request-Id", "req-42"),
        ("Set-Cookie", "sid=abc"),
        ("Set-Cookie", "other=def"),
        ("X-Api-Key", "leaked-key"),
        ("WWW-Authenticate", 'Bearer realm="x"'),
        ("X-Upstream", "a"),
        ("X-Upstream", "b"),
    ]
    resp = web.Response(status=500, text="e" * 3000)
    for name, value in headers:
        resp.headers.add(name, value)
    return resp


async def test_a_failed_answer_keeps_its_headers_and_body_to_the_cap(
    make_store: Any, receiver: Any
) -> None:
    store = await make_store(response_body_cap=1500)
    receiver.responses["/fail"] = failing
    ep = await add_endpoint(store, receiver.url + "/fail")
    _, (d,) = await publish(store, ep["id"])
    async with running(store):
        entry = await logged(store, d)
    assert entry["status_code"] == 500 and entry["detail"] == "e" * 1500
    headers = entry["response_headers"]
    assert headers["x-request-id"] == "req-42" and headers["x-upstream"] == "a, b"
    assert headers["content-type"].startswith("text/plain")
    assert not {"set-cookie", "x-api-key", "www-authenticate"} & set(headers)
    raw = str(await store.redis.lrange(store.keys.shard(0).log(d), 0, -1))
    assert "sid=abc" not in raw and "leaked-key" not in raw


async def test_a_success_keeps_no_headers_and_the_cap_applies(
    make_store: Any, receiver: Any
) -> None:
    store = await make_store(response_body_cap=10)
    receiver.responses["/ok"] = lambda _: web.Response(
        text="accepted, thank you", headers={"X-A": "1"}
    )
    ep = await add_endpoint(store, receiver.url + "/ok")
    _, (d,) = await publish(store, ep["id"])
    async with running(store):
        entry = await logged(store, d)
    assert entry["status_code"] == 200 and entry["detail"] == "accepted, "
    assert "response_headers" not in entry
