"""Publishing without HTTP: the service the API (and any connector) calls."""

from __future__ import annotations

from typing import Any

import pytest

from relay.connectors.opsevents import OpsRelay
from relay.domain import ids
from relay.domain.ordering import app_shard, shard_for
from relay.domain.schema import EventIn, endpoint_record
from relay.publishing import (
    IdempotencyKeyReused,
    PayloadTooLarge,
    Publisher,
    PublishError,
    UnknownEndpoints,
    select_targets,
)
from relay.queue.store import Store
from tests.helpers.api import snapshot


def event(**fields: Any) -> EventIn:
    fields.setdefault("payload", {"n": 1})
    return EventIn.model_validate(fields)


def test_select_targets_by_enabled_and_type_and_ids() -> None:
    a = endpoint_record(url="http://127.0.0.1:1/a", event_types=["order.*"])
    b = endpoint_record(url="http://127.0.0.1:1/b", event_types=["user.created"])
    off = endpoint_record(url="http://127.0.0.1:1/c", enabled=False)
    eps = [a, b, off]
    assert select_targets(eps, event(type="order.paid")) == [a]
    assert select_targets(eps, event(type="user.created")) == [b]
    assert select_targets(eps, event(type="order.paid", endpoint_ids=[b["id"]])) == []
    with pytest.raises(UnknownEndpoints, match="ep_nosuch"):
        select_targets(eps, event(type="order.paid", endpoint_ids=["ep_nosuch"]))


def test_an_idempotency_key_always_lands_on_one_shard() -> None:
    assert len({shard_for("shop", 8, idempotency_key="k-1") for _ in range(50)}) == 1
    assert all(0 <= shard_for("shop", 8) < 8 for _ in range(50))
    # keys of one app spread over the shards; an ordering key wins over an
    # Idempotency-Key, and a pinned app keeps its ordered events on its own shard
    assert {shard_for("shop", 8, idempotency_key=f"k-{n}") for n in range(200)} == set(range(8))
    lanes = {shard_for("shop", 8, ordering_key=f"o-{n}", ordered=True) for n in range(200)}
    assert lanes == set(range(8))
    assert shard_for("shop", 8, idempotency_key="k", ordering_key="o", ordered=True) == (
        shard_for("shop", 8, idempotency_key="o")
    )
    pinned = {
        shard_for("shop", 8, ordering_key=f"o-{n}", ordered=True, pin=True) for n in range(50)
    }
    assert pinned == {app_shard("shop", 8)}


@pytest.mark.parametrize("kind", ["fake", "real"])
async def test_publisher_stores_the_event_and_its_deliveries(
    kind: str, fake_store: Store, make_store: Any
) -> None:
    store = fake_store if kind == "fake" else await make_store(shards=3)
    ep = endpoint_record(url="http://127.0.0.1:1/x", app="shop")
    await store.put_endpoint(ep)
    done = await Publisher(store).publish(event(type="order.paid", app="shop"))
    assert done.created
    (dlv,) = done.answer["deliveries"]
    assert dlv["endpoint_id"] == ep["id"]
    assert ids.shard_of(dlv["id"]) == ids.shard_of(done.answer["id"])
    stored = await store.get_delivery(dlv["id"])
    assert stored is not None and stored["status"] == "pending"
    got = await store.get_event(done.answer["id"])
    assert got is not None and got["payload"] == {"n": 1}


async def test_events_read_together_are_the_events_read_one_by_one(make_store: Any) -> None:
    store = await make_store(shards=3)
    await store.put_endpoint(endpoint_record(url="http://127.0.0.1:1/x", app="shop"))
    publisher = Publisher(store)
    made = [
        (await publisher.publish(event(type="order.paid", app="shop", payload={"n": n}))).answer
        for n in range(12)
    ]
    wanted = [m["id"] for m in made] + ["evt_01M8NRGJEW00N08E236MWQ75WB", "not-an-id"]
    wanted.insert(3, made[5]["id"])  # asked twice: answered twice, in place
    assert len({ids.shard_of(m["id"]) for m in made}) > 1
    one_by_one = [await store.get_event(e) for e in wanted]
    assert await store.get_events(wanted) == one_by_one
    assert one_by_one[3] is not None and one_by_one[-1] is None


@pytest.mark.parametrize("kind", ["fake", "real"])
async def test_the_ops_app_takes_relay_events_only(
    kind: str, fake_store: Store, make_store: Any
) -> None:
    """Every publishing path goes through the Publisher, which refuses the reserved ops
    app (``RELAY_OPS_APP``) unless it is relay's own (the ops relay). Seen failing: the
    event was stored, with a delivery to the ops endpoint."""
    store = fake_store if kind == "fake" else await make_store()
    ops = endpoint_record(url="http://127.0.0.1:1/ops", app="relay-ops", event_types=["*"])
    await store.put_endpoint(ops)
    before = await snapshot(store)
    forged = event(type="endpoint.failing", app="relay-ops", payload={"endpoint_id": "ep_x"})
    for key in (None, "k"):
        with pytest.raises(PublishError) as refused:
            await Publisher(store).publish(forged, idempotency_key=key)
        assert (refused.value.status, refused.value.code) == (422, "app_reserved")
    assert await snapshot(store) == before
    done = await OpsRelay(store).publisher.publish(forged)  # relay's own: accepted
    assert [d["endpoint_id"] for d in done.answer["deliveries"]] == [ops["id"]]


async def test_publisher_idempotency_and_refusals_write_nothing(make_store: Any) -> None:
    store = await make_store(max_payload_bytes=100)
    await store.put_endpoint(endpoint_record(url="http://127.0.0.1:1/x"))
    publisher = Publisher(store)
    first = await publisher.publish(event(type="a"), idempotency_key="k")
    before = await snapshot(store)
    again = await publisher.publish(event(type="a"), idempotency_key="k")
    assert not again.created and again.answer == first.answer
    with pytest.raises(IdempotencyKeyReused):
        await publisher.publish(event(type="a", payload={"n": 2}), idempotency_key="k")
    with pytest.raises(PayloadTooLarge):
        await publisher.publish(event(type="a", payload="x" * 200))
    with pytest.raises(UnknownEndpoints):
        await publisher.publish(event(type="a", endpoint_ids=["ep_nosuch"]))
    assert await snapshot(store) == before
