"""Placement by key and one event per Idempotency-Key across shards, on a real Redis.

* keyed events of one app spread over all 12 shards (each on its key's shard), ordering
  keys too; a pinned app (an ``ordering: endpoint`` endpoint) keeps its ordered events on
  its own shard. On main every keyed event went to ``app_shard``: one shard of 12.
* the same key at once from 30 requests, for an ordered event whose guard and event are
  on two shards (the two-step publish): one event, one 201 and 29 times the same 200;
  a changed ordering key or body is 409. Seen failing with ``reserve.lua``'s ``NX``
  taken out (every request takes the guard: 30 events).
* the upgrade from placement by app: a key remembered on the app's shard keeps answering
  200 (no new event), and old-placement and new-placement publishers racing on the same
  keys make one event per key. Seen failing with the window closed (the marker set to
  0): the race makes two events for keys taken on both placements.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson
import pytest

from relay.domain import ids, ordering
from relay.domain.schema import EventIn, endpoint_record
from relay.idempotency import Write
from relay.publishing import IdempotencyKeyReused, Publisher
from relay.queue.store import Store
from tests.helpers import event_ids
from tests.helpers.placement import keys_apart, publish_by_app

pytestmark = pytest.mark.realredis


async def test_one_apps_keys_and_lanes_spread_over_every_shard(make_store: Any) -> None:
    store = await make_store(shards=12)
    plain = endpoint_record(url="http://127.0.0.1:9/p", app="big")
    keyed = endpoint_record(url="http://127.0.0.1:9/k", app="big", ordering="key")
    for ep in (plain, keyed):
        await store.put_endpoint(ep)
    publisher = Publisher(store)
    keyed_shards: Counter[int] = Counter()
    for n in range(240):
        got = await publisher.publish(
            EventIn(type="t", payload=n, app="big", endpoint_ids=[plain["id"]]),
            idempotency_key=f"key-{n}",
        )
        shard = ids.shard_of(got.answer["id"])
        assert shard == ordering.key_shard("big", f"key-{n}", 12)
        keyed_shards[shard] += 1
    assert set(keyed_shards) == set(range(12)), keyed_shards
    lane_shards: Counter[int] = Counter()
    for n in range(120):  # 60 ordering keys x 2, each with its own Idempotency-Key
        lane = f"order-{n % 60}"
        got = await publisher.publish(
            EventIn(type="t", payload=n, app="big", ordering_key=lane), idempotency_key=f"o{n}"
        )
        shard = ids.shard_of(got.answer["id"])
        assert shard == ordering.key_shard("big", lane, 12)
        assert {ids.shard_of(d["id"]) for d in got.answer["deliveries"]} == {shard}
        lane_shards[shard] += 1
    assert set(lane_shards) == set(range(12)), lane_shards
    assert len(await event_ids(store)) == 360

    # an ordering: endpoint endpoint pins the app's ordered events to its own shard
    await store.put_endpoint(
        endpoint_record(url="http://127.0.0.1:9/e", app="big", ordering="endpoint")
    )
    home = ordering.app_shard("big", 12)
    for n in range(12):
        got = await publisher.publish(EventIn(type="t", payload=n, app="big", ordering_key=f"x{n}"))
        assert ids.shard_of(got.answer["id"]) == home


async def test_the_same_key_at_once_makes_one_event_across_two_shards(make_store: Any) -> None:
    store = await make_store(shards=12)
    keyed = endpoint_record(url="http://127.0.0.1:9/k", app="shop", ordering="key")
    await store.put_endpoint(keyed)
    idem, lane = keys_apart("shop", 12)
    event = EventIn(type="t", payload={"n": 1}, app="shop", ordering_key=lane)

    answers = await asyncio.gather(
        *(Publisher(store).publish(event, idempotency_key=idem) for _ in range(30))
    )
    assert sorted(a.created for a in answers) == [False] * 29 + [True]
    assert len({a.answer["id"] for a in answers}) == 1
    (first,) = {answer_json(a.answer) for a in answers}
    event_id = answers[0].answer["id"]
    assert ids.shard_of(event_id) == ordering.key_shard("shop", lane, 12)
    assert await event_ids(store) == [event_id]
    guard = await store.get_idempotency(ordering.key_shard("shop", idem, 12), "shop", idem)
    assert guard is not None and event_id in guard

    for other in (
        EventIn(type="t", payload={"n": 1}, app="shop", ordering_key=lane + "-other"),
        EventIn(type="t", payload={"n": 1}, app="shop"),
        EventIn(type="t", payload={"n": 2}, app="shop", ordering_key=lane),
    ):
        with pytest.raises(IdempotencyKeyReused):
            await Publisher(store).publish(other, idempotency_key=idem)
    again = await Publisher(store).publish(event, idempotency_key=idem)
    assert (again.created, answer_json(again.answer)) == (False, first)
    assert await event_ids(store) == [event_id]
    dlv = await store.get_delivery(answers[0].answer["deliveries"][0]["id"])
    assert dlv is not None and dlv["status"] == "pending"


def answer_json(answer: dict[str, Any]) -> str:
    return orjson.dumps(answer, option=orjson.OPT_SORT_KEYS).decode()


async def _upgraded(make_store: Any) -> Store:
    """A Redis an older relay wrote (endpoints, no placement marker), then a new relay."""
    old = await make_store(shards=12)
    ep = endpoint_record(url="http://127.0.0.1:9/p", app="shop")
    await old.put_endpoint(ep)
    await old.redis.delete(old.keys.placement)  # as an older relay left it: no marker
    new = await make_store(shards=12)  # its start marks the upgrade: the window opens
    assert await new.placement_since() > 0
    return new


async def test_keys_remembered_on_the_app_shard_keep_answering(make_store: Any) -> None:
    store = await _upgraded(make_store)
    event = EventIn(type="t", payload={"n": 1}, app="shop")
    home = ordering.app_shard("shop", 12)
    keys = [f"old-{n}" for n in range(24)]
    firsts = [await publish_by_app(store, event, k) for k in keys]
    assert all(created for _, created in firsts)
    for key, (answer, _) in zip(keys, firsts, strict=True):
        got = await Publisher(store).publish(event, idempotency_key=key)
        assert (got.created, got.answer) == (False, answer)
        with pytest.raises(IdempotencyKeyReused):
            await Publisher(store).publish(
                EventIn(type="t", payload=2, app="shop"), idempotency_key=key
            )
    assert len(await event_ids(store)) == 24
    assert {ids.shard_of(e) for e in await event_ids(store)} == {home}


async def test_old_and_new_placement_racing_make_one_event_per_key(make_store: Any) -> None:
    store = await _upgraded(make_store)
    keyed = endpoint_record(url="http://127.0.0.1:9/k", app="shop", ordering="key")
    await store.put_endpoint(keyed)
    keys = [f"race-{n}" for n in range(40)]

    def event(n: int) -> EventIn:
        return EventIn(type="t", payload={"n": n}, app="shop", ordering_key=f"lane-{n % 7}")

    async def both(n: int, key: str) -> list[tuple[dict[str, Any], bool]]:
        new = Publisher(store).publish(event(n), idempotency_key=key)
        old = publish_by_app(store, event(n), key)
        first, second = (new, old) if n % 2 else (old, new)
        a, b = await asyncio.gather(first, second)
        return [(x.answer, x.created) if not isinstance(x, tuple) else x for x in (a, b)]

    results = await asyncio.gather(*(both(n, k) for n, k in enumerate(keys)))
    for pair in results:
        assert sorted(created for _, created in pair) == [False, True], pair
        assert pair[0][0]["id"] == pair[1][0]["id"]
    assert len(await event_ids(store)) == len(keys)
    for n, key in enumerate(keys):  # and later retries, of either placement, agree
        got = await Publisher(store).publish(event(n), idempotency_key=key)
        assert not got.created and got.answer["id"] == results[n][0][0]["id"]
    assert len(await event_ids(store)) == len(keys)


async def test_a_batch_takes_each_key_once_whether_one_step_or_two(make_store: Any) -> None:
    """A batch mixes one-script writes (the key's guard on the event's shard) with
    two-step ones (an ordered event whose lane's shard is not its key's): each answers
    as alone, in order, and sent again the batch makes no new event."""
    store = await make_store(shards=12)
    keyed = endpoint_record(url="http://127.0.0.1:9/k", app="shop", ordering="key")
    await store.put_endpoint(keyed)
    publisher = Publisher(store)
    idem, lane = keys_apart("shop", 12)
    batch = [
        (EventIn(type="t", payload=1, app="shop"), "plain-1"),
        (EventIn(type="t", payload=2, app="shop", ordering_key=lane), idem),
        (EventIn(type="t", payload=3, app="shop"), "plain-2"),
        (EventIn(type="t", payload=4, app="shop", ordering_key=lane), idem),  # other body
        (EventIn(type="t", payload=1, app="shop"), "plain-1"),  # the first again
    ]
    got = await publisher.publish_batch(batch)
    assert not await publisher.guard.direct(
        Write(ids.shard_of(got[1].answer["id"]) or 0, "", "t", "shop", b"", 0, ()), idem
    )
    assert [type(a).__name__ for a in got] == [
        "Published", "Published", "Published", "IdempotencyKeyReused", "Published",
    ]  # fmt: skip
    assert [a.created for a in got if not isinstance(a, IdempotencyKeyReused)] == [
        True, True, True, False,
    ]  # fmt: skip
    assert got[4].answer == got[0].answer
    assert ids.shard_of(got[1].answer["id"]) == ordering.key_shard("shop", lane, 12)
    again = await publisher.publish_batch(batch)
    assert [getattr(a, "answer", None) for a in again][:3] == [a.answer for a in got[:3]]
    alone = await publisher.publish(batch[1][0], idempotency_key=idem)  # not as a batch
    assert (alone.created, alone.answer) == (False, got[1].answer)
    assert len(await event_ids(store)) == 3
