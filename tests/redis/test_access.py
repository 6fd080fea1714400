"""Every /v1 route x every kind of caller: the status each gets comes from ONE table.

The table's routes are held to the OpenAPI document (generated from the route table),
so a route added without a row here fails, and a row's statuses are asserted for: the
operator (admin), keys of app A with each scope alone, a portal session of A, a key of
app B with every scope, a revoked key of A, an expired portal session of A, no token.
Every answer B gets is searched for every id of A (nothing of A is readable with B's
key, not even in a listing), and every answer A's callers get for B's. Logs of the
whole run are captured and searched for every token.

A row is one line: ``R("METHOD /path", target, "admin pub read manage portal B revoked
expired none")``; ``target`` says what ``{id}`` (or ``{app}``, ``{name}``) is, a
trailing ``!`` meaning a fresh one per request (for routes that change or use it up).
The catalog's routes (``{name}``) and ordered delivery's discard have their rows too.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest
import structlog
from aiohttp import web

from relay.api import create_app
from relay.delivery.worker import Worker
from relay.domain.access import token_hash
from relay.domain.schema import endpoint_record
from tests.helpers import publish_event
from tests.helpers.api import snapshot

pytestmark = pytest.mark.realredis

COLUMNS = (
    "admin",
    "A:publish",
    "A:read",
    "A:manage",
    "A:portal",
    "B",
    "revoked",
    "expired",
    "none",
)
NO = "401 401 401"  # revoked key, expired portal session, no token


@dataclass(frozen=True)
class R:
    route: str  # "METHOD /path" as in the OpenAPI document
    target: str  # what {id} / {app} is: endpoint, event, delivery, app, key, replay; "!" fresh
    statuses: str  # one per COLUMNS entry
    body: dict[str, Any] | None = field(default=None, hash=False)


WINDOW = {"since": "2026-01-01T00:00:00Z", "until": "2027-01-01T00:00:00Z"}

TABLE = [
    # route                                    target       admin pub read man. portal B
    R("POST /v1/endpoints", "", f"201 403 403 201 201 201 {NO}", {"url": "http://127.0.0.1:9/n"}),
    R("GET /v1/endpoints", "", f"200 403 200 200 200 200 {NO}"),
    R("GET /v1/endpoints/{id}", "endpoint", f"200 403 200 200 200 404 {NO}"),
    R("GET /v1/endpoints/{id}/stats", "endpoint", f"200 403 200 200 200 404 {NO}"),
    R(
        "PATCH /v1/endpoints/{id}",
        "endpoint",
        f"200 403 403 200 200 404 {NO}",
        {"description": "d"},
    ),
    R("DELETE /v1/endpoints/{id}", "endpoint!", f"204 403 403 204 204 404 {NO}"),
    R("GET /v1/endpoints/{id}/secret", "endpoint", f"200 403 403 200 200 404 {NO}"),
    R("GET /v1/endpoints/{id}/headers", "endpoint", f"200 403 403 200 200 404 {NO}"),
    R("GET /v1/endpoints/{id}/url", "endpoint", f"200 403 403 200 200 404 {NO}"),
    R("POST /v1/endpoints/{id}/rotate-secret", "endpoint!", f"200 403 403 200 200 404 {NO}"),
    R("POST /v1/endpoints/{id}/recover", "endpoint!", f"202 403 403 202 202 404 {NO}"),
    R("POST /v1/endpoints/{id}/test", "endpoint", f"201 403 403 201 201 404 {NO}"),
    R("POST /v1/events", "", f"201 201 403 403 403 201 {NO}", {"type": "t.x", "payload": 1}),
    R(
        "POST /v1/events/batch",
        "",
        f"200 200 403 403 403 200 {NO}",
        {"events": [{"type": "t.x", "payload": 1, "idempotency_key": "k"}]},
    ),
    R("GET /v1/events", "", f"200 403 200 200 200 200 {NO}"),
    R("GET /v1/events/{id}", "event", f"200 403 200 200 200 404 {NO}"),
    R("GET /v1/deliveries", "", f"200 403 200 200 200 200 {NO}"),
    R("GET /v1/deliveries/{id}", "delivery", f"200 403 200 200 200 404 {NO}"),
    R("GET /v1/archive/deliveries", "", f"200 403 200 200 200 200 {NO}"),
    R("POST /v1/deliveries/{id}/replay", "delivery!", f"202 403 403 202 202 404 {NO}"),
    R("POST /v1/deliveries/{id}/discard", "delivery!", f"202 403 403 202 202 404 {NO}"),
    R("POST /v1/apps/{app}/portal", "app", f"201 403 403 201 403 404 {NO}"),
    R("GET /v1/portal/session", "", f"404 403 404 404 200 404 {NO}"),
    R("POST /v1/api-keys", "", f"201 403 403 403 403 403 {NO}", {"app": "A", "scopes": ["read"]}),
    R("GET /v1/api-keys", "", f"200 403 403 403 403 403 {NO}"),
    R("DELETE /v1/api-keys/{id}", "key!", f"204 403 403 403 403 403 {NO}"),
    R("POST /v1/replays", "", f"200 403 403 403 403 403 {NO}", {**WINDOW, "dry_run": True}),
    R("GET /v1/replays", "", f"200 403 403 403 403 403 {NO}"),
    R("GET /v1/replays/{id}", "replay", f"200 403 403 403 403 403 {NO}"),
    R("POST /v1/replays/{id}/cancel", "replay!", f"200 403 403 403 403 403 {NO}"),
    R("GET /v1/stats", "", f"200 403 403 403 403 403 {NO}"),
    R("GET /v1/ui/overview", "", f"200 403 403 403 403 403 {NO}"),
    R("GET /v1/ui/deliveries", "", f"200 403 403 403 403 403 {NO}"),
    R("GET /v1/ui/deliveries/{id}", "delivery", f"200 403 403 403 403 403 {NO}"),
    R("GET /v1/ui/endpoint-health", "", f"200 403 403 403 403 403 {NO}"),
    # the event type catalog: shared by every app, so keys read it, the operator writes it
    R("GET /v1/event-types", "", f"200 403 200 200 200 200 {NO}"),
    R("GET /v1/event-types/{name}", "event-type", f"200 403 200 200 200 200 {NO}"),
    R("POST /v1/event-types", "", f"201 403 403 403 403 403 {NO}", {"name": "t.new"}),
    R(
        "PATCH /v1/event-types/{name}",
        "event-type!",
        f"200 403 403 403 403 403 {NO}",
        {"description": "d"},
    ),
    R("DELETE /v1/event-types/{name}", "event-type!", f"204 403 403 403 403 403 {NO}"),
]


class World:
    """Two apps, A and B, their resources, and one bearer token per column."""

    def __init__(self, api: Any, store: Any, receiver: Any) -> None:
        self.api, self.store, self.receiver = api, store, receiver
        self.tokens: dict[str, str | None] = {"admin": "test-token", "none": None}
        self.a_ids: set[str] = set()  # every id of app A: never in an answer to B
        self.b_ids: set[str] = set()
        self.secrets: set[str] = set()  # tokens and endpoint secrets: never in a log
        self.dead: list[str] = []  # dead deliveries of A, one per replay or discard request

    async def admin(self, method: str, path: str, status: int, **kw: Any) -> Any:
        async with self.api.session.request(method, self.api.url + path, **kw) as resp:
            raw = await resp.read()
            assert resp.status == status, (method, path, resp.status, raw[:300])
            return orjson.loads(raw) if raw else None

    async def key(self, app: str, scopes: list[str]) -> dict[str, Any]:
        made = await self.admin("POST", "/v1/api-keys", 201, json={"app": app, "scopes": scopes})
        self.secrets.add(made["token"])
        return dict(made)

    async def endpoint(self, app: str = "A", path: str = "/ok") -> str:
        ep = await self.admin(
            "POST", "/v1/endpoints", 201, json={"url": self.receiver.url + path, "app": app}
        )
        self.secrets.add(ep["secret"])
        (self.a_ids if app == "A" else self.b_ids).add(ep["id"])
        return str(ep["id"])

    async def build(self) -> None:
        self.receiver.responses["/gone"] = lambda request: web.Response(status=410)
        for column, scopes in (("A:publish", ["publish"]), ("A:read", ["read"])):
            self.tokens[column] = (await self.key("A", scopes))["token"]
        self.tokens["A:manage"] = (await self.key("A", ["manage"]))["token"]
        self.tokens["B"] = (await self.key("B", ["publish", "read", "manage"]))["token"]
        revoked = await self.key("A", ["publish", "read", "manage"])
        await self.admin("DELETE", f"/v1/api-keys/{revoked['id']}", 204)
        self.tokens["revoked"] = revoked["token"]
        portal = await self.admin("POST", "/v1/apps/A/portal", 201)
        self.tokens["A:portal"] = portal["token"]
        self.secrets.add(portal["token"])
        expired = await self.store.create_portal_session(
            session_id="prt_gone", app="A", scopes=["read", "manage"],
            token_hash=token_hash("rp_expired"),
            ttl_ms=1,
        )  # fmt: skip
        await asyncio.sleep(0.01)  # 1 ms of TTL: past it (checked, not assumed)
        assert await self.store.now_ms() >= expired
        self.tokens["expired"] = "rp_expired"

        self.ep = await self.endpoint("A")
        # dead letters to replay and discard, over three endpoints: fewer failures each
        # than it takes to open a breaker (which would defer the rest)
        gone = [await self.endpoint("A", "/gone") for _ in range(3)]
        self.ep_b = await self.endpoint("B")
        events = []
        for n in range(2 * len(COLUMNS) + 1):  # replay and discard use one per column
            to = [gone[n % len(gone)]]
            event = {"type": "order.paid", "payload": {"n": n}, "app": "A", "endpoint_ids": to}
            events.append(await self.admin("POST", "/v1/events", 201, json=event))
        b_event = {"type": "order.paid", "payload": {}, "app": "B"}
        b = await self.admin("POST", "/v1/events", 201, json=b_event)
        self.b_ids |= {b["id"], *(d["id"] for d in b["deliveries"])}
        for e in events:
            self.a_ids |= {e["id"], *(d["id"] for d in e["deliveries"])}
            self.dead += [d["id"] for d in e["deliveries"]]
        await Worker(self.store, self.store.settings).run(asyncio.Event(), burst=True)
        statuses = [(await self.store.get_delivery(d) or {}).get("status") for d in self.dead]
        assert set(statuses) == {"dead"}, statuses
        self.event = events[0]["id"]
        self.delivery = self.dead.pop()
        self.replay = (await self.admin("POST", "/v1/replays", 202, json=WINDOW))["id"]

    async def target(self, kind: str) -> str:
        if kind == "endpoint":
            return self.ep
        if kind == "endpoint!":
            return await self.endpoint("A")
        if kind == "event":
            return str(self.event)
        if kind == "delivery":
            return str(self.delivery)
        if kind == "delivery!":
            return self.dead.pop()
        if kind == "app":
            return "A"
        if kind == "key!":
            return str((await self.key("A", ["read"]))["id"])
        if kind == "replay":
            return str(self.replay)
        if kind in ("event-type", "event-type!"):  # the catalog's routes ({name})
            if kind == "event-type" and getattr(self, "event_type", None):
                return str(self.event_type)
            name = f"t.{uuid.uuid4().hex[:8]}"
            await self.admin("POST", "/v1/event-types", 201, json={"name": name})
            if kind == "event-type":
                self.event_type = name
            return name
        if kind == "replay!":
            return str((await self.admin("POST", "/v1/replays", 202, json=WINDOW))["id"])
        raise AssertionError(f"unknown target {kind!r}")


def openapi_routes(doc: dict[str, Any]) -> set[str]:
    return {
        f"{method.upper()} {path}"
        for path, ops in doc["paths"].items()
        if path.startswith("/v1/")
        for method in ops
    }


async def test_every_route_and_caller_gets_the_status_of_the_table(
    make_store: Any, make_api: Any, receiver: Any, caplog: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    store = await make_store()
    api = await make_api(store)
    async with api.session.get(api.url + "/openapi.json") as r:
        doc = await r.json()
    rows = {row.route: row for row in TABLE}
    assert len(rows) == len(TABLE), "a route has two rows"
    assert sorted(openapi_routes(doc) - set(rows)) == [], "routes with no row in TABLE"
    assert sorted(set(rows) - openapi_routes(doc)) == [], "rows of routes that do not exist"

    world = World(api, store, receiver)
    await world.build()
    sessions = {
        c: aiohttp.ClientSession(headers={"Authorization": f"Bearer {t}"} if t else {})
        for c, t in world.tokens.items()
    }
    wrong: list[str] = []
    leaks: list[str] = []
    try:
        with structlog.testing.capture_logs() as logs:
            for row in TABLE:
                method, template = row.route.split(" ", 1)
                expected = row.statuses.split()
                assert len(expected) == len(COLUMNS), row.route
                for column, want in zip(COLUMNS, expected, strict=True):
                    path, value = template, ""
                    if "{" in template:
                        value = await world.target(row.target)
                        path = re.sub(r"\{(id|app|name)\}", value, template)
                    kw = {"json": row.body} if row.body is not None else {}
                    async with sessions[column].request(method, api.url + path, **kw) as resp:
                        raw = await resp.read()
                        got = resp.status
                    if str(got) != want:
                        wrong.append(f"{row.route} as {column}: {got}, table says {want}")
                    if str(got) not in doc["paths"][template][method.lower()]["responses"]:
                        wrong.append(f"{row.route} as {column}: {got} is not in /openapi.json")
                    if got >= 400:
                        error = orjson.loads(raw)["error"]
                        code = {401: "unauthorized", 403: "forbidden", 404: "not_found"}
                        if column == "expired":
                            assert error == "token_expired", (row.route, raw)
                        elif got in code:
                            assert error == code[got], (row.route, column, raw)
                    # a 404 names the id asked for; anything else of A's would be a leak
                    text = raw.decode().replace(value, "") if got == 404 else raw.decode()
                    others = world.a_ids if column == "B" else world.b_ids
                    if column != "admin":
                        leaks += [f"{row.route} as {column}: {i}" for i in others if i in text]
    finally:
        for s in sessions.values():
            await s.close()
    assert wrong == []
    assert leaks == []
    logged = "\n".join(map(repr, logs)) + caplog.text
    assert logs or caplog.text  # the run logged something (delivery attempts at least)
    assert [s for s in world.secrets | {"rp_expired"} if s in logged] == []


async def test_listings_and_filters_of_another_app_are_empty(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    world = World(api, store, receiver)
    await world.build()
    b = {"Authorization": f"Bearer {world.tokens['B']}"}
    a = {"Authorization": f"Bearer {world.tokens['A:read']}"}
    async with aiohttp.ClientSession(headers=b) as as_b, aiohttp.ClientSession(headers=a) as as_a:
        for path in (
            "/v1/endpoints?app=A",
            f"/v1/deliveries?endpoint_id={world.ep}",
            f"/v1/deliveries?event_id={world.event}",
            "/v1/deliveries?status=dead",
        ):
            async with as_b.get(api.url + path) as resp:
                assert resp.status == 200 and (await resp.json())["data"] == [], path
        async with as_a.get(api.url + "/v1/endpoints") as resp:
            assert sorted(e["id"] for e in (await resp.json())["data"]) == sorted(
                i for i in world.a_ids if i.startswith("ep_")
            )
        async with as_a.get(api.url + "/v1/deliveries?limit=500") as resp:
            listed = {d["id"] for d in (await resp.json())["data"]}
            assert listed and listed <= world.a_ids
        # publish and create are pinned to the key's app: another app named is 403
        m = {"Authorization": f"Bearer {(await world.key('A', ['publish', 'manage']))['token']}"}
        for path, payload in (
            ("/v1/events", {"type": "t", "payload": 1, "app": "B"}),
            ("/v1/endpoints", {"url": "http://127.0.0.1:9/x", "app": "B"}),
        ):
            async with as_b.post(api.url + path, json=payload, headers=m) as resp:
                assert resp.status == 403, path
        async with as_b.post(
            api.url + "/v1/events", json={"type": "t", "payload": 1}, headers=m
        ) as resp:
            assert resp.status == 201 and (await resp.json())["app"] == "A"
        async with as_b.patch(
            api.url + f"/v1/endpoints/{world.ep}", json={"app": "B"}, headers=m
        ) as resp:
            assert resp.status == 403
        assert (await store.get_endpoint(world.ep) or {})["app"] == "A"


async def test_the_rate_limit_is_one_budget_across_api_replicas(
    make_store: Any, make_api: Any
) -> None:
    """Two API processes' apps on one Redis: the rate limit is one budget across both,
    and the operator's tokens are not limited. Fails with the rate key made per process
    (a random suffix in ``Keys.api_rate``): the third request, on the second replica,
    gets 200."""
    store = await make_store(api_rate=0.01, api_burst=2)  # 2 at once, then 1 per 100 s
    other = await make_store(api_rate=0.01, api_burst=2)
    one, two = await make_api(store), await make_api(other)
    made = await (await one.session.post(one.url + "/v1/api-keys", json={
        "app": "A", "scopes": ["read"]})).json()  # fmt: skip
    key = {"Authorization": f"Bearer {made['token']}"}
    async with aiohttp.ClientSession(headers=key) as s:
        for api, status in ((one, 200), (two, 200), (two, 429), (one, 429)):
            async with s.get(api.url + "/v1/endpoints") as resp:
                assert resp.status == status
                if status == 429:
                    assert (await resp.json())["error"] == "rate_limited"
                    assert 1 <= int(resp.headers["Retry-After"]) <= 100
        for _ in range(5):  # the operator's tokens are not limited
            async with one.session.get(one.url + "/v1/endpoints") as resp:
                assert resp.status == 200


async def test_a_revocation_holds_at_once_on_every_api_replica(
    make_store: Any, make_api: Any
) -> None:
    """Fails with a per-process cache of credentials put into ``Store.authenticate``: the
    second replica answers 200 after the revocation."""
    one, two = await make_api(await make_store()), await make_api(await make_store())
    made = await (await one.session.post(one.url + "/v1/api-keys", json={
        "app": "A", "scopes": ["read"]})).json()  # fmt: skip
    key = {"Authorization": f"Bearer {made['token']}"}
    async with aiohttp.ClientSession(headers=key) as s:
        for api in (one, two, two):
            async with s.get(api.url + "/v1/endpoints") as resp:
                assert resp.status == 200
        async with one.session.delete(one.url + f"/v1/api-keys/{made['id']}") as resp:
            assert resp.status == 204
        for api in (two, one):
            async with s.get(api.url + "/v1/endpoints") as resp:
                assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"


async def test_revoking_a_key_ends_the_portal_sessions_it_opened(
    make_store: Any, make_api: Any
) -> None:
    api = await make_api(await make_store())
    made = await (await api.session.post(api.url + "/v1/api-keys", json={
        "app": "A", "scopes": ["manage"]})).json()  # fmt: skip
    key = {"Authorization": f"Bearer {made['token']}"}
    async with aiohttp.ClientSession(headers=key) as s:
        async with s.post(api.url + "/v1/apps/A/portal") as resp:
            assert resp.status == 201
            by_key = (await resp.json())["token"]
    async with api.session.post(api.url + "/v1/apps/A/portal") as resp:
        by_operator = (await resp.json())["token"]
    async with api.session.delete(api.url + f"/v1/api-keys/{made['id']}") as resp:
        assert resp.status == 204
    for token, status in ((by_key, 401), (by_operator, 200)):
        bearer = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=bearer) as s:
            async with s.get(api.url + "/v1/endpoints") as resp:
                assert resp.status == status


async def test_portal_session_url_and_page_headers(make_store: Any, make_api: Any) -> None:
    store = await make_store(
        portal_ttl=120.0,
        portal_frame_ancestors="https://app.example.com",
        public_url="https://hooks.example.com",
    )
    api = await make_api(store)
    before = await store.now_ms()
    async with api.session.post(api.url + "/v1/apps/shop/portal") as resp:
        assert resp.status == 201
        made = await resp.json()
    assert made["url"] == f"https://hooks.example.com/portal/#token={made['token']}"
    assert made["token"].startswith("rp_") and len(made["token"]) > 40
    assert before + 120_000 <= made["expires_at"] <= await store.now_ms() + 120_000
    async with aiohttp.ClientSession() as anon, anon.get(api.url + "/portal/") as resp:
        assert resp.status == 200
        assert resp.headers["Referrer-Policy"] == "no-referrer"
        csp = resp.headers["Content-Security-Policy"]
        assert "frame-ancestors https://app.example.com" in csp
        assert "X-Frame-Options" not in resp.headers
    plain = await make_store()
    assert create_app(plain.settings, plain)  # the default: nothing may embed it
    api2 = await make_api(plain)
    async with aiohttp.ClientSession() as anon, anon.get(api2.url + "/portal/") as resp:
        assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
        assert resp.headers["X-Frame-Options"] == "DENY"
    # the session's token: its app, read and manage; no publishing, no new sessions
    bearer = {"Authorization": f"Bearer {made['token']}"}
    async with aiohttp.ClientSession(headers=bearer) as s:
        async with s.get(api.url + "/v1/endpoints") as resp:
            assert resp.status == 200
        async with s.post(api.url + "/v1/events", json={"type": "t", "payload": 1}) as resp:
            assert resp.status == 403
        async with s.post(api.url + "/v1/apps/shop/portal") as resp:
            assert resp.status == 403
    # an unknown token of the portal's form: unauthorized (not expired)
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer rp_nope"}) as s:
        async with s.get(api.url + "/v1/endpoints") as resp:
            assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"


async def test_tokens_are_stored_only_as_hashes(make_store: Any, make_api: Any) -> None:
    store = await make_store()
    api = await make_api(store)
    async with api.session.post(
        api.url + "/v1/api-keys", json={"app": "A", "scopes": ["read"], "name": "ci"}
    ) as resp:
        made = await resp.json()
    async with api.session.post(api.url + "/v1/apps/A/portal") as resp:
        portal = await resp.json()
    dump = []
    async for key in store.redis.scan_iter(match=store.settings.key_prefix + ":*"):
        kind = await store.redis.type(key)
        if kind == "string":
            dump.append(await store.redis.get(key))
        elif kind == "hash":
            dump.append(repr(await store.redis.hgetall(key)))
        dump.append(key)
    text = "\n".join(dump)
    assert made["token"] not in text and portal["token"] not in text
    async with api.session.get(api.url + "/v1/api-keys?app=A") as resp:
        listed = await resp.json()
    assert listed == {"data": [{k: made[k] for k in ("id", "app", "scopes", "name", "created_at")}]}


def test_tenancy_settings() -> None:
    from relay.settings import Settings, SettingsError

    env = {
        "RELAY_API_RATE": "600/m,5",
        "RELAY_PORTAL_TTL": "15m",
        "RELAY_PORTAL_FRAME_ANCESTORS": "'self' https://app.example.com:8443",
        "RELAY_PUBLIC_URL": "https://hooks.example.com/",
    }
    s = Settings.from_env(env)
    assert (s.api_rate, s.api_burst, s.portal_ttl) == (10.0, 5, 900.0)
    assert s.portal_frame_ancestors == "'self' https://app.example.com:8443"
    assert s.public_url == "https://hooks.example.com"
    d = Settings.from_env({})
    assert (d.api_rate, d.api_burst, d.portal_ttl, d.portal_frame_ancestors) == (100, 200, 3600, "")
    assert Settings.from_env({"RELAY_API_RATE": "0"}).api_rate == 0
    for name, bad in (
        ("RELAY_API_RATE", "10/d"),
        ("RELAY_API_RATE", "5,0"),
        ("RELAY_API_RATE", "-1"),
        ("RELAY_PORTAL_FRAME_ANCESTORS", "https://a.example.com; script-src *"),
        ("RELAY_PORTAL_FRAME_ANCESTORS", "'unsafe-inline'"),
        ("RELAY_PUBLIC_URL", "ftp://x"),
        ("RELAY_PUBLIC_URL", "https://a@evil.example"),
        ("RELAY_PUBLIC_URL", "https://hooks.example.com/?x"),
        ("RELAY_PUBLIC_URL", "https://hooks.example.com/#x"),
        ("RELAY_PORTAL_TTL", "0"),
    ):
        with pytest.raises(SettingsError):
            Settings.from_env({name: bad})


async def test_keys_and_sessions_on_a_redis_cluster(cluster_store: Any, make_api: Any) -> None:
    """The {auth} scripts on a real 3-master cluster: each call's keys in one slot."""
    store = await cluster_store()
    api = await make_api(store)
    made = await (await api.session.post(api.url + "/v1/api-keys", json={
        "app": "A", "scopes": ["manage"]})).json()  # fmt: skip
    key = {"Authorization": f"Bearer {made['token']}"}
    async with aiohttp.ClientSession(headers=key) as s:
        async with s.post(api.url + "/v1/endpoints", json={"url": "http://127.0.0.1:9/c"}) as r:
            assert r.status == 201 and (await r.json())["app"] == "A"
            ep = (await r.json())["id"]
        async with s.get(api.url + f"/v1/endpoints/{ep}") as r:
            assert r.status == 200
        async with s.post(api.url + "/v1/apps/A/portal") as r:
            portal = (await r.json())["token"]
        async with api.session.delete(api.url + f"/v1/api-keys/{made['id']}") as r:
            assert r.status == 204
        async with s.get(api.url + "/v1/endpoints") as r:
            assert r.status == 401
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {portal}"}) as s:
        async with s.get(api.url + "/v1/endpoints") as r:
            assert r.status == 401


