"""``GET /v1/events`` (list and search) and ``GET /v1/events/{id}?expand=deliveries``.

Newest first across shards, every filter alone and together, cursor paging, the lookup
by Idempotency-Key (beyond the idempotency record's own life), an app key seeing only
its app's events, and bad queries answered 4xx with nothing written.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from relay.queue.store import Outcome, Store
from tests.helpers.api import assert_error, call, new_endpoint, snapshot

pytestmark = pytest.mark.realredis


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Store, Any]:
    store = await make_store(shards=3)
    return store, await make_api(store)


async def publish(api: Any, key: str | None = None, **fields: Any) -> dict[str, Any]:
    fields.setdefault("payload", {"n": 1})
    headers = {"Idempotency-Key": key} if key else {}
    status, data = await call(api, "POST", "/v1/events", json=fields, headers=headers)
    assert status in (200, 201), data
    return data  # type: ignore[no-any-return]


async def listed(api: Any, **params: Any) -> list[str]:
    """Every event id the listing gives for ``params``, page after page."""
    out: list[str] = []
    cursor = None
    while True:
        q = {k: str(v) for k, v in params.items()} | ({"cursor": cursor} if cursor else {})
        status, page = await call(api, "GET", "/v1/events", params=q)
        assert status == 200, page
        out += [e["id"] for e in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return out


def newest_first(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events in the listing's order: by creation time, then id, descending (an id starts
    with its creation time, so by id; two of one millisecond are not in publish order)."""
    return sorted(events, key=lambda e: e["id"], reverse=True)


async def kill(store: Store, delivery_id: str) -> None:
    """Claim every due delivery of its shard and record ``delivery_id`` dead (410), the
    others handed back as retries."""
    sk = store.shard_keys_for(delivery_id)
    assert sk is not None
    res = await store.claim(sk, limit=100, lease_ms=60_000, token_prefix="t", worker="w")
    outcomes = []
    for c in res.items:
        entry = orjson.dumps({"attempt": 1, "at": 1, "status_code": 410, "worker": "w"})
        if c.id == delivery_id:
            outcomes.append(Outcome(c.id, c.token, "dead", 0, 410, "http_status", entry))
        else:
            outcomes.append(Outcome(c.id, c.token, "retry", 0, 500, "http_status", entry))
    await store.record(sk, outcomes)


async def test_lists_newest_first_with_every_filter(env: tuple[Store, Any]) -> None:
    store, api = env
    a1 = await new_endpoint(api, app="a")
    a2 = await new_endpoint(api, app="a", event_types=["order.*"])
    b1 = await new_endpoint(api, app="b")
    events = []
    for i in range(12):
        app = "b" if i % 4 == 3 else "a"
        kind = "order.paid" if i % 2 else "user.created"
        events.append(await publish(api, type=kind, app=app, payload={"i": i}))
    newest = [e["id"] for e in newest_first(events)]
    assert await listed(api) == newest
    assert await listed(api, limit=5) == newest
    assert await listed(api, app="a") == [e["id"] for e in newest_first(events) if e["app"] == "a"]
    orders = [e["id"] for e in newest_first(events) if e["type"] == "order.paid"]
    assert await listed(api, type="order.*", limit=2) == orders
    assert await listed(api, type="order.paid") == orders
    to_a2 = [
        e["id"]
        for e in newest_first(events)
        if a2["id"] in {d["endpoint_id"] for d in e["deliveries"]}
    ]
    assert to_a2 and await listed(api, endpoint_id=a2["id"], limit=3) == to_a2
    assert await listed(api, endpoint_id=b1["id"]) == [
        e["id"] for e in newest_first(events) if e["app"] == "b"
    ]
    # time window: since inclusive, until exclusive, on the creation time
    _, page = await call(api, "GET", "/v1/events", params={"limit": "200"})
    by_id = {e["id"]: e for e in page["data"]}
    assert set(by_id) == set(newest)
    e4 = events[4]["id"]
    created = {e: store_ms(by_id[e]["created_at"]) for e in by_id}
    window = [e for e in newest if created[e4] <= created[e] < created[e4] + 1]
    assert e4 in await listed(api, since=created[e4], until=created[e4] + 1)
    assert await listed(api, since=created[e4], until=created[e4] + 1) == window
    assert await listed(api, until=created[newest[-1]]) == []
    # status of a delivery: one dead delivery marks its event
    victim = next(d["id"] for d in events[5]["deliveries"] if d["endpoint_id"] == a1["id"])
    await kill(store, victim)
    assert await listed(api, status="dead") == [events[5]["id"]]
    assert await listed(api, status="dead", app="b") == []
    _, page = await call(api, "GET", "/v1/events", params={"status": "dead"})
    (row,) = page["data"]
    assert row["status_counts"]["dead"] == 1 and row["delivery_count"] == 2
    assert {d["id"]: d["status"] for d in row["deliveries"]}[victim] == "dead"


