"""Race tests on a real redis-server: every contender has its own Store and connection.

Each test names the protection it proves and the edit that makes it fail: the protection
removed by hand in a scratch copy of the repository (the docstring describes the edit and
the failure). Redis runs
scripts one at a time, so the protections are what a script does atomically; removing
one means splitting a script into round trips or dropping the condition that decides
a winner.

The poison-message test runs real ``python -m relay worker`` processes that kill
themselves (``RELAY_TEST_CRASH_MARKER``) and are restarted by the test.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections import Counter
from typing import Any

import orjson
import pytest

from relay.queue.store import Outcome, Store
from tests.helpers import event_ids, publish_event

pytestmark = pytest.mark.realredis

LONG_LEASE_MS = 60_000


async def seed(store: Store, n: int, endpoint_id: str = "ep_none") -> list[str]:
    """Publish one event with ``n`` deliveries (one script call); return their ids."""
    _, deliveries, taken = await publish_event(store, [endpoint_id] * n, event_type="race.test")
    assert taken is None
    return deliveries


async def claim_all(store: Store, limit: int, lease_ms: int = LONG_LEASE_MS) -> list[str]:
    """Claim batches of ``limit`` until the due set is empty (bounded, never endless)."""
    sk = store.keys.shard(0)
    got: list[str] = []
    for _ in range(10_000):
        res = await store.claim(
            sk,
            limit=limit,
            lease_ms=lease_ms,
            token_prefix=uuid.uuid4().hex,
            worker=store.settings.worker_id,
        )
        if not res.items:
            return got
        got += [c.id for c in res.items]
    raise AssertionError("claim never ran dry")


def outcome(claim_id: str, token: str, kind: str, worker: str, attempt: int) -> Outcome:
    entry = orjson.dumps({"attempt": attempt, "outcome": kind, "worker": worker, "at": 0})
    code = 200 if kind == "succeeded" else 500
    return Outcome(claim_id, token, kind, 50, code, "" if code == 200 else "http_status", entry)


async def wait_lease_expired(store: Store, delivery_id: str) -> None:
    """Until Redis's clock is past the delivery's lease (bounded)."""
    sk = store.keys.shard(0)
    for _ in range(500):
        lease = await store.redis.zscore(sk.processing, delivery_id)
        secs, micros = await store.redis.time()
        if lease is not None and secs * 1000 + micros // 1000 > lease:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("lease never expired")


# ---------------------------------------------------------------------- claim


async def test_claim_partition_eight_claimers(make_store: Any) -> None:
    """8 claimers, 1,000 due deliveries: pairwise disjoint claims whose union is everything.

    Protection: claim.lua takes (ZRANGEBYSCORE) and removes (ZREM) in one script.
    Fails with the ``ZREM`` deleted from claim.lua and done instead by ``Store.claim``
    in a second round trip after the script returns: the claimers overlap (ids
    claimed twice).
    """
    owner = await make_store()
    due = await seed(owner, 1000)
    claimers = [await make_store(worker_id=f"claimer-{i}") for i in range(8)]
    # Small batches: many interleaved claim calls rather than one winner taking all.
    results = await asyncio.gather(*(claim_all(c, limit=7) for c in claimers))

    counts = Counter(d for r in results for d in r)
    twice = [d for d, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} ids claimed twice; {sum(counts.values())} claims"
    for i, a in enumerate(results):
        for b in results[i + 1 :]:
            assert set(a).isdisjoint(b)
    assert set(counts) == set(due)
    assert sum(1 for r in results if r) > 1  # the race really was contended

    sk = owner.keys.shard(0)
    assert await owner.redis.zcard(sk.due) == 0
    assert await owner.redis.zcard(sk.processing) == 1000
    # Every delivery carries exactly one claim: attempt 1, the token of its claimer.
    async with owner.redis.pipeline(transaction=False) as pipe:
        for d in due:
            pipe.hmget(sk.delivery(d), "attempts", "claim", "status", "worker")
        rows = await pipe.execute()
    owners = {d: c.settings.worker_id for c, r in zip(claimers, results, strict=True) for d in r}
    for d, (attempts, token, status, worker) in zip(due, rows, strict=True):
        assert (attempts, status, worker) == ("1", "delivering", owners[d])
        assert token
    assert len({r[1] for r in rows}) == 1000


async def test_claim_held_open_is_never_taken(make_store: Any) -> None:
    """A has claimed 5 of 8 and not sent yet; B (reclaim, then claim) gets the other 3.

    Protection: a claimed delivery leaves the due set in the claiming script, and the
    lease keeps reclaim away while it is live.
    Fails with the ``ZREM`` deleted from claim.lua: B's claim returns all 8 deliveries,
    A's 5 included (8 != 3).
    """
    a = await make_store(worker_id="A")
    b = await make_store(worker_id="B")
    due = await seed(a, 8)
    sk = a.keys.shard(0)

    res_a = await a.claim(sk, limit=5, lease_ms=LONG_LEASE_MS, token_prefix="a", worker="A")
    ids_a = {c.id for c in res_a.items}
    back, dead, reclaimed = await b.reclaim(sk)
    assert (back, dead, reclaimed) == (0, 0, [])
    res_b = await b.claim(sk, limit=10, lease_ms=LONG_LEASE_MS, token_prefix="b", worker="B")
    ids_b = {c.id for c in res_b.items}
    again = await b.claim(sk, limit=10, lease_ms=LONG_LEASE_MS, token_prefix="b2", worker="B")

    assert len(ids_a) == 5
    assert len(ids_b) == 3
    assert ids_a.isdisjoint(ids_b)
    assert ids_a | ids_b == set(due)
    assert again.items == []
    for d in ids_a:
        assert await a.redis.hget(sk.delivery(d), "worker") == "A"


# ---------------------------------------------------------------------- reclaim


async def test_expired_leases_raced_by_two_reclaimers(make_store: Any) -> None:
    """200 expired leases, two reclaimers racing in small batches: each reclaimed once.

    Protection: reclaim.lua removes the id from the processing set (``ZREM``) in the
    same script that moves it, so a second reclaimer no longer sees it.
    Fails with the ``ZREM`` of the processing set deleted from reclaim.lua (and its
    ``== 1`` condition with it): both reclaimers reclaim the same ids again and again.
    """
    owner = await make_store(worker_id="doomed")
    due = await seed(owner, 200)
    sk = owner.keys.shard(0)
    assert len(await claim_all(owner, limit=200, lease_ms=1)) == 200
    await wait_lease_expired(owner, due[-1])

    async def reclaimer(store: Store) -> list[str]:
        won: list[str] = []
        for _ in range(100):  # bounded: a broken reclaim must not loop forever
            _, _, got = await store.reclaim(sk, limit=7)
            if not got:
                break
            won += got
        return won

    r1, r2 = await asyncio.gather(reclaimer(await make_store()), reclaimer(await make_store()))

    counts = Counter(r1 + r2)
    assert len(r1) + len(r2) == 200, f"{len(r1) + len(r2)} reclaims of {len(counts)} ids"
    assert set(counts) == set(due)
    assert set(r1).isdisjoint(r2)
    assert int(await owner.redis.hget(sk.stats, "reclaimed")) == 200
    assert await owner.redis.zcard(sk.processing) == 0
    assert await owner.redis.zcard(sk.due) == 200
    async with owner.redis.pipeline(transaction=False) as pipe:
        for d in due:
            pipe.lrange(sk.log(d), 0, -1)
            pipe.hmget(sk.delivery(d), "status", "attempts", "claim")
        res = await pipe.execute()
    for logs, fields in zip(res[::2], res[1::2], strict=True):
        entries = [orjson.loads(e) for e in logs]
        assert [(e["n"], e["error"], e["worker"]) for e in entries] == [
            (1, "lease_expired", "doomed")
        ]
        assert fields == ["pending", "1", None]


# ---------------------------------------------------------------------- fencing


@pytest.mark.parametrize("a_result", ["succeeded", "retry", "dead"])
@pytest.mark.parametrize("a_is_late_after_b", [False, True], ids=["before-B", "after-B"])
async def test_superseded_result_is_fenced(
    make_store: Any, a_result: str, a_is_late_after_b: bool
) -> None:
    """A's lease expires, B reclaims and claims; A's late result never changes B's state.

    Both orderings: A's late result lands while B still holds the claim, or after B
    recorded its own result; A's success and A's failures each. A's request still
    appears in the attempt log with the next free number and ``fenced: true``; A's late
    heartbeat (extend) and hand-back (release) are fenced too.
    Protection: record.lua (and extend/release) act only when the delivery still
    carries the caller's claim token.
    Fails, in all six parametrizations, with ``local mine = true`` in record.lua (no
    token check): A's late record returns 1 (recorded) instead of 0, and with that
    assertion set aside the snapshot check catches A's result overwriting B's state
    (moved from processing to succeeded while B holds the claim; after B's retry, the
    delivery sits in both due and succeeded).
    """
    a = await make_store(worker_id="A")
    b = await make_store(worker_id="B")
    observer = await make_store()
    (did,) = await seed(a, 1)
    sk = a.keys.shard(0)

    res_a = await a.claim(sk, limit=1, lease_ms=30, token_prefix="tok-a", worker="A")
    (claim_a,) = res_a.items
    await wait_lease_expired(a, did)
    _, _, reclaimed = await b.reclaim(sk)
    assert reclaimed == [did]
    res_b = await b.claim(sk, limit=1, lease_ms=LONG_LEASE_MS, token_prefix="tok-b", worker="B")
    (claim_b,) = res_b.items
    assert claim_b.attempts == 2

    b_result = "retry" if a_result == "succeeded" else "succeeded"
    if a_is_late_after_b:
        assert await b.record(sk, [outcome(did, claim_b.token, b_result, "B", 2)]) == [1]

    async def snapshot() -> dict[str, Any]:
        state = await observer.redis.hgetall(sk.delivery(did))
        state.pop("log_n")  # A's fenced log entry takes a number; nothing else moves
        sets = {}
        for name in ("due", "processing", "succeeded", "dead"):
            sets[name] = await observer.redis.zscore(getattr(sk, name), did)
        return {"hash": state, "sets": sets}

    before = await snapshot()
    late = outcome(did, claim_a.token, a_result, "A", claim_a.attempts)
    assert await a.record(sk, [late]) == [0]
    assert await a.extend(sk, [(did, claim_a.token)], LONG_LEASE_MS) == [0]
    assert await a.release(sk, [(did, claim_a.token)]) == [0]
    assert await snapshot() == before

    if not a_is_late_after_b:
        assert before["hash"]["claim"] == claim_b.token
        assert before["hash"]["status"] == "delivering"
        assert await b.record(sk, [outcome(did, claim_b.token, b_result, "B", 2)]) == [1]
    final = await observer.get_delivery(did)
    assert final is not None
    assert final["status"] == ("succeeded" if b_result == "succeeded" else "pending")
    assert final["attempts"] == 2

    log = final["attempt_log"]
    assert [e["n"] for e in log] == list(range(1, len(log) + 1))
    assert (log[0]["error"], log[0]["worker"]) == ("lease_expired", "A")
    fenced = [e for e in log if e.get("fenced")]
    assert [(e["worker"], e["attempt"], e["outcome"]) for e in fenced] == [("A", 1, a_result)]
    b_entries = [e for e in log if e.get("worker") == "B"]
    assert [(e["outcome"], e.get("fenced")) for e in b_entries] == [(b_result, None)]
    expected_n = 3 if a_is_late_after_b else 2
    assert fenced[0]["n"] == expected_n


# ---------------------------------------------------------------------- idempotency


async def test_idempotency_race_twenty_publishes_one_event(make_store: Any, make_api: Any) -> None:
    """20 concurrent POST /v1/events, one Idempotency-Key, same body, 4 API instances.

    Exactly one event and one set of deliveries; every answer carries the same id.
    Protection: publish.lua's ``SET NX`` on the idempotency key, in the same script as
    the writes.
    Fails with ``NX`` removed from that ``SET`` in publish.lua: all 20 answers are 201,
    with 20 different event ids, and the events index holds 20 events.
    """
    stores = [await make_store() for _ in range(4)]
    apis = [await make_api(s) for s in stores]
    endpoints = []
    for path in ("/a", "/b"):
        async with apis[0]("POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9" + path}) as r:
            assert r.status == 201, await r.text()
            endpoints.append((await r.json())["id"])

    body = {"type": "order.paid", "payload": {"order": 42, "items": [1, 2, 3]}}
    headers = {"Idempotency-Key": "order-42-paid"}
    go = asyncio.Event()

    async def publish(i: int) -> tuple[int, dict[str, Any]]:
        await go.wait()
        async with apis[i % 4]("POST", "/v1/events", json=body, headers=headers) as r:
            return r.status, await r.json()

    tasks = [asyncio.create_task(publish(i)) for i in range(20)]
    await asyncio.sleep(0)
    go.set()
    answers = await asyncio.gather(*tasks)

    assert sorted(s for s, _ in answers) == [200] * 19 + [201]
    assert len({a["id"] for _, a in answers}) == 1
    assert len({orjson.dumps(a["deliveries"]) for _, a in answers}) == 1
    (first,) = [a for s, a in answers if s == 201]
    assert sorted(d["endpoint_id"] for d in first["deliveries"]) == sorted(endpoints)

    sk = stores[0].keys.shard(0)
    r = stores[0].redis
    assert await event_ids(stores[0], 0) == [first["id"]]
    assert await r.zrange(sk.events, 0, -1) == [first["id"]]
    assert await r.zcard(sk.due) == 2


# ---------------------------------------------------------------------- replay


async def test_replay_race_one_wins(make_store: Any, make_api: Any) -> None:
    """Two replays of each of 10 dead deliveries at once, from two API instances.

    Each delivery: exactly one 202, one 409 delivery_not_replayable, one reset.
    Protection: replay.lua checks the status and resets in one script.
    Fails with ``or status == "pending"`` added to replay.lua's condition (the status
    check then lets a replay already done through): both answers are 202.
    """
    store = await make_store(worker_id="W")
    apis = [await make_api(await make_store()) for _ in range(2)]
    dead = await seed(store, 10)
    sk = store.keys.shard(0)
    res = await store.claim(sk, limit=10, lease_ms=LONG_LEASE_MS, token_prefix="t", worker="W")
    recorded = await store.record(
        sk, [outcome(c.id, c.token, "dead", "W", c.attempts) for c in res.items]
    )
    assert recorded == [1] * 10
    assert await store.redis.zcard(sk.dead) == 10

    go = asyncio.Event()

    async def replay(api: Any, did: str) -> tuple[str, int, dict[str, Any]]:
        await go.wait()
        async with api("POST", f"/v1/deliveries/{did}/replay") as r:
            return did, r.status, await r.json()

    tasks = [asyncio.create_task(replay(api, d)) for d in dead for api in apis]
    await asyncio.sleep(0)
    go.set()
    answers = await asyncio.gather(*tasks)

    for did in dead:
        mine = sorted((s, a.get("error")) for d, s, a in answers if d == did)
        assert mine == [(202, None), (409, "delivery_not_replayable")], mine
        row = await store.get_delivery(did, with_log=False)
        assert row is not None
        assert (row["status"], row["attempts"], row["replays"]) == ("pending", 0, 1)
    assert await store.redis.zcard(sk.dead) == 0
    assert sorted(await store.redis.zrange(sk.due, 0, -1)) == sorted(dead)


# ---------------------------------------------------------------------- poison


async def test_poison_message_reaches_dead_and_the_rest_is_delivered(
    make_store: Any, make_api: Any, receiver: Any, redis_server: Any
) -> None:
    """A delivery that kills its worker process on every send still ends up dead.

    Real ``python -m relay worker`` processes with ``RELAY_TEST_CRASH_MARKER``: each one
    that claims the poison event exits 86; the test restarts it. The attempt is counted
    at claim, so after 3 claims (schedule "50ms,50ms") the next reclaim sends it to dead,
    and a normal event published beside it is delivered. Concurrency 1 per process, so
    the crash takes down only the poison send (a crash kills every send in flight in
    that process; each of those is reclaimed and charged an attempt).
    Protection: claim.lua's ``HINCRBY attempts`` (counting at claim) and reclaim.lua's
    "attempts spent -> dead".
    Fails with claim.lua's ``HINCRBY ... "attempts", 1`` replaced by a plain read
    (attempts counted only when an outcome is recorded, which a crash never does): the
    poison loops, still delivering with attempts 0 when the crash bound ends the run.
    """
    store = await make_store()
    api = await make_api(store)
    marker = "poison-" + uuid.uuid4().hex[:8]
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/hook"}) as r:
        assert r.status == 201
    events = {}
    for name, payload in (("poison", {"note": marker}), ("normal", {"note": "fine"})):
        async with api("POST", "/v1/events", json={"type": "t", "payload": payload}) as r:
            assert r.status == 201
            events[name] = (await r.json())["deliveries"][0]["id"]

    env = {
        **os.environ,
        "RELAY_REDIS_URL": redis_server.url,
        "RELAY_KEY_PREFIX": store.settings.key_prefix,
        "RELAY_LEASE_SECONDS": "0.5",
        "RELAY_RETRY_SCHEDULE": "50ms,50ms",
        "RELAY_RETRY_JITTER": "0",
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_WORKER_CONCURRENCY": "1",
        "RELAY_TEST_CRASH_MARKER": marker,
        "RELAY_LOG_LEVEL": "error",
    }
    max_attempts = 3
    crash_codes: list[int] = []
    procs: list[asyncio.subprocess.Process] = []
    started = 0

    async def spawn() -> asyncio.subprocess.Process:
        nonlocal started
        started += 1
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "relay",
            "worker",
            env={**env, "RELAY_WORKER_ID": f"poison-w{started}"},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        procs.append(proc)
        return proc

    async def supervise(slot: int) -> None:
        # Restart the worker each time it dies; a bound on crashes (not on time) ends a
        # broken run whose poison never dies.
        while len(crash_codes) < max_attempts + 3:
            proc = await spawn()
            crash_codes.append(await proc.wait())

    async def settled() -> bool:
        poison = await store.get_delivery(events["poison"], with_log=False)
        normal = await store.get_delivery(events["normal"], with_log=False)
        assert poison is not None and normal is not None
        return poison["status"] == "dead" and normal["status"] == "succeeded"

    supervisors = [asyncio.create_task(supervise(i)) for i in range(2)]
    try:
        deadline = time.monotonic() + 40  # a safety net against a hang, not an assertion
        while not await settled() and time.monotonic() < deadline:
            if all(s.done() for s in supervisors):
                break
            await asyncio.sleep(0.05)
    finally:
        for s in supervisors:
            s.cancel()
        await asyncio.gather(*supervisors, return_exceptions=True)
        for p in procs:
            if p.returncode is None:
                p.terminate()
        for p in procs:
            await p.wait()

    poison = await store.get_delivery(events["poison"])
    normal = await store.get_delivery(events["normal"])
    assert poison is not None and normal is not None
    assert (poison["status"], poison["attempts"]) == ("dead", max_attempts), (
        f"poison is {poison['status']} with attempts {poison['attempts']} "
        f"after {len(crash_codes)} worker crashes"
    )
    assert [e["error"] for e in poison["attempt_log"]] == ["lease_expired"] * max_attempts
    assert crash_codes == [86] * max_attempts
    assert normal["status"] == "succeeded"
    got = [r.headers["x-relay-delivery-id"] for r in receiver.requests]
    assert events["poison"] not in got
    assert events["normal"] in got
