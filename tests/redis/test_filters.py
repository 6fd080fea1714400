"""Payload filters: CEL per endpoint, checked at write, run at publish."""

from __future__ import annotations

from typing import Any

import pytest

from relay.domain import filters
from relay.queue.store import Store


async def call(api: Any, method: str, path: str, **kw: Any) -> tuple[int, Any]:
    async with api(method, path, **kw) as r:
        return r.status, await r.json()


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Store, Any]:
    store = await make_store(allow_private_networks=True)
    return store, await make_api(store)


def test_bounds_and_syntax_are_refused_with_a_reason() -> None:
    cases = {
        "": "empty",
        "x" * (filters.MAX_CHARS + 1): "the limit is 2048",
        "(" * 17 + "true" + ")" * 17: "17 brackets deep",
        "payload.a.all(x, payload.b.exists(y, y == x))": "inside another",
        " || ".join(["payload.a.exists(x, x == 1)"] * 5): "5 comprehensions",
        "payload.amount >": "not valid CEL",
        "nope == 1": "undeclared reference to 'nope'",
        "payload.amount + 1": "must be a boolean",
    }
    for text, reason in cases.items():
        with pytest.raises(filters.FilterInvalid, match=reason):
            filters.compile_filter(text)
    # brackets and macro names inside string literals are not counted
    filters.compile_filter('payload.s == "((((((((((((((((((.map("')


def test_evaluation_true_false_and_errors() -> None:
    cache = filters.ProgramCache()
    texts = [
        "payload.amount > 1000",
        "has(payload.vip) && payload.vip",
        'event_type.startsWith("order.")',
        "payload.flag",
    ]

    def judge(payload: dict[str, Any], event_type: str) -> list[bool | str]:
        return list(filters.judge(texts, cache, payload, event_type, "a"))

    got = judge({"amount": 4200, "flag": 3}, "order.paid")
    assert got[:3] == [True, False, True]
    assert got[3] == "filter returned int, not a boolean"
    got = judge({"amount": "12", "flag": True}, "user.new")
    assert isinstance(got[0], str) and "No matching overloads" in got[0]
    assert got[1:] == [False, False, True]
    assert cache.compiled == 4  # compiled once each, across both events
    texts.append("payload.amount > 1000")  # the same text on another endpoint
    judge({"amount": 1, "flag": True}, "x")
    assert cache.compiled == 4
    # a missing field is an error (CEL has no implicit null): recorded, endpoint left out
    (missing,) = filters.judge(texts[:1], cache, {}, "x", "a")
    assert isinstance(missing, str) and "Key not found" in missing


async def test_filter_end_to_end(env: tuple[Store, Any]) -> None:
    store, api = env
    base = {"url": "http://127.0.0.1:9/hook"}
    status, bad = await call(api, "POST", "/v1/endpoints", json={**base, "filter": "payload.a >"})
    assert status == 422 and bad["error"] == "filter_invalid", bad
    assert "not valid CEL" in bad["message"]
    assert await store.list_endpoints() == []  # nothing written
    status, big = await call(
        api, "POST", "/v1/endpoints", json={**base, "filter": "payload.amount > 1000"}
    )
    assert status == 201 and big["filter"] == "payload.amount > 1000"
    status, every = await call(api, "POST", "/v1/endpoints", json=base)
    assert status == 201 and every["filter"] is None
    status, read = await call(api, "GET", f"/v1/endpoints/{big['id']}")
    assert read["filter"] == "payload.amount > 1000"

    status, ev = await call(api, "POST", "/v1/events", json={"type": "o", "payload": {"amount": 5}})
    assert status == 201 and [d["endpoint_id"] for d in ev["deliveries"]] == [every["id"]]
    assert "filtered" not in ev  # false is not recorded
    status, ev = await call(api, "POST", "/v1/events", json={"type": "o", "payload": {"x": 1}})
    assert status == 201 and [d["endpoint_id"] for d in ev["deliveries"]] == [every["id"]]
    assert [f["endpoint_id"] for f in ev["filtered"]] == [big["id"]]
    status, stored = await call(api, "GET", f"/v1/events/{ev['id']}")
    assert stored["filtered"] == ev["filtered"]
    status, ev = await call(
        api, "POST", "/v1/events", json={"type": "o", "payload": {"amount": 5000}}
    )
    assert {d["endpoint_id"] for d in ev["deliveries"]} == {every["id"], big["id"]}

    # PATCH: an invalid filter is refused and changes nothing; null clears it
    status, bad = await call(api, "PATCH", f"/v1/endpoints/{big['id']}", json={"filter": "1"})
    assert status == 422 and bad["error"] == "filter_invalid"
    assert (await store.get_endpoint(big["id"]))["filter"] == "payload.amount > 1000"
    status, patched = await call(
        api, "PATCH", f"/v1/endpoints/{big['id']}", json={"filter": "payload.amount < 10"}
    )
    assert status == 200 and patched["filter"] == "payload.amount < 10"
    status, ev = await call(api, "POST", "/v1/events", json={"type": "o", "payload": {"amount": 5}})
    assert {d["endpoint_id"] for d in ev["deliveries"]} == {every["id"], big["id"]}
    status, patched = await call(api, "PATCH", f"/v1/endpoints/{big['id']}", json={"filter": None})
    assert status == 200 and patched["filter"] is None
    status, ev = await call(api, "POST", "/v1/events", json={"type": "o", "payload": {"x": 1}})
    assert len(ev["deliveries"]) == 2 and "filtered" not in ev


async def test_cli_endpoints_shows_the_filter(make_store: Any) -> None:
    import asyncio

    from click.testing import CliRunner

    from relay.cli import main
    from relay.domain.schema import endpoint_record

    store = await make_store()
    await store.put_endpoint(
        endpoint_record(url="http://127.0.0.1:9/x", filter='payload.country == "NL"')
    )
    env = {
        "RELAY_REDIS_URL": store.settings.redis_url,
        "RELAY_KEY_PREFIX": store.settings.key_prefix,
    }
    got = await asyncio.to_thread(CliRunner().invoke, main, ["endpoints"], env=env)
    assert got.exit_code == 0, got.output
    assert 'payload.country == "NL"' in got.stdout and "filter" in got.stdout.splitlines()[0]
