"""The HTTP API on a real Redis: auth, endpoints, fan-out, idempotency, bad input, replay.

Every bad request must get a 4xx with ``{"error", "message"}`` and change nothing: the
set of keys under the test's prefix is compared before and after (SCAN MATCH prefix*),
and no answer in this file may be a 5xx.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
import pytest

from relay.api.common import ROUTES
from relay.domain import ids
from relay.queue.store import Outcome, Store
from tests.helpers import event_ids
from tests.helpers.api import assert_error, call, new_endpoint, snapshot

pytestmark = pytest.mark.realredis


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Store, Any]:
    store = await make_store(max_payload_bytes=2000)
    return store, await make_api(store)


async def publish(api: Any, **fields: Any) -> dict[str, Any]:
    fields.setdefault("payload", {"n": 1})
    status, data = await call(api, "POST", "/v1/events", json=fields)
    assert status == 201, data
    return data  # type: ignore[no-any-return]


def targets(event: dict[str, Any]) -> set[str]:
    return {d["endpoint_id"] for d in event["deliveries"]}


# ---------------------------------------------------------------------- auth, health


async def test_auth_required_on_v1_only(env: tuple[Store, Any]) -> None:
    store, api = env
    async with aiohttp.ClientSession() as anon:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "test-token"}):
            for method, path in (
                ("GET", "/v1/endpoints"),
                ("POST", "/v1/events"),
                ("GET", "/v1/x"),
            ):
                async with anon.request(method, api.url + path, headers=headers, json={}) as r:
                    assert_error(r.status, await r.json(), 401, "unauthorized")
        for path in ("/healthz", "/readyz", "/openapi.json", "/metrics"):
            async with anon.get(api.url + path) as r:
                assert r.status == 200, path
    assert await snapshot(store) == {}


async def test_unknown_route_and_method_are_json_errors(env: tuple[Store, Any]) -> None:
    _, api = env
    assert_error(*await call(api, "GET", "/v1/nothing-here"), 404, "not_found")
    assert_error(*await call(api, "PUT", "/v1/events"), 405, "method_not_allowed")


# ---------------------------------------------------------------------- endpoints


async def test_endpoint_crud(env: tuple[Store, Any]) -> None:
    store, api = env
    ep = await new_endpoint(
        api, app="shop", event_types=["order.*"], description="d", headers={"X-Team": "a"}
    )
    assert ep["id"].startswith("ep_") and ep["secret"].startswith("whsec_")
    assert ep["app"] == "shop" and ep["enabled"] is True and ep["rate_limit"] is None
    other = await new_endpoint(api)
    assert other["app"] == "default" and other["event_types"] == ["*"]

    status, got = await call(api, "GET", f"/v1/endpoints/{ep['id']}")
    assert status == 200 and "secret" not in got
    # the read shows what was created (plus read-only state such as the breaker)
    assert {k: got[k] for k in ep if k != "secret"} == {
        k: v for k, v in ep.items() if k != "secret"
    }

    status, listed = await call(api, "GET", "/v1/endpoints", params={"app": "shop"})
    assert status == 200 and [e["id"] for e in listed["data"]] == [ep["id"]]
    status, listed = await call(api, "GET", "/v1/endpoints")
    assert {e["id"] for e in listed["data"]} == {ep["id"], other["id"]}
    assert all("secret" not in e for e in listed["data"])

    status, patched = await call(
        api, "PATCH", f"/v1/endpoints/{ep['id']}", json={"description": "new", "enabled": False}
    )
    assert status == 200
    assert patched["description"] == "new" and patched["enabled"] is False
    unchanged = {k: v for k, v in got.items() if k not in ("description", "enabled", "updated_at")}
    assert {k: patched[k] for k in unchanged} == unchanged
    # the secret is untouched by a PATCH
    assert (await store.get_endpoint(ep["id"]))["secret"] == ep["secret"]  # type: ignore[index]

    async with api("DELETE", f"/v1/endpoints/{ep['id']}") as r:
        assert r.status == 204
    assert_error(*await call(api, "GET", f"/v1/endpoints/{ep['id']}"), 404, "not_found")
    assert_error(*await call(api, "DELETE", f"/v1/endpoints/{ep['id']}"), 404, "not_found")
    status, listed = await call(api, "GET", "/v1/endpoints", params={"app": "shop"})
    assert listed["data"] == []
    assert not await store.redis.exists(store.keys.app("shop"))


async def test_patch_moving_app_moves_fan_out(env: tuple[Store, Any]) -> None:
    store, api = env
    ep = await new_endpoint(api, app="old")
    assert targets(await publish(api, type="a", app="old")) == {ep["id"]}
    status, _ = await call(api, "PATCH", f"/v1/endpoints/{ep['id']}", json={"app": "new"})
    assert status == 200
    assert targets(await publish(api, type="a", app="old")) == set()
    assert targets(await publish(api, type="a", app="new")) == {ep["id"]}
    assert await store.redis.smembers(store.keys.app("old")) == set()
    status, listed = await call(api, "GET", "/v1/endpoints", params={"app": "new"})
    assert [e["id"] for e in listed["data"]] == [ep["id"]]


# ---------------------------------------------------------------------- publish


async def test_publish_fan_out_by_app_and_type(env: tuple[Store, Any]) -> None:
    store, api = env
    exact = await new_endpoint(api, app="shop", event_types=["order.paid"])
    prefix = await new_endpoint(api, app="shop", event_types=["order.*"])
    every = await new_endpoint(api, app="shop", event_types=["*"])
    users = await new_endpoint(api, app="shop", event_types=["user.created", "user.deleted"])
    off = await new_endpoint(api, app="shop", enabled=False)
    elsewhere = await new_endpoint(api, app="blog")

    event = await publish(api, type="order.paid", app="shop")
    assert event["id"].startswith("evt_") and event["type"] == "order.paid"
    assert event["app"] == "shop" and event["created_at"].endswith("Z")
    assert all(d["id"].startswith("dlv_") for d in event["deliveries"])
    assert targets(event) == {exact["id"], prefix["id"], every["id"]}
    assert targets(await publish(api, type="order", app="shop")) == {every["id"]}
    assert targets(await publish(api, type="order.refund.done", app="shop")) == {
        prefix["id"],
        every["id"],
    }
    assert targets(await publish(api, type="user.deleted", app="shop")) == {
        every["id"],
        users["id"],
    }
    assert targets(await publish(api, type="order.paid")) == set()  # app "default"
    assert targets(await publish(api, type="x", app="blog")) == {elsewhere["id"]}
    # the disabled one got nothing, in any of those publishes
    assert not await store.redis.exists(store.keys.shard(0).endpoint_index(off["id"]))

    only = await publish(
        api, type="order.paid", app="shop", endpoint_ids=[exact["id"], users["id"]]
    )
    assert targets(only) == {exact["id"]}

    status, got = await call(api, "GET", f"/v1/events/{event['id']}")
    assert status == 200 and got["payload"] == {"n": 1}
    assert got["deliveries"] == event["deliveries"] and got["created_at"] == event["created_at"]
    for d in event["deliveries"]:
        status, dlv = await call(api, "GET", f"/v1/deliveries/{d['id']}")
        assert dlv["status"] == "pending" and dlv["event_id"] == event["id"]


async def test_publish_to_endpoint_of_another_app_is_refused(env: tuple[Store, Any]) -> None:
    store, api = env
    blog = await new_endpoint(api, app="blog")
    before = await snapshot(store)
    status, data = await call(
        api, "POST", "/v1/events", json={"type": "a", "payload": 1, "endpoint_ids": [blog["id"]]}
    )
    assert_error(status, data, 422, "unknown_endpoint")
    assert await snapshot(store) == before


async def test_idempotency_key(env: tuple[Store, Any]) -> None:
    store, api = env
    await new_endpoint(api)
    await new_endpoint(api)
    body = {"type": "order.paid", "payload": {"n": 1, "m": [1, 2]}}
    head = {"Idempotency-Key": "order-42"}
    status, first = await call(api, "POST", "/v1/events", json=body, headers=head)
    assert status == 201 and len(first["deliveries"]) == 2
    before = await snapshot(store)
    # same body (keys in another order) -> the first answer again, nothing new
    same = {"payload": {"m": [1, 2], "n": 1}, "type": "order.paid"}
    status, again = await call(api, "POST", "/v1/events", json=same, headers=head)
    assert status == 200 and again == first
    await new_endpoint(api, app="other")  # (other app: does not change the default fan-out)
    before = await snapshot(store)
    status, again = await call(api, "POST", "/v1/events", json=body, headers=head)
    assert status == 200 and again == first
    status, data = await call(
        api, "POST", "/v1/events", json={**body, "payload": {"n": 2}}, headers=head
    )
    assert_error(status, data, 409, "idempotency_key_reused")
    assert await snapshot(store) == before
    assert await store.redis.zrange(store.keys.shard(0).events, 0, -1) == [first["id"]]
    assert await store.redis.zcard(store.keys.shard(0).due) == 2  # its two deliveries
    # the same key in another app is another key
    status, _ = await call(api, "POST", "/v1/events", json={**body, "app": "other"}, headers=head)
    assert status == 201


async def test_idempotency_key_concurrent_publishes_create_one_event(
    env: tuple[Store, Any],
) -> None:
    store, api = env
    await new_endpoint(api)
    body = {"type": "t", "payload": [1]}
    results = await asyncio.gather(
        *(
            call(api, "POST", "/v1/events", json=body, headers={"Idempotency-Key": "race"})
            for _ in range(10)
        )
    )
    assert sorted(s for s, _ in results) == [200] * 9 + [201]
    assert len({orjson.dumps(d) for _, d in results}) == 1
    assert len(await event_ids(store, 0)) == 1
    assert await store.redis.zcard(store.keys.shard(0).events) == 1


async def test_many_concurrent_publishes_are_all_accepted(make_store: Any, make_api: Any) -> None:
    """More requests at once than redis-py's default pool (100 connections) holds: each
    waits for a connection rather than failing. Fails with a non-blocking pool in
    store.connect (answers 500, MaxConnectionsError). The 400 connections come from one
    address: no per-client cap here."""
    store = await make_store(max_payload_bytes=2000, max_connections_per_client=0)
    api = await make_api(store)
    await new_endpoint(api)
    connector = aiohttp.TCPConnector(limit=0)
    headers = {"Authorization": "Bearer test-token"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def one(n: int) -> int:
            async with session.post(api.url + "/v1/events", json={"type": "a", "payload": n}) as r:
                return r.status

        codes = await asyncio.gather(*(one(n) for n in range(400)))
    assert codes == [201] * 400
    assert len(await event_ids(store, 0)) == 400


# ---------------------------------------------------------------------- bad input

BIG = {"type": "a", "payload": "x" * 2100}  # max_payload_bytes is 2000 in these tests

BAD_EVENTS: list[tuple[str, dict[str, Any], int]] = [
    ("malformed json", {"data": b'{"type": "a", "payload": '}, 400),
    ("not utf-8", {"data": b'{"type": "\xff\xfe"}'}, 400),
    ("empty body", {"data": b""}, 400),
    ("json array", {"json": [{"type": "a", "payload": 1}]}, 422),
    ("json string", {"json": "hello"}, 422),
    ("json null", {"data": b"null"}, 422),
    ("type is a number", {"json": {"type": 5, "payload": 1}}, 422),
    ("type empty", {"json": {"type": "", "payload": 1}}, 422),
    ("type with spaces", {"json": {"type": "a b", "payload": 1}}, 422),
    ("payload missing", {"json": {"type": "a"}}, 422),
    ("unknown field", {"json": {"type": "a", "payload": 1, "extra": 1}}, 422),
    ("bad app", {"json": {"type": "a", "payload": 1, "app": "no spaces"}}, 422),
    ("endpoint_ids not a list", {"json": {"type": "a", "payload": 1, "endpoint_ids": "x"}}, 422),
    ("unknown endpoint id", {"json": {"type": "a", "payload": 1, "endpoint_ids": ["ep_x"]}}, 422),
    ("too deep", {"data": b'{"type":"a","payload":' + b"[" * 2000 + b"]" * 2000 + b"}"}, 400),
    ("number overflow", {"data": b'{"type":"a","payload":1e999}'}, 400),
    ("payload over limit", {"json": BIG}, 413),
    ("body over client max", {"json": {"type": "a", "payload": "x" * 200_000}}, 413),
    (
        "idempotency key too long",
        {"json": {"type": "a", "payload": 1}, "headers": {"Idempotency-Key": "k" * 300}},
        422,
    ),
]

BAD_ENDPOINTS: list[tuple[str, dict[str, Any]]] = [
    ("url missing", {}),
    ("url ftp", {"url": "ftp://x"}),
    ("url not a url", {"url": "not a url"}),
    ("url with credentials", {"url": "http://u:p@127.0.0.1/"}),
    ("url a number", {"url": 5}),
    ("event_types empty string", {"url": "http://h/", "event_types": [""]}),
    ("event_types empty list", {"url": "http://h/", "event_types": []}),
    ("event_types bad wildcard", {"url": "http://h/", "event_types": ["a*"]}),
    ("reserved header", {"url": "http://h/", "headers": {"webhook-signature": "v1,x"}}),
    ("reserved header case", {"url": "http://h/", "headers": {"User-Agent": "x"}}),
    ("header value newline", {"url": "http://h/", "headers": {"X-A": "a\r\nB: c"}}),
    ("header value not a string", {"url": "http://h/", "headers": {"X-A": 5}}),
    ("unknown field", {"url": "http://h/", "colour": "red"}),
    ("short secret", {"url": "http://h/", "secret": "whsec_short"}),
    ("secret without prefix", {"url": "http://h/", "secret": "A" * 40}),
    ("rate_limit zero", {"url": "http://h/", "rate_limit": 0}),
    ("enabled a string", {"url": "http://h/", "enabled": "maybe"}),
]

BAD_PATCHES: list[tuple[str, dict[str, Any]]] = [
    ("url ftp", {"url": "ftp://x"}),
    ("unknown field", {"secret": "whsec_" + "A" * 40}),
    ("reserved header", {"headers": {"Webhook-Id": "x"}}),
    ("url null", {"url": None}),
    ("app null", {"app": None}),
    ("event_types null", {"event_types": None}),
    ("enabled null", {"enabled": None}),
    ("headers null", {"headers": None}),
    ("description null", {"description": None}),
    ("event_types bad", {"event_types": ["*x"]}),
]


@pytest.mark.parametrize(("case", "kw", "expected"), BAD_EVENTS, ids=[c[0] for c in BAD_EVENTS])
async def test_bad_publish_changes_nothing(
    env: tuple[Store, Any], case: str, kw: dict[str, Any], expected: int
) -> None:
    store, api = env
    await new_endpoint(api)
    before = await snapshot(store)
    assert_error(*await call(api, "POST", "/v1/events", **kw), expected)
    assert await snapshot(store) == before


@pytest.mark.parametrize(("case", "body"), BAD_ENDPOINTS, ids=[c[0] for c in BAD_ENDPOINTS])
async def test_bad_endpoint_changes_nothing(
    env: tuple[Store, Any], case: str, body: dict[str, Any]
) -> None:
    store, api = env
    await new_endpoint(api)
    before = await snapshot(store)
    status, data = await call(api, "POST", "/v1/endpoints", json=body)
    assert_error(status, data, 422, "validation_error")
    assert "whsec_short" not in data["message"]  # input is never echoed back
    assert await snapshot(store) == before


@pytest.mark.parametrize(("case", "body"), BAD_PATCHES, ids=[c[0] for c in BAD_PATCHES])
async def test_bad_patch_changes_nothing(
    env: tuple[Store, Any], case: str, body: dict[str, Any]
) -> None:
    store, api = env
    ep = await new_endpoint(api)
    before = await snapshot(store)
    status, data = await call(api, "PATCH", f"/v1/endpoints/{ep['id']}", json=body)
    assert_error(status, data, 422, "validation_error")
    assert await snapshot(store) == before


JUNK = [b"", b"null", b"[]", b"{", b"\x00\xff", b'{"a":1}', b"1" * 50, b'{"since": "x"}']


async def test_junk_bodies_on_every_write_route(env: tuple[Store, Any]) -> None:
    """Every route that takes a body answers junk with a 4xx and writes nothing."""
    store, api = env
    ep = await new_endpoint(api)
    before = await snapshot(store)
    routes = [s for s in ROUTES if s.body is not None]
    assert {(s.method, s.path) for s in routes} >= {
        ("POST", "/v1/endpoints"),
        ("PATCH", "/v1/endpoints/{id}"),
        ("POST", "/v1/events"),
    }
    for spec in routes:
        path = spec.path.replace("{id}", ep["id"])
        for junk in JUNK:
            if junk == b"" and spec.path.endswith("/recover"):
                continue  # its body is optional: no body means "all dead letters"
            status, data = await call(api, spec.method, path, data=junk)
            assert 400 <= status < 500, (spec.path, junk, status)
            # the Svix-compatible API answers errors in Svix's shape
            shape = {"code", "detail"} if path.startswith("/api/v1/") else {"error", "message"}
            assert set(data) >= shape
    assert await snapshot(store) == before


async def test_unknown_ids_are_404(env: tuple[Store, Any]) -> None:
    store, api = env
    await publish(api, type="a")
    before = await snapshot(store)
    unknown = [
        ids.new_id("ep"),
        "nope",
        ids.new_id("dlv", 7),  # a shard this deployment does not have
        ids.new_id("dlv"),
        ids.new_id("evt"),
        "dlv_" + "!" * 26,
    ]
    for x in unknown:
        for method, path, kw in (
            ("GET", f"/v1/endpoints/{x}", {}),
            ("PATCH", f"/v1/endpoints/{x}", {"json": {"description": "x"}}),
            ("DELETE", f"/v1/endpoints/{x}", {}),
            ("POST", f"/v1/endpoints/{x}/rotate-secret", {}),
            ("POST", f"/v1/endpoints/{x}/recover", {}),
            ("GET", f"/v1/events/{x}", {}),
            ("GET", f"/v1/deliveries/{x}", {}),
            ("POST", f"/v1/deliveries/{x}/replay", {}),
        ):
            assert_error(*await call(api, method, path, **kw), 404, "not_found")
    assert await snapshot(store) == before


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "0"},
        {"limit": "501"},
        {"limit": "abc"},
        {"limit": "-1"},
        {"status": "bogus"},
        {"cursor": "x" * 513},
        {"colour": "red"},
    ],
)
async def test_bad_delivery_query_is_422(env: tuple[Store, Any], params: dict[str, str]) -> None:
    store, api = env
    await publish(api, type="a")
    before = await snapshot(store)
    assert_error(*await call(api, "GET", "/v1/deliveries", params=params), 422, "validation_error")
    assert await snapshot(store) == before


@pytest.mark.parametrize("cursor", ["not-a-cursor", "W251bGxd", "WzEuMCwiZGx2X3giXQ", ""])
async def test_a_cursor_relay_did_not_make_is_400(env: tuple[Store, Any], cursor: str) -> None:
    """Cursors are sealed: garbage, a readable ``[score, id]`` (``WzEuMCwiZGx2X3giXQ``)
    and a sealed one changed by a character are all ``invalid_cursor``. Seen failing:
    422 ``validation_error`` for the garbage, 200 for the readable one."""
    store, api = env
    await new_endpoint(api)
    for _ in range(3):
        await publish(api, type="a")
    status, page = await call(api, "GET", "/v1/deliveries", params={"limit": "1"})
    assert status == 200
    made = page["next_cursor"]
    tampered = made[:-2] + ("A" if made[-2] != "A" else "B") + made[-1]
    before = await snapshot(store)
    for bad in (cursor or tampered, made + "x"):
        got = await call(api, "GET", "/v1/deliveries", params={"limit": "1", "cursor": bad})
        assert_error(*got, 400, "invalid_cursor")
    assert await snapshot(store) == before


async def test_bad_endpoint_query_is_422(env: tuple[Store, Any]) -> None:
    _, api = env
    assert_error(*await call(api, "GET", "/v1/endpoints", params={"app": "a b"}), 422)


# ---------------------------------------------------------------------- deliveries


async def _dead_delivery(store: Store, api: Any) -> tuple[str, str]:
    """Publish to two endpoints and kill one delivery through the store; (dead, pending)."""
    await new_endpoint(api)
    await new_endpoint(api)
    event = await publish(api, type="a")
    sk = store.keys.shard(0)
    res = await store.claim(sk, limit=1, lease_ms=60_000, token_prefix="t", worker="w-test")
    c = res.items[0]
    entry = orjson.dumps({"attempt": 1, "at": 1, "status_code": 410, "worker": "w-test"})
    await store.record(sk, [Outcome(c.id, c.token, "dead", 0, 410, "http_status", entry)])
    (other,) = [d["id"] for d in event["deliveries"] if d["id"] != c.id]
    return c.id, other


async def test_replay_dead_202_pending_409(env: tuple[Store, Any]) -> None:
    store, api = env
    dead, pending = await _dead_delivery(store, api)
    before = await snapshot(store)
    status, data = await call(api, "POST", f"/v1/deliveries/{pending}/replay")
    assert_error(status, data, 409, "delivery_not_replayable")
    assert await snapshot(store) == before
    status, data = await call(api, "POST", f"/v1/deliveries/{dead}/replay")
    assert status == 202 and data == {"id": dead, "status": "pending"}
    status, got = await call(api, "GET", f"/v1/deliveries/{dead}")
    assert got["status"] == "pending" and got["attempts"] == 0
    assert_error(*await call(api, "POST", f"/v1/deliveries/{dead}/replay"), 409)


async def test_delivery_detail_has_every_documented_field(env: tuple[Store, Any]) -> None:
    store, api = env
    dead, pending = await _dead_delivery(store, api)
    documented = {
        "id",
        "event_id",
        "endpoint_id",
        "status",
        "attempts",
        "next_attempt_at",
        "last_status_code",
        "last_error",
        "created_at",
        "updated_at",
        "attempt_log",
    }
    for d in (dead, pending):
        status, got = await call(api, "GET", f"/v1/deliveries/{d}")
        assert status == 200
        assert documented <= set(got), documented - set(got)
    status, got = await call(api, "GET", f"/v1/deliveries/{dead}")
    assert got["status"] == "dead" and got["last_status_code"] == 410
    assert got["last_error"] == "http_status" and got["next_attempt_at"] is None
    assert got["finished_at"] is not None
    (entry,) = got["attempt_log"]
    assert entry["n"] == 1 and entry["status_code"] == 410 and entry["worker"] == "w-test"
    status, got = await call(api, "GET", f"/v1/deliveries/{pending}")
    assert got["next_attempt_at"] <= time.time() * 1000 and got["attempt_log"] == []
    assert got["last_status_code"] is None and got["last_error"] is None


async def test_list_deliveries_pages_and_filters(env: tuple[Store, Any]) -> None:
    store, api = env
    dead, _pending = await _dead_delivery(store, api)
    for _ in range(5):
        await publish(api, type="b")
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        status, page = await call(api, "GET", "/v1/deliveries", params=params)
        assert status == 200 and len(page["data"]) <= 3
        seen += [d["id"] for d in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 12
    status, page = await call(api, "GET", "/v1/deliveries", params={"status": "dead"})
    assert [d["id"] for d in page["data"]] == [dead]
    status, page = await call(api, "GET", "/v1/stats")
    assert status == 200 and page["counts"]["dead"] == 1 and page["counts"]["pending"] == 11


# ---------------------------------------------------------------------- openapi


async def test_openapi_lists_every_route(env: tuple[Store, Any]) -> None:
    _, api = env
    status, doc = await call(api, "GET", "/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")
    listed = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert listed == {(s.method, s.path) for s in ROUTES}
    for path in (
        "/v1/endpoints",
        "/v1/endpoints/{id}",
        "/v1/endpoints/{id}/rotate-secret",
        "/v1/endpoints/{id}/recover",
        "/v1/events",
        "/v1/events/{id}",
        "/v1/deliveries",
        "/v1/deliveries/{id}",
        "/v1/deliveries/{id}/replay",
        "/v1/stats",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert path in doc["paths"], path
    schema = doc["components"]["schemas"]["EndpointIn"]
    assert "url" in schema["required"]


async def test_list_deliveries_filters_by_event_type(env: tuple[Store, Any]) -> None:
    _, api = env
    await new_endpoint(api)
    paid = await publish(api, type="order.paid")
    await publish(api, type="customer.created")
    status, data = await call(api, "GET", "/v1/deliveries", params={"type": "order.*"})
    assert status == 200
    assert [d["event_id"] for d in data["data"]] == [paid["id"]]
    for bad in ("bad type!", "*.paid", "order.**"):
        assert_error(
            *await call(api, "GET", "/v1/deliveries", params={"type": bad}), 422, "validation_error"
        )
