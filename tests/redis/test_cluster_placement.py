"""One app on a real 3-master Redis Cluster with RELAY_SHARDS=12 (4 shards a master).

* 240 events of one app, each with its own Idempotency-Key, published and delivered by
  an in-process worker: every event arrives, once, and the app's keys and the Lua calls
  of publish and delivery are spread over the masters (least busy / most busy >= 0.5
  for keys, >= 0.4 for Lua calls). On main every keyed event went to the app's shard:
  one master held all of them (key ratio 0).
* 60 ordering keys x 4 events of one app (an ``ordering: key`` endpoint, a receiver that
  fails a tenth of the requests): every lane in publish order, each event on its key's
  shard, keys and Lua calls spread as above. On main the app's lanes were all on one
  shard: one master.
* 20 requests with one Idempotency-Key at once, for an ordered event whose guard and
  event are on two masters: one event, one 201.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from relay.delivery.worker import Worker
from relay.domain import ids, ordering
from relay.domain.schema import EventIn, endpoint_record
from relay.publishing import Publisher
from relay.queue.store import Store
from tests.helpers import ClusterHandle, StoreFactory, event_ids
from tests.helpers.cluster import until
from tests.helpers.ordering_kit import LaneReceiver, dead_ids, lane_problems, publish_lanes
from tests.helpers.placement import cached_publisher

pytestmark = pytest.mark.realredis

SHARDS = 12
SCHEDULE = (0.005, 0.01, *([0.02] * 8))


async def _twelve_shards(redis_cluster: ClusterHandle, cluster_store: StoreFactory) -> Store:
    await asyncio.to_thread(redis_cluster.balance, [f"{{s{n}}}" for n in range(SHARDS)])
    return await cluster_store(shards=SHARDS, retry_schedule=SCHEDULE, worker_concurrency=16)


async def _delivered(store: Store, count: int) -> bool:
    counts = (await store.stats())["counts"]
    return bool(counts["succeeded"] + counts["dead"] == count and counts["delivering"] == 0)


async def _drain(store: Store, count: int) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        await until(lambda: _delivered(store, count), within=120)
    finally:
        stop.set()
        await task


def _spread(
    redis_cluster: ClusterHandle, before: dict[int, tuple[int, int]], prefix: str
) -> tuple[float, float, dict[int, tuple[int, int]]]:
    after = redis_cluster.work(prefix)
    keys = {p: after[p][0] for p in after}
    calls = {p: after[p][1] - before[p][1] for p in after}
    seen = {p: (keys[p], calls[p]) for p in after}
    print("per master (keys, Lua calls):", seen)
    return min(keys.values()) / max(keys.values()), min(calls.values()) / max(calls.values()), seen


async def test_one_apps_keyed_events_spread_over_the_masters(
    redis_cluster: ClusterHandle, cluster_store: StoreFactory
) -> None:
    store = await _twelve_shards(redis_cluster, cluster_store)
    prefix = store.settings.key_prefix
    rec = await LaneReceiver(fail=0.1, slow=0.1, seed=5).start()
    try:
        await store.put_endpoint(endpoint_record(url=rec.url + "/p", app="big"))
        async with cached_publisher(store) as publisher:
            before = await asyncio.to_thread(redis_cluster.work, prefix)
            for start in range(0, 240, 40):
                await asyncio.gather(
                    *(
                        publisher.publish(
                            EventIn(type="t", payload={"lane": f"k{n}", "n": 0}, app="big"),
                            idempotency_key=f"key-{n}",
                        )
                        for n in range(start, start + 40)
                    )
                )
        await _drain(store, 240)
        keys, calls, seen = await asyncio.to_thread(_spread, redis_cluster, before, prefix)
    finally:
        await rec.stop()
    ok = Counter(h.lane for h in rec.hits if 200 <= h.status < 300)
    assert ok == Counter({f"k{n}": 1 for n in range(240)})
    assert len(await event_ids(store)) == 240
    assert keys >= 0.5, seen
    assert calls >= 0.4, seen


async def test_one_apps_ordering_keys_spread_and_stay_in_order(
    redis_cluster: ClusterHandle, cluster_store: StoreFactory
) -> None:
    store = await _twelve_shards(redis_cluster, cluster_store)
    prefix = store.settings.key_prefix
    rec = await LaneReceiver(fail=0.1, slow=0.1, seed=7).start()
    try:
        await store.put_endpoint(endpoint_record(url=rec.url + "/o", app="big", ordering="key"))
        lanes = {f"order-{k}": "big" for k in range(60)}
        async with cached_publisher(store) as publisher:
            before = await asyncio.to_thread(redis_cluster.work, prefix)
            expected = await publish_lanes(publisher, lanes, 4)
        await _drain(store, 240)
        keys, calls, seen = await asyncio.to_thread(_spread, redis_cluster, before, prefix)
    finally:
        await rec.stop()
    assert lane_problems(rec.hits, expected, await dead_ids(store)) == []
    assert rec.overlaps == []
    for h in rec.hits:
        assert ids.shard_of(h.delivery) == ordering.key_shard("big", h.lane, SHARDS)
    assert {(h.lane, h.n) for h in rec.hits if 200 <= h.status < 300} == {
        (lane, n) for lane in lanes for n in range(4)
    }
    assert keys >= 0.5, seen
    assert calls >= 0.4, seen


async def test_one_key_at_once_on_two_masters_makes_one_event(
    redis_cluster: ClusterHandle, cluster_store: StoreFactory
) -> None:
    store = await _twelve_shards(redis_cluster, cluster_store)
    await store.put_endpoint(endpoint_record(url="http://127.0.0.1:9/o", app="big", ordering="key"))

    def master(key: str) -> int:
        shard = store.keys.shard(ordering.key_shard("big", key, SHARDS))
        return redis_cluster.owner(redis_cluster.slot(shard.due))

    lane = "lane-0"
    idem = next(k for k in (f"k-{n}" for n in range(100)) if master(k) != master(lane))
    event = EventIn(type="t", payload={"n": 1}, app="big", ordering_key=lane)
    answers: list[Any] = await asyncio.gather(
        *(Publisher(store).publish(event, idempotency_key=idem) for _ in range(20))
    )
    assert sorted(a.created for a in answers) == [False] * 19 + [True]
    assert len({a.answer["id"] for a in answers}) == 1
    assert await event_ids(store) == [answers[0].answer["id"]]
