"""relay on a real 3-master Redis Cluster (``redis_cluster`` fixture), RELAY_SHARDS=3.

The fixture places the shard tags {s0} {s1} {s2} on three different nodes, and the first
test checks that they are there. Then the core paths run on the cluster: the wake-up
pub/sub, publish through the API and delivery by an in-process worker (every event once),
the cross-shard views, idempotency, fencing, two reclaimers racing and fair claiming
across shards. A slot moved while deliveries flow: ``test_cluster_migration.py``.

Race tests name the protection they prove and the edit that makes them fail (the
protection removed in a scratch copy of the repository).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import orjson
import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from relay.domain import ids
from relay.domain.ordering import key_shard
from relay.queue.scripts import guard_key
from relay.queue.store import Outcome, Store
from tests.helpers import ClusterHandle, Receiver, StoreFactory, event_ids
from tests.helpers.cluster import LONG_LEASE_MS, endpoint, seed, settled, until

pytestmark = pytest.mark.realredis


async def add_endpoint(api: Any, url: str) -> dict[str, Any]:
    async with api("POST", "/v1/endpoints", json={"url": url}) as resp:
        assert resp.status == 201, await resp.text()
        return dict(await resp.json())


async def wait_lease_expired(store: Store, shard: int, delivery_id: str) -> None:
    sk = store.keys.shard(shard)

    async def expired() -> bool:
        lease = await store.redis.zscore(sk.processing, delivery_id)
        secs, micros = await store.redis.get_node_from_key(sk.processing).execute_command("TIME")
        return lease is not None and int(secs) * 1000 + int(micros) // 1000 > lease

    await until(expired)


def outcome(delivery_id: str, token: str, kind: str, worker: str) -> Outcome:
    entry = orjson.dumps({"attempt": 1, "outcome": kind, "worker": worker, "at": 0})
    code = 200 if kind == "succeeded" else 500
    return Outcome(delivery_id, token, kind, 50, code, "" if code == 200 else "http_status", entry)


# ---------------------------------------------------------------------- placement


async def test_shards_are_served_by_three_nodes(
    redis_cluster: ClusterHandle, cluster_store: StoreFactory
) -> None:
    """Each shard's keys (and its slot guard) share one slot; the 3 slots are on 3 nodes."""
    store = await cluster_store()
    owners = []
    for sk in store.keys.all_shards():
        slot = redis_cluster.slot(sk.due)
        for key in (sk.processing, sk.delivery("dlv_x"), sk.event("evt_x"), guard_key(sk.due)):
            assert redis_cluster.slot(key) == slot
        owners.append(redis_cluster.owner(slot))
        await seed(store, sk.shard, 2)
        # The keys really are on that node: it counts them in the slot.
        assert redis_cluster.clients[owners[-1]].cluster("COUNTKEYSINSLOT", slot) > 0
    assert len(set(owners)) == 3, owners
    ep = store.keys.endpoint_state("ep_x")
    assert redis_cluster.slot(ep.breaker) == redis_cluster.slot(ep.inflight)
    assert redis_cluster.slot(store.keys.endpoints) == redis_cluster.slot(store.keys.app("a"))


async def test_wake_reaches_a_subscriber_on_every_node(cluster_store: StoreFactory) -> None:
    """The worker's wake-up: one subscription on any node hears every shard's publish.

    The scripts PUBLISH on their shard's channel from the node serving it; classic
    pub/sub is broadcast over the cluster bus, so ``Store.wake_pubsub`` may use any
    node, and each reconnect takes the next one (a failed node is left behind).
    """
    store = await cluster_store()
    channels = [sk.wake for sk in store.keys.all_shards()]
    subs = [store.wake_pubsub(attempt) for attempt in range(3)]
    try:
        for sub in subs:
            await sub.subscribe(*channels)
        # each subscription took another node
        assert len({sub.get_pubsub_node().name for sub in subs}) == 3
        for shard in range(3):
            await seed(store, shard, 1)  # an idle shard: publish.lua sends the wake-up

        async def heard(sub: Any) -> set[str]:
            got: set[str] = set()
            deadline = time.monotonic() + 10
            while got != set(channels) and time.monotonic() < deadline:
                msg = await sub.get_message(ignore_subscribe_messages=True, timeout=0.5)
                if msg and msg["type"] == "message":
                    got.add(msg["channel"])
            return got

        for sub in subs:
            assert await heard(sub) == set(channels)
    finally:
        for sub in subs:
            await sub.aclose()


