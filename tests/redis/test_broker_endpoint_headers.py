"""Custom headers are for http(s) endpoints: a broker message carries only the three
webhook-* values, so a write that would give a broker endpoint headers is a 422 that
changes nothing, through every route that writes endpoints (``/v1`` and Svix's)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from relay.domain.schema import BROKER_HEADERS, endpoint_record
from tests.helpers.api import call

NATS = "nats://127.0.0.1:4222/orders.{type}"


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Any, Any]:
    """A store and its API, with the app ``shop`` made through Svix's route (its routes
    need one that exists)."""
    store = await make_store()
    api = await make_api(store)
    status, made = await call(api, "POST", "/api/v1/app", json={"name": "Shop", "uid": "shop"})
    assert status == 201, made
    return store, api


async def _create(api: Any, url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    given = {"url": url, "app": "shop"} | ({"headers": headers} if headers else {})
    return await call(api, "POST", "/v1/endpoints", json=given)


def _refused(status: int, answer: Any) -> None:
    assert status == 422, answer
    assert BROKER_HEADERS in orjson.dumps(answer).decode(), answer


async def test_a_broker_endpoint_with_headers_is_refused_at_create(env: Any) -> None:
    store, api = env
    status, answer = await _create(api, NATS, {"x-team": "billing"})
    _refused(status, answer)
    assert answer["details"] == [{"field": "headers", "message": BROKER_HEADERS}]
    svix = {"url": NATS, "headers": {"x-team": "billing"}}
    _refused(*await call(api, "POST", "/api/v1/app/shop/endpoint", json=svix))
    assert await store.list_endpoints("shop") == []


async def test_no_write_gives_a_broker_endpoint_headers(env: Any) -> None:
    """Fails with the check left out of the lifecycle's update: each write is stored."""
    store, api = env
    status, http = await _create(api, "http://127.0.0.1:9/h", {"x-a": "1"})
    assert status == 201, http
    status, nats = await _create(api, NATS)
    assert status == 201, nats
    before = {e["id"]: e for e in await store.list_endpoints("shop")}

    # an http endpoint with headers moved to a broker url; headers added to a broker one
    _refused(*await call(api, "PATCH", f"/v1/endpoints/{http['id']}", json={"url": NATS}))
    _refused(
        *await call(api, "PATCH", f"/v1/endpoints/{nats['id']}", json={"headers": {"x-a": "1"}})
    )
    path = f"/api/v1/app/shop/endpoint/{nats['id']}/headers"
    _refused(*await call(api, "PUT", path, json={"headers": {"x-a": "1"}}))
    assert {e["id"]: e for e in await store.list_endpoints("shop")} == before

    # moved with its headers cleared in the same write, it is a broker endpoint
    status, moved = await call(
        api, "PATCH", f"/v1/endpoints/{http['id']}", json={"url": NATS, "headers": {}}
    )
    assert status == 200, moved
    assert moved["kind"] == "nats" and moved["headers"] == {}


async def test_other_changes_leave_headers_stored_before_alone(env: Any) -> None:
    """A broker endpoint stored with headers before writes refused them can still be
    disabled or described: only a change of its url or headers is checked."""
    store, api = env
    old = endpoint_record(url=NATS, app="shop")
    old["headers"] = {"x-a": "1"}
    await store.put_endpoint(old)
    status, done = await call(api, "PATCH", f"/v1/endpoints/{old['id']}", json={"enabled": False})
    assert status == 200 and done["enabled"] is False, done
    _refused(
        *await call(api, "PATCH", f"/v1/endpoints/{old['id']}", json={"headers": {"x-b": "2"}})
    )
