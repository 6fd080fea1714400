"""``held``: a delivery of a disabled endpoint is a status of its own, listed and counted.

A worker that claims a delivery whose endpoint is disabled parks it (``hold.lua``):
status ``held``, out of the due queue, in the endpoint's held set (which ``resume.lua``
reads when the endpoint is enabled again) and in the shard's held index (which lists and
counts them).

Each of these is asserted: status ``held`` (not ``pending``), ``list_deliveries(status=
"held")`` listing it, the delivery in no ``status="pending"`` list, and ``held`` in
``stats()["counts"]``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import orjson
import pytest

from relay.delivery.worker import Worker
from relay.domain import ids, signing
from relay.domain.schema import endpoint_record
from relay.endpoints.health import Health
from relay.ops.retention import Retention
from relay.queue.store import Store
from tests.helpers import waiting

pytestmark = pytest.mark.realredis

FAR = 10**15  # a retention cutoff after everything


@asynccontextmanager
async def running(store: Store) -> AsyncIterator[Worker]:
    stop = asyncio.Event()
    worker = Worker(store, store.settings)
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await task


until = partial(waiting.until, within=15.0, every=0.02)


async def add_endpoint(store: Store, url: str, **extra: Any) -> dict[str, Any]:
    ep = endpoint_record(url=url, app="default")
    ep.update(extra)
    await store.put_endpoint(ep)
    return ep


async def publish(store: Store, endpoint_id: str) -> str:
    now = int(time.time() * 1000)
    event_id, delivery_id = ids.new_id("evt", 0, now), ids.new_id("dlv", 0, now)
    await store.publish(
        shard=0,
        event_id=event_id,
        event_type="order.paid",
        app="default",
        body=signing.build_body(event_id, "order.paid", now, orjson.dumps({"n": 1})),
        created_ms=now,
        deliveries=[(delivery_id, endpoint_id)],
    )
    return delivery_id


async def status_of(store: Store, delivery_id: str) -> str | None:
    row = await store.get_delivery(delivery_id, with_log=False)
    return None if row is None else row["status"]


async def listed(store: Store, **filters: Any) -> list[str]:
    rows, _ = await store.list_deliveries(**filters)
    return [r["id"] for r in rows]


async def test_a_held_delivery_is_listed_counted_and_resumed(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    ep = await add_endpoint(store, receiver.url + "/off", enabled=False)
    other = await add_endpoint(store, receiver.url + "/on")
    d = await publish(store, ep["id"])
    normal = await publish(store, other["id"])

    async with running(store):
        await until(lambda: _is(store, d, "held"))
        await receiver.wait_for(1, path="/on")
        await until(lambda: _is(store, normal, "succeeded"))

        row = await store.get_delivery(d)
        assert row is not None
        assert row["status"] == "held" and row["held"] == "endpoint_disabled"
        assert row["attempts"] == 0 and row["attempt_log"] == []  # holding charged nothing
        assert await listed(store, status="held") == [d]
        assert d not in await listed(store, status="pending")
        assert await listed(store, status="pending", endpoint_id=ep["id"]) == []
        assert await listed(store, status="held", endpoint_id=ep["id"]) == [d]
        stats = await store.stats()
        assert stats["counts"]["held"] == 1
        assert stats["counts"]["pending"] == 0 and stats["queue"]["due"] == 0

        # The API: ?status=held validates, and the rows it answers with validate too.
        async with api("GET", "/v1/deliveries", params={"status": "held"}) as r:
            assert r.status == 200, await r.text()
            assert [x["id"] for x in (await r.json())["data"]] == [d]
        async with api("GET", "/v1/stats") as r:
            assert (await r.json())["counts"]["held"] == 1
        async with api("GET", "/metrics") as r:
            assert "relay_queue_held 1.0" in (await r.text()).splitlines()

        # Still held: replay refuses it, retention never expires it.
        assert await store.replay([d]) == {d: "held"}
        await Retention(store).expire(succeeded_before=FAR, dead_before=FAR)
        assert await status_of(store, d) == "held"

        # Enabled again (what PATCH does): resumed, then delivered.
        await store.put_endpoint({**ep, "enabled": True})
        assert await Health(store).resume(ep["id"]) == 1
        await receiver.wait_for(1, path="/off")
        await until(lambda: _is(store, d, "succeeded"))

    row = await store.get_delivery(d)
    assert row is not None and "held" not in row and row["attempts"] == 1
    assert await listed(store, status="held") == []
    assert (await store.stats())["counts"]["held"] == 0


async def test_deleting_an_endpoint_sends_its_held_deliveries_to_dead(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    ep = await add_endpoint(store, receiver.url + "/gone", enabled=False)
    d = await publish(store, ep["id"])
    async with running(store):
        await until(lambda: _is(store, d, "held"))
        async with api("DELETE", f"/v1/endpoints/{ep['id']}") as r:
            assert r.status == 204
        await until(lambda: _is(store, d, "dead"))
    row = await store.get_delivery(d)
    assert row is not None and row["last_error"] == "endpoint_deleted"
    assert await listed(store, status="held") == []
    assert (await store.stats())["counts"] == {
        "scheduled": 0,
        "pending": 0,
        "queued": 0,
        "held": 0,
        "delivering": 0,
        "succeeded": 0,
        "dead": 1,
    }
    assert receiver.requests == []


async def _is(store: Store, delivery_id: str, status: str) -> bool:
    return await status_of(store, delivery_id) == status