async def test_three_hundred_calls_at_once(cluster_store: StoreFactory) -> None:
    """300 publishes to one shard at once (a busy API replica): none refused by the client.

    Protection: ``connect`` raises redis-py's per-node connection cap (100, and past it a
    command fails at once: no blocking pool for the cluster client).
    Fails with the cap left at its default: MaxConnectionsError.
    """
    store = await cluster_store()
    got = await asyncio.gather(*(seed(store, 0, 1) for _ in range(300)))
    assert len({d for ds in got for d in ds}) == 300
    assert (await store.stats())["counts"]["pending"] == 300


# ---------------------------------------------------------------------- delivery via the API


async def test_api_publish_and_worker_deliver_every_event_once(
    cluster_store: StoreFactory, make_api: Any, receiver: Receiver
) -> None:
    """150 events x 2 endpoints through the API, over 3 shards: 300 requests, each once.

    Also the cross-shard reads: event read, paginated delivery list, stats, endpoint CRUD.
    """
    api_store = await cluster_store()
    api = await make_api(api_store)
    eps = [await add_endpoint(api, f"{receiver.url}/{i}") for i in range(2)]

    async def post(i: int) -> dict[str, Any]:
        body = {"type": "order.paid", "payload": {"i": i}}
        async with api("POST", "/v1/events", json=body) as resp:
            assert resp.status == 201, await resp.text()
            return dict(await resp.json())

    events = []
    for start in range(0, 150, 25):
        events += await asyncio.gather(*(post(i) for i in range(start, start + 25)))
    per_shard = Counter(ids.shard_of(e["id"]) for e in events)
    assert set(per_shard) == {0, 1, 2}, per_shard

    worker_store = await cluster_store(worker_concurrency=16)
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(worker_store, worker_store.settings).run(stop))
    try:
        await receiver.wait_for(300, within=30)
        await until(lambda: settled(api_store, 300))
        sent = Counter((r.path, r.headers["webhook-id"]) for r in receiver.requests)
        assert len(sent) == 300 and set(sent.values()) == {1}
        assert {i for _, i in sent} == {e["id"] for e in events}
        # Replay one delivery of each shard (replay.lua in its shard): sent once more each.
        again = [next(e for e in events if ids.shard_of(e["id"]) == s) for s in range(3)]
        for e in again:
            d = e["deliveries"][0]["id"]
            async with api("POST", f"/v1/deliveries/{d}/replay") as resp:
                assert resp.status == 202, await resp.text()
        await receiver.wait_for(303, within=30)
        await until(lambda: settled(api_store, 300))
    finally:
        stop.set()
        await task
    replayed = Counter(r.headers["x-relay-delivery-id"] for r in receiver.requests[300:])
    assert replayed == Counter(e["deliveries"][0]["id"] for e in again)

    async with api("GET", f"/v1/events/{events[-1]['id']}") as resp:
        assert resp.status == 200
        assert len((await resp.json())["deliveries"]) == 2

    listed: list[str] = []
    cursor = None
    for _ in range(20):
        query = "?status=succeeded&limit=70" + (f"&cursor={cursor}" if cursor else "")
        async with api("GET", "/v1/deliveries" + query) as resp:
            assert resp.status == 200, await resp.text()
            page = await resp.json()
        listed += [d["id"] for d in page["data"]]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    expected = {d["id"] for e in events for d in e["deliveries"]}
    assert len(listed) == 300 and set(listed) == expected

    async with api("GET", f"/v1/deliveries?endpoint_id={eps[0]['id']}&limit=200") as resp:
        assert len((await resp.json())["data"]) == 150

    async with api("GET", "/v1/stats") as resp:
        stats = await resp.json()
    assert stats["counts"] == {
        "scheduled": 0,
        "pending": 0,
        "queued": 0,
        "held": 0,
        "delivering": 0,
        "succeeded": 300,
        "dead": 0,
    }
    assert stats["shards"] == 3
    for path in ("/readyz", "/metrics", "/v1/ui/overview", "/v1/ui/deliveries"):
        async with api("GET", path) as resp:
            assert resp.status == 200, (path, await resp.text())

    # Endpoint CRUD: {cfg}-slot scripts.
    async with api("PATCH", f"/v1/endpoints/{eps[1]['id']}", json={"app": "other"}) as resp:
        assert resp.status == 200, await resp.text()
    async with api("GET", "/v1/endpoints?app=default") as resp:
        assert [e["id"] for e in (await resp.json())["data"]] == [eps[0]["id"]]
    async with api("DELETE", f"/v1/endpoints/{eps[0]['id']}") as resp:
        assert resp.status == 204
    async with api("GET", "/v1/endpoints") as resp:
        assert [e["id"] for e in (await resp.json())["data"]] == [eps[1]["id"]]