async def raw_get(
    url: str, path: str, header: bytes, *, method: bytes = b"GET", host: bytes = b"127.0.0.1"
) -> tuple[int, str, bytes]:
    """``GET path`` with one raw header line, over a plain socket (aiohttp's client
    refuses to send bytes that are not UTF-8): (status, content type, body)."""
    address, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(address, int(port))
    writer.write(method + b" " + path.encode() + b" HTTP/1.1\r\nHost: " + host + b"\r\n")
    writer.write(header + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    types = [v for k, v in fields.items() if k.lower() == "content-type"]
    return int(lines[0].split()[1]), (types or [""])[0], payload


@pytest.mark.parametrize(
    "token",
    [
        b"\xe9t\xe9-latin-1",  # an operator-token-like value in latin-1
        b"test-token\xff",  # the operator's token with a stray byte
        b"rk_" + b"\xe9" * 40,  # of an API key's form
        b"rp_\xc3\x28",  # of a portal token's form, invalid UTF-8
    ],
)
async def test_a_token_that_is_not_utf8_is_401(
    make_store: Any, make_api: Any, token: bytes
) -> None:
    """Seen failing: 500 (``token.encode()`` raised UnicodeEncodeError on the
    surrogates aiohttp decodes such bytes to)."""
    api = await make_api(await make_store())
    for path in ("/v1/stats", "/v1/endpoints"):
        status, kind, payload = await raw_get(api.url, path, b"Authorization: Bearer " + token)
        assert (status, kind.split(";")[0]) == (401, "application/json"), payload[:300]
        assert orjson.loads(payload)["error"] == "unauthorized"


def revealed(cursor: str) -> str:
    """Whatever a client can read out of a cursor: its base64 decoded, as text."""
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    return raw.decode("latin-1")


async def test_a_cursor_reveals_nothing_and_serves_only_its_own_app(
    make_store: Any, make_api: Any
) -> None:
    """A listing of B that scans A's deliveries (and finds none of B's) still gives a
    cursor to go on with: it holds no id or time of A's, and only B's callers can use
    it. Seen failing: B's empty page carried a ``next_cursor`` that decoded to
    ``[<created ms>, "<A's delivery id>"]``."""
    store = await make_store()
    api = await make_api(store)
    ep = endpoint_record(url="http://127.0.0.1:9/a", app="A")
    await store.put_endpoint(ep)
    a_ids, a_times = set(), set()
    for _ in range(260):  # more than one page's scan budget (200 index entries)
        event_id, dlvs, _ = await publish_event(store, [ep["id"]], app="A")
        a_ids |= {event_id, *dlvs}
    for d in a_ids:
        if d.startswith("dlv_"):
            a_times.add(str((await store.get_delivery(d, with_log=False) or {})["created_at"]))

    async def key(app: str) -> str:
        async with api("POST", "/v1/api-keys", json={"app": app, "scopes": ["read"]}) as r:
            return str((await r.json())["token"])

    as_a = aiohttp.ClientSession(headers={"Authorization": f"Bearer {await key('A')}"})
    as_b = aiohttp.ClientSession(headers={"Authorization": f"Bearer {await key('B')}"})
    try:

        async def page(session: Any, cursor: str | None, limit: int = 1) -> tuple[int, Any]:
            params = {"limit": str(limit), **({"cursor": cursor} if cursor else {})}
            async with session.get(api.url + "/v1/deliveries", params=params) as r:
                return r.status, await r.json()

        cursors: list[str] = []
        cursor = None
        for _ in range(10):  # B's walk: empty pages, each with a cursor, then the end
            status, got = await page(as_b, cursor)
            assert status == 200 and got["data"] == []
            cursor = got["next_cursor"]
            if cursor is None:
                break
            cursors.append(cursor)
        assert cursor is None and cursors, "B's listing ends, after a page cut short"
        for c in cursors:
            text = revealed(c)
            assert [i for i in a_ids if i in text or i[4:] in text] == []
            assert [t for t in a_times if t in text or t[:10] in text] == []
        # B's cursor is B's: refused to A's key and to the operator, changing nothing
        for session in (as_a, api.session):
            status, got = await page(session, cursors[0])
            assert (status, got["error"]) == (400, "invalid_cursor"), got
        # A pages through its own deliveries: each once, none lost
        seen: list[str] = []
        cursor = None
        while True:
            status, got = await page(as_a, cursor, limit=7)
            assert status == 200
            seen += [d["id"] for d in got["data"]]
            cursor = got["next_cursor"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) and set(seen) == {i for i in a_ids if "dlv_" in i}
    finally:
        await as_a.close()
        await as_b.close()


@pytest.mark.parametrize(
    "host",
    [
        b"a@evil.example",
        b"evil.example",
        b"evil.example:8080",
        b"127.0.0.1@evil.example",
        b"127.0.0.1:80@evil.example",
        b"evil.example/portal/x?",
        b"127.0.0.1/../evil.example",
        b"127.0.0.1:99999",
        b"127.0.0.1:8x",
        b"127.0.0.1 evil.example",
        b"[::1]@evil.example",
        b"localhost.evil.example",
        b"",
    ],
)
async def test_without_a_public_url_a_portal_link_needs_a_loopback_host(
    make_store: Any, make_api: Any, host: bytes
) -> None:
    """No ``RELAY_PUBLIC_URL``: the link is built from the request's Host only when that
    is a plain loopback ``host[:port]`` (a developer's machine); anything else is 400
    ``public_url_required`` and opens no session. Seen failing: 201 with
    ``http://a@evil.example/portal/#token=rp_...``."""
    store = await make_store()
    api = await make_api(store)
    before = await snapshot(store)
    status, _, payload = await raw_get(
        api.url, "/v1/apps/A/portal", b"Authorization: Bearer test-token", method=b"POST",
        host=host,
    )  # fmt: skip
    assert status == 400, payload[:300]
    got = orjson.loads(payload)
    assert got["error"] == "public_url_required" and "RELAY_PUBLIC_URL" in got["message"]
    assert await snapshot(store) == before


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8080", "127.0.0.1:1", "127.9.9.9", "[::1]:80"]
)
async def test_a_loopback_host_builds_the_portal_link(
    make_store: Any, make_api: Any, host: str
) -> None:
    api = await make_api(await make_store())
    status, _, payload = await raw_get(
        api.url, "/v1/apps/A/portal", b"Authorization: Bearer test-token", method=b"POST",
        host=host.encode(),
    )  # fmt: skip
    assert status == 201, payload[:300]
    made = orjson.loads(payload)
    assert made["url"] == f"http://{host}/portal/#token={made['token']}"
    # with RELAY_PUBLIC_URL set, the Host is not used at all
    public = await make_api(await make_store(public_url="https://hooks.example.com"))
    status, _, payload = await raw_get(
        public.url, "/v1/apps/A/portal", b"Authorization: Bearer test-token", method=b"POST",
        host=b"a@evil.example",
    )  # fmt: skip
    made = orjson.loads(payload)
    assert (status, made["url"]) == (
        201,
        f"https://hooks.example.com/portal/#token={made['token']}",
    )
