"""Ordered delivery on a real 3-master Redis Cluster, RELAY_SHARDS=3.

* ``test_lanes_in_order_on_the_cluster``: three apps whose shards ({s0} {s1} {s2}) are
  on three nodes, a ``key`` endpoint each, 7 keys per app (21 lanes) x 50 events,
  published lane by lane concurrently while 3 ``relay worker`` processes
  (RELAY_REDIS_CLUSTER=1) deliver to the failing, slow receiver of ordering_kit: every
  lane in publish order, never two of a lane in flight, each event's lanes in the shard
  of its app and ordering key. Fails in a scratch copy whose
  ``relay.domain.ordering.shard_for`` picks a random shard for ordered events too (a
  lane split over three shards, three heads at once): lane_problems lists lanes whose
  runs of numbers are out of order.
* ``test_one_key_one_shard_whatever_the_body``: placement (docs/operating/placement.md):
  an Idempotency-Key's guard is on the shard of its app and key whether the event is
  ordered or not, so the same key with another body (an ordering key added, other
  targets) is 409, never a second event on another shard; an ordered event goes to its
  ordering key's shard; events with neither spread over the shards.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from relay.domain import ids
from relay.domain.ordering import app_shard, key_shard
from relay.domain.schema import EventIn, endpoint_record
from relay.publishing import IdempotencyKeyReused, Publisher
from relay.queue.store import Store
from tests.helpers import ClusterHandle, StoreFactory
from tests.helpers.ordering_kit import (
    LaneReceiver,
    dead_ids,
    lane_problems,
    publish_lanes,
    start_workers,
    stop_workers,
    until,
    worker_env,
)

pytestmark = pytest.mark.realredis

SCHEDULE = (0.005, 0.01, *([0.02] * 8))


def apps_on_every_shard(shards: int = 3) -> list[str]:
    found: dict[int, str] = {}
    n = 0
    while len(found) < shards:
        found.setdefault(app_shard(f"app-{n}", shards), f"app-{n}")
        n += 1
    return [found[s] for s in range(shards)]


async def done(store: Store) -> bool:
    counts = (await store.stats())["counts"]
    return counts["pending"] == counts["delivering"] == counts["queued"] == 0


def _started(logs: Path) -> int:
    return sum("worker.started" in p.read_text() for p in logs.glob("worker-*.log"))


async def started(logs: Path, count: int) -> bool:
    return await asyncio.to_thread(_started, logs) == count


async def test_lanes_in_order_on_the_cluster(
    cluster_store: StoreFactory, redis_cluster: ClusterHandle, tmp_path: Path
) -> None:
    store = await cluster_store(retry_schedule=SCHEDULE)
    rec = await LaneReceiver(seed=3).start()
    try:
        apps = apps_on_every_shard()
        for app in apps:
            await store.put_endpoint(
                endpoint_record(url=rec.url + "/" + app, app=app, ordering="key")
            )
        env = worker_env(store, redis_cluster.url, RELAY_REDIS_CLUSTER="1", RELAY_LOG_LEVEL="info")
        procs = await start_workers(env, 3, tmp_path)
        try:
            await until(lambda: started(tmp_path, 3), within=60)
            lanes = {f"{app}-key-{k}": app for app in apps for k in range(7)}
            expected = await publish_lanes(Publisher(store), lanes, 50)
            await until(lambda: done(store))
        finally:
            assert await stop_workers(procs) == [0, 0, 0]
        assert lane_problems(rec.hits, expected, await dead_ids(store)) == []
        assert rec.overlaps == []
        assert any(h.status == 500 for h in rec.hits)
        # each app's deliveries are in its own shard, and the three shards all served
        by_shard = {ids.shard_of(h.delivery) for h in rec.hits}
        assert by_shard == {0, 1, 2}
        for h in rec.hits:
            assert ids.shard_of(h.delivery) == key_shard(lanes[h.lane], h.lane, 3)
    finally:
        await rec.stop()


async def test_one_key_one_shard_whatever_the_body(cluster_store: StoreFactory) -> None:
    store = await cluster_store()
    keyed = endpoint_record(url="http://127.0.0.1:9/k", ordering="key")
    plain = endpoint_record(url="http://127.0.0.1:9/p")
    for ep in (keyed, plain):
        await store.put_endpoint(ep)
    publisher = Publisher(store)
    home = key_shard("default", "k-1", 3)
    first = await publisher.publish(
        EventIn(type="t", payload=1, endpoint_ids=[plain["id"]]), idempotency_key="k-1"
    )
    assert first.created and ids.shard_of(first.answer["id"]) == home
    for other in (
        EventIn(type="t", payload=1, endpoint_ids=[plain["id"]], ordering_key="o-1"),
        EventIn(type="t", payload=1, ordering_key="o-1"),  # now with an ordered target
        EventIn(type="t", payload=2),
    ):
        with pytest.raises(IdempotencyKeyReused):
            await publisher.publish(other, idempotency_key="k-1")
    again = await publisher.publish(
        EventIn(type="t", payload=1, endpoint_ids=[plain["id"]]), idempotency_key="k-1"
    )
    assert (again.created, again.answer) == (False, first.answer)
    ordered = await publisher.publish(EventIn(type="t", payload=3, ordering_key="o-1"))
    assert ids.shard_of(ordered.answer["id"]) == key_shard("default", "o-1", 3)
    spread = set()
    for _ in range(200):  # random shards: all three long before 200
        if len(spread) == 3:
            break
        got = await publisher.publish(EventIn(type="t", payload=4, endpoint_ids=[plain["id"]]))
        spread.add(ids.shard_of(got.answer["id"]))
    assert spread == {0, 1, 2}