# ---------------------------------------------------------------------- idempotency


async def test_idempotency_on_cluster(cluster_store: StoreFactory, make_api: Any) -> None:
    """Same key twice (and 10 at once from 2 API instances): one event; new body: 409.

    Protection: publish.lua's ``SET NX`` on the idempotency key, in the shard the key
    hashes to, in the same script as the event.
    Fails with ``NX`` removed from that ``SET`` in publish.lua: the second publish with
    key k-1 answers 201 with a new event instead of 200 with the first.
    """
    store_a, store_b = await cluster_store(), await cluster_store()
    apis = [await make_api(store_a), await make_api(store_b)]
    # An endpoint (never called: no worker here), so every event is indexed and countable.
    await add_endpoint(apis[0], "http://127.0.0.1:9/never")
    body = {"type": "order.paid", "payload": {"n": 1}}

    async def post(api: Any, key: str) -> tuple[int, dict[str, Any]]:
        async with api("POST", "/v1/events", json=body, headers={"Idempotency-Key": key}) as r:
            return r.status, dict(await r.json())

    status, first = await post(apis[0], "k-1")
    assert status == 201
    again_status, again = await post(apis[1], "k-1")
    assert (again_status, again) == (200, first)
    async with apis[1]("GET", f"/v1/events/{first['id']}") as resp:
        assert resp.status == 200

    async def once(i: int) -> tuple[int, str]:
        async with apis[i % 2](
            "POST", "/v1/events", json=body, headers={"Idempotency-Key": "race"}
        ) as r:
            return r.status, (await r.json())["id"]

    answers = await asyncio.gather(*(once(i) for i in range(10)))
    created = [a for a in answers if a[0] == 201]
    assert len(created) == 1, answers
    assert {i for _, i in answers} == {created[0][1]}
    assert sorted(s for s, _ in answers) == [200] * 9 + [201]

    other = {"type": "order.paid", "payload": {"n": 2}}
    async with apis[0]("POST", "/v1/events", json=other, headers={"Idempotency-Key": "race"}) as r:
        assert r.status == 409
        assert (await r.json())["error"] == "idempotency_key_reused"

    # Each key lands on the shard of its app and key (its guard's, whatever the body),
    # so one app's keys spread over the shards; each publishes exactly one event.
    shards: Counter[int | None] = Counter()
    for n in range(12):
        s1, a1 = await post(apis[n % 2], f"spread-{n}")
        s2, a2 = await post(apis[(n + 1) % 2], f"spread-{n}")
        assert (s1, s2, a2["id"]) == (201, 200, a1["id"])
        assert ids.shard_of(a1["id"]) == key_shard("default", f"spread-{n}", 3)
        shards[ids.shard_of(a1["id"])] += 1
    assert set(shards) == {0, 1, 2}, shards
    events = len(await event_ids(store_a))
    assert events == 1 + 1 + 12  # k-1, race, spread-0..11: nothing else was created
    assert (await store_b.stats())["counts"]["pending"] == 14


# ---------------------------------------------------------------------- fencing and reclaim


