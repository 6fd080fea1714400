"""The ops outboxes and the ops relay on real Redis, in one process.

Which writes append an operational event (only transitions do), and that relays racing
on the same entries publish each once.

Fails with ``idempotency_key=None`` in ``OpsRelay._publish`` (no key derived from the
entry id): the three relays of ``test_relays_racing_on_the_same_entries_publish_each_once``
publish entries more than once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from relay.connectors.opsevents import OpsRelay
from relay.domain.schema import endpoint_record
from relay.endpoints.health import Health
from relay.endpoints.lifecycle import Lifecycle
from relay.queue.store import Store

pytestmark = pytest.mark.realredis


async def outbox(store: Store, key: str) -> list[dict[str, Any]]:
    return [orjson.loads(e) for e in await store.ops_peek(key, 100)]


async def test_only_enabled_transitions_append_and_each_once(make_store: Any) -> None:
    store = await make_store()
    life = Lifecycle(store)
    ep = await life.create({"url": "http://127.0.0.1:9/x", "app": "shop"})
    await life.update(ep["id"], {"description": "no transition"})
    assert await outbox(store, store.keys.ops) == []
    await life.update(ep["id"], {"enabled": False})
    await life.update(ep["id"], {"enabled": False})  # already disabled: no second one
    assert await life.disable(ep["id"], 1) is False  # auto-disable finds it disabled
    await life.update(ep["id"], {"enabled": True})
    got = await outbox(store, store.keys.ops)
    assert [(e["type"], e.get("reason")) for e in got] == [
        ("endpoint.disabled", "manual"),
        ("endpoint.enabled", None),
    ]
    assert {e["endpoint_id"] for e in got} == {ep["id"]} and {e["app"] for e in got} == {"shop"}
    assert len({e["id"] for e in got}) == 2
    assert "secret" not in orjson.dumps(got).decode()


async def test_breaker_opening_and_closing_append_once_each(make_store: Any) -> None:
    store = await make_store(breaker_threshold=2, breaker_cooldown=0.01)
    health = Health(store)
    box = store.keys.endpoint_state("ep_b").ops
    s = await health.settle("ep_b", [("t1", "0")])
    assert s.ops == 0
    s = await health.settle("ep_b", [("t2", "0"), ("t3", "0"), ("t4", "-")])  # opens
    assert (s.state, s.ops) == ("open", 1)
    await asyncio.sleep(0.02)
    admitted = await health.admit({"id": "ep_b"}, ["probe"], 1)
    assert admitted[0] == "half_open"
    s = await health.settle("ep_b", [("probe", "0")])  # a failed probe reopens: no event
    assert (s.state, s.ops) == ("open", 0)
    s = await health.settle("ep_b", [("late", "1"), ("later", "1")])  # closes once
    assert (s.state, s.ops) == ("closed", 1)
    got = await outbox(store, box)
    assert [e["type"] for e in got] == ["endpoint.failing", "endpoint.recovered"]
    assert got[0]["failures"] == 2 and got[1]["opened_at"] > 0


async def test_relays_racing_on_the_same_entries_publish_each_once(
    make_store: Any, receiver: Any
) -> None:
    store = await make_store(breaker_threshold=1, ops_dead_window=0.001)
    ops = endpoint_record(url=receiver.url + "/ops", app="relay-ops", event_types=["*"])
    await store.put_endpoint(ops)
    life = Lifecycle(store)
    ep = await life.create({"url": "http://127.0.0.1:9/x", "app": "shop"})
    await life.update(ep["id"], {"enabled": False})
    await life.update(ep["id"], {"enabled": True})
    await Health(store).settle(ep["id"], [("t", "0")])  # the breaker opens
    relays = [OpsRelay(store) for _ in range(3)]
    done = await asyncio.gather(*(r.once(full=True) for r in relays))
    # the race did happen: entries were taken (and published) by more than one relay
    assert sum(done) > 3 and sum(r.published for r in relays) > 3
    deliveries, _ = await store.list_deliveries(endpoint_id=ops["id"], limit=100)
    events = [(await store.get_event(d["event_id"]) or {}) for d in deliveries]
    assert sorted(e["type"] for e in events) == [
        "endpoint.disabled",
        "endpoint.enabled",
        "endpoint.failing",
    ]
    for key in (store.keys.ops, store.keys.endpoint_state(ep["id"]).ops):
        assert await store.ops_lengths([key]) == [0]


async def test_the_ops_app_is_reserved_for_relay(make_store: Any, make_api: Any) -> None:
    store = await make_store()
    api = await make_api(store)
    event = {"type": "endpoint.disabled", "payload": {"endpoint_id": "ep_x"}, "app": "relay-ops"}
    async with api("POST", "/v1/events", json=event) as r:
        assert r.status == 422
        assert (await r.json())["error"] == "app_reserved"
    assert (await store.stats())["counts"].get("pending", 0) == 0
    ops = {"url": "http://127.0.0.1:9/ops", "app": "relay-ops", "event_types": ["endpoint.*"]}
    async with api("POST", "/v1/endpoints", json=ops) as r:  # subscribing is ordinary
        assert r.status == 201
        ops_id = (await r.json())["id"]
    async with api("POST", f"/v1/endpoints/{ops_id}/test") as r:  # relay's own relay.test
        assert r.status == 201
        sent = await r.json()
    got = await store.get_event(sent["id"])
    assert got is not None and (got["type"], got["app"]) == ("relay.test", "relay-ops")
