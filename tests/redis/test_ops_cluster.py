"""Operational events on a real 3-master Redis Cluster with 3 shards: every outbox in its
own slot (``{cfg}``, ``{ep_X}``, each ``{sN}``), the relay's pipelined reads across them,
and dead letters of one endpoint spread over the shards summed exactly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from relay.connectors.opsevents import OpsRelay
from relay.delivery.worker import Worker
from relay.domain import ids
from relay.domain.schema import EventIn, endpoint_record
from relay.endpoints.health import Health
from relay.endpoints.lifecycle import Lifecycle
from relay.publishing import Publisher

pytestmark = pytest.mark.realredis

DEAD_N = 12


async def test_ops_events_on_a_cluster(cluster_store: Any, receiver: Any) -> None:
    store = await cluster_store(breaker_threshold=10**6, ops_dead_window=0.001)
    ops = endpoint_record(url=receiver.url + "/ops", app="relay-ops", event_types=["*"])
    d = endpoint_record(url=receiver.url + "/d", app="shop")
    for ep in (ops, d):
        await store.put_endpoint(ep)
    receiver.responses["/d"] = lambda _r: web.Response(status=410)
    life = Lifecycle(store)
    await life.update(d["id"], {"enabled": False})
    await life.update(d["id"], {"enabled": True})
    health = Health(store)
    await health.settle(d["id"], [("t0", "1")])  # a success on a closed breaker: no event
    pub = Publisher(store)
    shards = set()
    for i in range(DEAD_N):
        done = await pub.publish(EventIn(type="o.x", payload={"i": i}, app="shop"))
        shards.add(ids.shard_of(done.answer["id"]))
    assert len(shards) > 1  # spread over the shards (random without ordering or key)
    await Worker(store, store.settings).run(asyncio.Event(), burst=True)
    assert await store.count_dead() == DEAD_N

    relay = OpsRelay(store)
    assert await relay.once(full=True) >= 3
    rows, _ = await store.list_deliveries(endpoint_id=ops["id"], limit=100)
    events = [await store.get_event(r["event_id"]) or {} for r in rows]
    kinds = sorted(e["type"] for e in events)
    assert kinds.count("endpoint.disabled") == kinds.count("endpoint.enabled") == 1
    assert "endpoint.recovered" not in kinds
    dead = [e["payload"] for e in events if e["type"] == "delivery.dead"]
    assert 1 <= len(dead) <= len(shards)  # at most one per shard in one window
    assert sum(p["count"] for p in dead) == DEAD_N
    keys = store.keys
    boxes = [keys.ops, keys.endpoint_state(d["id"]).ops, *(sk.ops for sk in keys.all_shards())]
    assert await store.ops_lengths(boxes) == [0] * len(boxes)