async def test_stale_record_is_fenced_on_cluster(cluster_store: StoreFactory) -> None:
    """A's lease expires, B reclaims and claims; A's late record is fenced, B's stands.

    Protection: record.lua acts only when the delivery still carries the caller's token.
    Fails with ``local mine = true`` in record.lua: A's late record returns [1], not [0].
    """
    a = await cluster_store(worker_id="A")
    b = await cluster_store(worker_id="B")
    shard = 1
    sk = a.keys.shard(shard)
    (did,) = await seed(a, shard, 1)

    res_a = await a.claim(sk, limit=1, lease_ms=30, token_prefix="tok-a", worker="A")
    (claim_a,) = res_a.items
    await wait_lease_expired(a, shard, did)
    assert (await b.reclaim(sk))[2] == [did]
    res_b = await b.claim(sk, limit=1, lease_ms=LONG_LEASE_MS, token_prefix="tok-b", worker="B")
    (claim_b,) = res_b.items
    assert claim_b.attempts == 2

    assert await a.record(sk, [outcome(did, claim_a.token, "succeeded", "A")]) == [0]
    assert await a.extend(sk, [(did, claim_a.token)], LONG_LEASE_MS) == [0]
    state = await b.get_delivery(did)
    assert state is not None
    assert (state["status"], state["claim"]) == ("delivering", claim_b.token)

    assert await b.record(sk, [outcome(did, claim_b.token, "retry", "B")]) == [1]
    final = await b.get_delivery(did)
    assert final is not None and final["status"] == "pending"
    log = final["attempt_log"]
    assert [(e.get("worker"), bool(e.get("fenced"))) for e in log] == [
        ("A", False),  # lease_expired, written by the reclaim
        ("A", True),
        ("B", False),
    ]


async def test_expired_leases_raced_by_two_reclaimers_on_cluster(
    cluster_store: StoreFactory,
) -> None:
    """200 expired leases on one shard, two reclaimers racing: each reclaimed exactly once.

    Protection: reclaim.lua takes each id out of the processing set (``ZREM``) in the
    script that moves it back.
    Fails with that ``ZREM`` (and its ``== 1`` condition) deleted from reclaim.lua: the
    reclaimers take the same ids again and again.
    """
    owner = await cluster_store(worker_id="doomed")
    shard = 2
    sk = owner.keys.shard(shard)
    due = await seed(owner, shard, 200)
    res = await owner.claim(sk, limit=200, lease_ms=1, token_prefix="t", worker="doomed")
    assert len(res.items) == 200
    await wait_lease_expired(owner, shard, due[-1])

    async def reclaimer(store: Store) -> list[str]:
        won: list[str] = []
        for _ in range(100):  # bounded: a broken reclaim must not loop forever
            _, _, got = await store.reclaim(sk, limit=7)
            if not got:
                break
            won += got
        return won

    r1, r2 = await asyncio.gather(
        reclaimer(await cluster_store()), reclaimer(await cluster_store())
    )
    counts = Counter(r1 + r2)
    assert len(r1) + len(r2) == 200, f"{len(r1) + len(r2)} reclaims of {len(counts)} ids"
    assert set(counts) == set(due)
    assert r1 and r2  # both really took part
    assert int(await owner.redis.hget(sk.stats, "reclaimed")) == 200
    assert await owner.redis.zcard(sk.processing) == 0
    assert await owner.redis.zcard(sk.due) == 200


# ---------------------------------------------------------------------- fairness


async def test_worker_claims_from_every_shard_in_turn(
    cluster_store: StoreFactory, receiver: Receiver
) -> None:
    """A backlog of 60 on each of 3 shards; of the first 60 sends, every shard gets >= 10.

    Protection: the worker rotates the shard it claims from first on every pass.
    Fails with ``rotation`` kept at 0 in ``Worker._loop``: the last shard gets only a
    few of the first 60 sends.
    """
    store = await cluster_store(worker_concurrency=3, claim_batch=3)
    ep = endpoint(receiver.url + "/fair")
    await store.put_endpoint(ep)
    for shard in range(3):
        await seed(store, shard, 60, ep["id"])

    first: list[str] = []
    stop = asyncio.Event()

    async def note(request: Any) -> web.Response:
        if len(first) < 60:
            first.append(request.headers["x-relay-delivery-id"])
        else:
            stop.set()
        # Sends slower than a claim pass: slots free up between passes, not during one
        # (with instant sends every pass would reach all three shards anyway).
        await asyncio.sleep(0.05)
        return web.Response(text="ok")

    receiver.responses["/fair"] = note
    task = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        await asyncio.wait_for(stop.wait(), 30)
    finally:
        stop.set()
        await task
    per_shard = Counter(ids.shard_of(d) for d in first)
    assert len(first) == 60
    assert all(per_shard[s] >= 10 for s in range(3)), per_shard