def store_ms(rfc3339: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)


async def test_lookup_by_idempotency_key_outlives_the_record(env: tuple[Store, Any]) -> None:
    store, api = env
    await new_endpoint(api, app="a")
    await new_endpoint(api, app="b")
    first = await publish(api, key="order-1001", type="x", app="a")
    again = await publish(api, key="order-1001", type="x", app="a")
    assert again["id"] == first["id"]
    other_app = await publish(api, key="order-1001", type="x", app="b")
    await publish(api, key="order-1002", type="x", app="a")
    await publish(api, type="x", app="a")
    both = sorted([other_app["id"], first["id"]], reverse=True)
    assert await listed(api, idempotency_key="order-1001") == both
    assert await listed(api, idempotency_key="order-1001", app="a") == [first["id"]]
    assert await listed(api, idempotency_key="nope") == []
    status, got = await call(api, "GET", f"/v1/events/{first['id']}")
    assert status == 200 and got["idempotency_key"] == "order-1001"
    # the idempotency record ends (RELAY_IDEMPOTENCY_TTL); the lookup by key does not
    for sk in store.keys.all_shards():
        await store.redis.delete(sk.idempotency("a", "order-1001"))
    assert await listed(api, idempotency_key="order-1001", app="a") == [first["id"]]


async def test_app_key_lists_its_own_app_only(env: tuple[Store, Any], make_api: Any) -> None:
    store, api = env
    await new_endpoint(api, app="a")
    await new_endpoint(api, app="b")
    mine = [(await publish(api, key=f"k{i}", type="x", app="a"))["id"] for i in range(3)]
    theirs = [(await publish(api, key=f"k{i}", type="x", app="b"))["id"] for i in range(3)]
    status, key = await call(api, "POST", "/v1/api-keys", json={"app": "a", "scopes": ["read"]})
    assert status == 201
    as_a = await make_api(store, token=key["token"])
    assert await listed(as_a) == sorted(mine, reverse=True)
    assert await listed(as_a, idempotency_key="k1") == [mine[1]]
    assert await listed(as_a, app="a") == sorted(mine, reverse=True)
    assert_error(*await call(as_a, "GET", "/v1/events", params={"app": "b"}), 403, "forbidden")
    assert_error(*await call(as_a, "GET", f"/v1/events/{theirs[0]}"), 404, "not_found")
    # a cursor is the caller's: the operator's does not open for the key
    _, page = await call(api, "GET", "/v1/events", params={"limit": "1"})
    assert page["next_cursor"]
    got = await call(as_a, "GET", "/v1/events", params={"cursor": page["next_cursor"]})
    assert_error(*got, 400, "invalid_cursor")


