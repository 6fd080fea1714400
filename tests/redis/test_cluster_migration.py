"""A shard's slot moved to another node while relay publishes and delivers (real cluster).

Split from ``test_cluster.py`` (whose fixtures and helpers it uses) to keep modules small.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from tests.helpers import ClusterHandle, Receiver, StoreFactory
from tests.helpers.cluster import LONG_LEASE_MS, endpoint, seed, settled, until

pytestmark = pytest.mark.realredis


async def test_slot_moved_while_deliveries_flow(
    redis_cluster: ClusterHandle, cluster_store: StoreFactory, receiver: Receiver
) -> None:
    """3,000 events publishing and delivering while shard 0's slot moves to another node.

    The slot moves the way ``redis-cli --cluster reshard`` moves it (IMPORTING,
    MIGRATING, MIGRATE, SETSLOT NODE on every node), with its keys in the two orders
    that hurt, each held until the worker has tried to claim from the split shard:
    (1) half the due deliveries' hashes moved, the queues not: a claim script on the
    source would find hashes gone; (2) the queues moved, the other half of the hashes
    not: a claim script sent to the target after ``ASK`` would find them missing.
    Afterwards every event reached the receiver exactly once and the stats are clean.
    Protection: every script declares its slot's never-written guard key, so Redis
    refuses it (TRYAGAIN) while the slot's keys are split; a refused call ran nothing
    and is retried (relay/scripts.py; the worker retries claims itself). And a shard
    whose outcome writes are being retried holds back only its own (each key of a group
    commit has its own writer): written in turn, shard 0's retries would hold every other
    shard's writes, the worker's sends stay tracked, it stops claiming and the wait for
    its claims times out.
    Fails without the guard key (scripts called with their own keys only): claim.lua
    runs on the split shard ("Script attempted to access a non local key in a cluster
    node" after its ZREMs on the source; on the target, hashes not there yet read as
    missing) and drops deliveries, so the wait for all 3,000 times out. And with
    redis-py's default ``reinitialize_steps`` (relay.queue.store.connect sets 0), the
    MOVED answers of the migration make the client close its connections under other
    tasks' commands: publishes fail with AttributeError "'NoneType' object has no
    attribute 'writelines'".
    """
    publisher = await cluster_store()
    worker_store = await cluster_store(worker_concurrency=32, lease_seconds=15.0)
    ep = endpoint(receiver.url + "/m")
    await publisher.put_endpoint(ep)
    ep_id = ep["id"]

    async def slow(_: Any) -> web.Response:
        await asyncio.sleep(0.02)  # a receiver slower than the publisher: a backlog builds
        return web.Response(text="ok")

    receiver.responses["/m"] = slow
    total = 3000
    published: list[str] = []

    split = asyncio.Event()

    async def publish_all() -> None:
        """Half before the move (a backlog on every shard), half while the slot is split."""
        for n in range(0, total, 30):
            if n == total // 2:
                await split.wait()
            got = await asyncio.gather(*(seed(publisher, i % 3, 1, ep_id) for i in range(30)))
            published.extend(d for ds in got for d in ds)

    # Count the worker's claims on shard 0, to hold each split until it has tried one.
    claims_on_0: list[str] = []
    real_claim = worker_store.claim

    async def counted_claim(sk: Any, **kw: Any) -> Any:
        try:
            res = await real_claim(sk, **kw)
        except Exception as exc:
            if sk.shard == 0:
                claims_on_0.append(f"error: {exc}")
            raise
        if sk.shard == 0:
            claims_on_0.append(f"claimed {len(res.items)}")
        return res

    worker_store.claim = counted_claim  # type: ignore[method-assign]

    async def claim_tried() -> None:
        """Until the worker made a claim on shard 0 that started in this state (its claims
        run one at a time, so the second to finish from now on did)."""
        seen = len(claims_on_0)
        await until(lambda: len(claims_on_0) >= seen + 2, within=20)

    sk = publisher.keys.shard(0)
    slot = redis_cluster.slot(sk.due)
    src = redis_cluster.owner(slot)
    dst = next(p for p in redis_cluster.ports if p != src)

    stop = asyncio.Event()
    moved = False
    worker = asyncio.create_task(Worker(worker_store, worker_store.settings).run(stop))
    producer = asyncio.create_task(publish_all())
    try:
        await receiver.wait_for(300, within=30)
        # A claim held by "another worker" across the move: the shard's processing set is
        # never empty, so the claim script's own keys are all there to be found.
        hold = await publisher.claim(
            sk, limit=1, lease_ms=LONG_LEASE_MS, token_prefix="test-hold", worker="test"
        )
        assert len(hold.items) == 1
        backlog = await publisher.redis.zrange(sk.due, 0, -1)
        assert len(backlog) >= 20, len(backlog)  # there is something to claim
        await asyncio.to_thread(redis_cluster.begin_move, slot, dst)
        split.set()
        # (1) half the due deliveries' hashes move; the queues stay on the source.
        first = [sk.delivery(d) for d in backlog[::2]]
        await asyncio.to_thread(redis_cluster.migrate_keys, src, dst, first)
        await claim_tried()
        # (2) everything else moves but the other half of those hashes.
        later = {sk.delivery(d) for d in backlog[1::2]}
        rest = await asyncio.to_thread(redis_cluster.keys_in_slot, src, slot)
        await asyncio.to_thread(
            redis_cluster.migrate_keys, src, dst, [k for k in rest if k not in later]
        )
        assert await asyncio.to_thread(redis_cluster.keys_in_slot, dst, slot)
        await claim_tried()
        # (3) the rest, then the slot changes hands.
        rest = await asyncio.to_thread(redis_cluster.keys_in_slot, src, slot)
        await asyncio.to_thread(redis_cluster.migrate_keys, src, dst, rest)
        await asyncio.to_thread(redis_cluster.finish_move, slot, src, dst)
        moved = True
        (held,) = hold.items
        assert await publisher.release(sk, [(held.id, held.token)]) == [1]
        await producer
        await until(lambda: len(set(_delivered(receiver)) & set(published)) >= total, within=40)
        await until(lambda: settled(publisher, total), within=20)
    finally:
        stop.set()
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
        await worker
        # Failed mid-move: leave the session's cluster whole for the tests after this one
        # (a slot left split makes the next cluster tests fail with "TTL exhausted").
        if not moved:
            await asyncio.to_thread(redis_cluster.move_slot, slot, dst)
        got = _delivered(receiver)
        print(
            f"receiver got {len(set(got) & set(published))} of {total}; "
            f"refused: {publisher.scripts.refused} {worker_store.scripts.refused}; "
            f"claims on shard 0: {Counter(c[:30] for c in claims_on_0)}"
        )

    assert redis_cluster.owner(slot) == dst
    assert redis_cluster.clients[src].cluster("COUNTKEYSINSLOT", slot) == 0
    assert redis_cluster.clients[dst].cluster("COUNTKEYSINSLOT", slot) > 0
    assert len(published) == total and set(got) == set(published)
    assert set(got.values()) == {1}, [d for d, n in got.items() if n > 1][:5]
    stats = await publisher.stats()
    assert stats["counts"] == {
        "scheduled": 0,
        "pending": 0,
        "queued": 0,
        "held": 0,
        "delivering": 0,
        "succeeded": total,
        "dead": 0,
    }
    assert stats["reclaimed_total"] == 0
    # The split really was met: claims (and publishes) on shard 0 were refused.
    assert worker_store.scripts.refused.get("claim", 0) > 0
    assert publisher.scripts.refused.get("publish", 0) > 0


def _delivered(receiver: Receiver) -> Counter[str]:
    return Counter(r.headers["x-relay-delivery-id"] for r in receiver.requests)
