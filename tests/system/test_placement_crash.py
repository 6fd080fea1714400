"""A publish killed between its two steps (the key's guard taken on one master, the
event not yet written on another) is finished by the next request with the key.

A child process (``tests/helpers/placement.py``) publishes an ordered event whose
Idempotency-Key's guard and ordering key are on two shards, on two masters of a real
3-master Redis Cluster; it stops after the guard is taken and is SIGKILLed there. Then:
the guard is in Redis and the event is not (nothing was acknowledged); 12 concurrent
retries with the same key and body answer the child's first answer, and exactly one
event exists, with its delivery due, on its ordering key's shard; a changed body is
409. Seen failing with ``Guard._found``'s call of ``finish`` taken out: the retries
answer 200 with an event id that is in no shard.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import orjson
import pytest

from relay.domain import ids, ordering
from relay.domain.schema import EventIn, endpoint_record
from relay.publishing import IdempotencyKeyReused, Publisher
from tests.helpers import ClusterHandle, StoreFactory, event_ids
from tests.helpers.placement import keys_apart

pytestmark = pytest.mark.realredis

ROOT = Path(__file__).resolve().parents[2]


async def test_a_publish_killed_between_its_steps_is_finished_once(
    cluster_store: StoreFactory, redis_cluster: ClusterHandle
) -> None:
    store = await cluster_store()
    keyed = endpoint_record(url="http://127.0.0.1:9/k", app="shop", ordering="key")
    await store.put_endpoint(keyed)
    idem, lane = keys_apart("shop", 3)
    guard_shard = ordering.key_shard("shop", idem, 3)
    event_shard = ordering.key_shard("shop", lane, 3)
    guard_key = store.keys.shard(guard_shard).idempotency("shop", idem)
    event_tag = store.keys.shard(event_shard).due
    assert redis_cluster.owner(redis_cluster.slot(guard_key)) != redis_cluster.owner(
        redis_cluster.slot(event_tag)
    )
    event = EventIn(type="t", payload={"n": 1}, app="shop", ordering_key=lane)
    settings = {
        "redis_url": redis_cluster.url,
        "redis_cluster": True,
        "key_prefix": store.settings.key_prefix,
        "shards": 3,
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.helpers.placement",
        orjson.dumps(settings).decode(),
        event.model_dump_json(),
        idem,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None
    line = await asyncio.wait_for(child.stdout.readline(), 60)
    assert line == b"between\n", line
    child.send_signal(signal.SIGKILL)
    assert await child.wait() == -signal.SIGKILL

    raw = await store.get_idempotency(guard_shard, "shop", idem)
    assert raw is not None
    first = orjson.loads(raw)["answer"]
    assert ids.shard_of(first["id"]) == event_shard
    assert await event_ids(store) == []  # the event was never written: nothing acknowledged

    retries = await asyncio.gather(
        *(Publisher(store).publish(event, idempotency_key=idem) for _ in range(12))
    )
    assert [r.created for r in retries] == [False] * 12
    assert all(r.answer == first for r in retries)
    assert await event_ids(store) == [first["id"]]
    (dlv,) = first["deliveries"]
    stored = await store.get_delivery(dlv["id"])
    assert stored is not None and stored["status"] == "pending"
    assert stored["endpoint_id"] == keyed["id"]
    with pytest.raises(IdempotencyKeyReused):
        await Publisher(store).publish(
            EventIn(type="t", payload={"n": 2}, app="shop", ordering_key=lane),
            idempotency_key=idem,
        )
    assert await event_ids(store) == [first["id"]]