async def test_event_page_expands_deliveries_with_attempts(env: tuple[Store, Any]) -> None:
    store, api = env
    ep = await new_endpoint(api, app="a", headers={"x-api-token": "s3cret"})
    await new_endpoint(api, app="a")
    event = await publish(api, type="x", app="a", payload={"customer": {"id": 42}})
    victim = next(d["id"] for d in event["deliveries"] if d["endpoint_id"] == ep["id"])
    await kill(store, victim)
    status, plain = await call(api, "GET", f"/v1/events/{event['id']}")
    assert status == 200 and plain["deliveries"] == event["deliveries"]
    assert plain["delivery_count"] == 2 and plain["payload"] == {"customer": {"id": 42}}
    status, page = await call(
        api, "GET", f"/v1/events/{event['id']}", params={"expand": "deliveries"}
    )
    assert status == 200
    rows = {d["id"]: d for d in page["deliveries"]}
    assert set(rows) == {d["id"] for d in event["deliveries"]}
    dead = rows[victim]
    assert dead["status"] == "dead" and dead["attempt_log"][0]["status_code"] == 410
    sent = {h["name"]: h["value"] for h in dead["headers_sent"]}
    assert sent["webhook-id"] == event["id"] and sent["x-relay-delivery-id"] == victim
    assert sent["x-api-token"] == "••••••" and "s3cret" not in orjson.dumps(page).decode()
    assert sent["webhook-signature"] in ("v1,…", "v1a,…")
    for other in rows.values():
        assert other["id"] == victim or other["status"] in ("pending", "delivering")


@pytest.mark.parametrize(
    "params",
    [
        {"status": "lost"},
        {"limit": "0"},
        {"limit": "201"},
        {"since": "-1"},
        {"since": "10", "until": "10"},
        {"since": "soon"},
        {"idempotency_key": ""},
        {"idempotency_key": "x" * 257},
        {"idempotency_key": "a\tb"},
        {"type": "not a type"},
        {"app": "a b"},
        {"colour": "red"},
    ],
)
async def test_bad_event_query_is_422_and_writes_nothing(
    env: tuple[Store, Any], params: dict[str, str]
) -> None:
    store, api = env
    await new_endpoint(api)
    await publish(api, type="x")
    before = await snapshot(store)
    assert_error(*await call(api, "GET", "/v1/events", params=params), 422)
    assert await snapshot(store) == before


async def test_bad_expand_and_cursor(env: tuple[Store, Any]) -> None:
    _store, api = env
    await new_endpoint(api)
    event = await publish(api, type="x")
    got = await call(api, "GET", f"/v1/events/{event['id']}", params={"expand": "all"})
    assert_error(*got, 422, "validation_error")
    got = await call(api, "GET", "/v1/events", params={"cursor": "not-a-cursor"})
    assert_error(*got, 400, "invalid_cursor")


async def test_a_rare_filter_pages_short_and_finds_everything(
    env: tuple[Store, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from relay.queue import eventlist

    _store, api = env
    await new_endpoint(api, app="a")
    kinds = ["rare" if i % 7 == 0 else "common" for i in range(30)]
    events = [await publish(api, type=kind, app="a") for kind in kinds]
    monkeypatch.setattr(eventlist, "BATCH", 4)
    monkeypatch.setattr(eventlist, "BUDGET", 4)  # stops after one batch per shard
    pages = 0
    cursor = None
    found: list[str] = []
    while True:
        params = {"type": "rare", "limit": "2"} | ({"cursor": cursor} if cursor else {})
        _, page = await call(api, "GET", "/v1/events", params=params)
        found += [e["id"] for e in page["data"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert found == [e["id"] for e in newest_first(events) if e["type"] == "rare"]
    assert pages > len(found) // 2 + 1  # short pages: the budget cut them


async def test_concurrent_publishes_of_one_key_index_one_event(env: tuple[Store, Any]) -> None:
    """The index entry is written by the script that wins the key, after its guard: the
    publishes that lose (answered the first event) add nothing to it."""
    store, api = env
    await new_endpoint(api)
    answers = await asyncio.gather(*(publish(api, key="same-key", type="x") for _ in range(20)))
    assert len({a["id"] for a in answers}) == 1
    assert await listed(api, idempotency_key="same-key") == [answers[0]["id"]]
    members = []
    for sk in store.keys.all_shards():
        members += await store.redis.zrange(sk.idempotency_index("same-key"), 0, -1)
    assert members == [answers[0]["id"]]
