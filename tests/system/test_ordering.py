"""Ordered delivery on a real Redis: lanes through every transition, then
several worker processes against a receiver that fails and stalls at random.

* ``test_lane_transitions``: one lane through the scripts, step by step: only the head
  is due; retry, defer, hand-back, hold and reclaim keep it the head; success promotes
  the next; a dead head blocks ("block") until replay (in place) or discard; a replayed
  finished delivery goes to the back; retention never takes a queued delivery, and a
  blocked head that expires lets its lane go on.
* ``test_fleet_keeps_every_lane_in_order``: 3 ``relay worker`` processes, 20 keys x 50
  events to a ``key`` endpoint and 60 events to an ``endpoint`` endpoint (one lane),
  published lane by lane concurrently while the workers run, with retries, breaker
  deferrals, a rate limit and an in-flight cap in play: :func:`ordering_kit.lane_problems`
  finds nothing (publish order per lane, never two of a lane in flight, n+1 only after
  n resolved).
* ``test_block_holds_the_lane_until_replay_or_discard``: 3 processes, 20 keys x 20
  events, ``ordering_on_dead: block``; four lanes' n=7 answers 410 (dead at once).
  Once nothing is due or in flight, nothing after n=7 of those lanes was sent, the
  stats count 4 blocked lanes; then two are discarded and two replayed, and every lane
  completes in order.

Each test says the edit that makes it fail (made in a scratch copy of the tree, run with
this ``.venv``'s python, so the worker processes run the changed scripts too).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from relay.domain import ids, signing
from relay.domain.schema import endpoint_record
from relay.publishing import Publisher
from relay.queue.store import Outcome, Store
from tests.helpers.ordering_kit import (
    LaneReceiver,
    dead_ids,
    lane_problems,
    publish_lanes,
    settled,
    start_workers,
    stop_workers,
    until,
    wait_listening,
    worker_env,
)

pytestmark = pytest.mark.realredis

PROCESSES = 3
# 11 attempts (the workers' RELAY_RETRY_SCHEDULE, ordering_kit.worker_env): at a third
# failing, a delivery runs out of them about once in 180,000
SCHEDULE = (0.005, 0.01, *([0.02] * 8))


def outcome(c: Any, kind: str, code: int | None = 200, error: str = "") -> Outcome:
    entry = orjson.dumps({"attempt": c.attempts, "at": 1, "status_code": code})
    return Outcome(c.id, c.token, kind, 0, code, error, entry)


async def publish_raw(store: Store, lane: str, n: int, on_dead: str = "block") -> list[str]:
    """``n`` one-delivery events into ``lane`` of endpoint ``ep_lane`` (store level)."""
    out = []
    for _ in range(n):
        now = int(time.time() * 1000)
        event_id, dlv = ids.new_id("evt", 0, now), ids.new_id("dlv", 0, now)
        await store.publish(
            shard=0,
            event_id=event_id,
            event_type="t",
            app="default",
            body=signing.build_body(event_id, "t", now, b"{}"),
            created_ms=now,
            deliveries=[(dlv, "ep_lane")],
            lanes=[(lane, on_dead)],
        )
        out.append(dlv)
    return out


async def test_lane_transitions(make_store: Any) -> None:
    store = await make_store()
    sk = store.keys.shard(0)

    async def claim(lease_ms: int = 60_000) -> list[Any]:
        got = await store.claim(sk, limit=50, lease_ms=lease_ms, token_prefix="t", worker="w")
        return got.items

    async def status(d: str) -> str:
        return str((await store.get_delivery(d, with_log=False) or {}).get("status"))

    a, b, c = await publish_raw(store, "ep_lane:k", 3)
    assert [await status(x) for x in (a, b, c)] == ["pending", "queued", "queued"]
    assert (await store.stats())["counts"]["queued"] == 2
    # retry, defer, hand-back, hold/resume, reclaim: the head stays the head
    (h,) = await claim()
    assert h.id == a and await claim() == []
    assert await store.record(sk, [outcome(h, "retry", 500)]) == [1]
    (h,) = await claim()
    assert await store.record(sk, [outcome(h, "defer")]) == [1]
    (h,) = await claim()
    assert await store.release(sk, [(h.id, h.token)]) == [1]
    (h,) = await claim()
    assert await store.hold(sk, "ep_lane", [(h.id, h.token)]) == 1
    assert await claim() == []
    assert await store.resume("ep_lane") == 1
    (h,) = await claim(lease_ms=1)
    await asyncio.sleep(0.02)
    assert (await store.reclaim(sk))[0] == 1
    (h,) = await claim()
    assert h.id == a
    # dead with "block": the lane stops; replay retries the head in place
    assert await store.record(sk, [outcome(h, "dead", 410)]) == [1]
    assert await store.blocked_lanes(sk) == [("ep_lane:k", a)]
    read = await store.get_delivery(b)
    assert read and read["status"] == "queued" and read["lane_blocked"] and read["lane_head"] == a
    assert (await store.get_delivery(a) or {})["blocking"] is True
    assert await claim() == []
    assert (await store.stats())["blocked_lanes"] == 1
    assert await store.replay([a]) == {a: "ok"}
    assert await store.blocked_lanes(sk) == [] and await status(b) == "queued"
    (h,) = await claim()
    assert h.id == a
    assert await store.record(sk, [outcome(h, "dead", 410)]) == [1]
    # discard: a stays a dead letter, b goes
    assert await store.discard([c]) == {c: "queued"}  # only dead ones
    assert await store.discard([a]) == {a: "ok"}
    assert await status(a) == "dead" and await status(b) == "pending"
    (h,) = await claim()
    assert h.id == b
    assert await store.record(sk, [outcome(h, "succeeded")]) == [1]
    # replaying a finished one puts it at the back of its lane: behind c
    assert await store.replay([b]) == {b: "ok"}
    assert await status(b) == "queued"
    (h,) = await claim()
    assert h.id == c
    # a deleted endpoint never blocks its lane (its dead go on, "skip")
    assert await store.record(sk, [outcome(h, "dead", None, "endpoint_deleted")]) == [1]
    (h,) = await claim()
    assert h.id == b
    assert await store.record(sk, [outcome(h, "dead", 410)]) == [1]  # blocks again
    # retention: a queued one never expires; an expiring blocked head lets its lane go on
    (d,) = await publish_raw(store, "ep_lane:k", 1)
    swept = await store.expire_shard(sk, succeeded_before=-1, dead_before=10**15, limit=100)
    assert swept.deliveries == 3  # a, c and b: the dead letters
    assert await status(d) == "pending" and await store.blocked_lanes(sk) == []
    (h,) = await claim()
    assert h.id == d
    assert await store.record(sk, [outcome(h, "succeeded")]) == [1]
    assert await store.redis.exists(sk.lane("ep_lane:k")) == 0  # an empty lane leaves no key
    counts = (await store.stats())["counts"]
    assert counts["queued"] == counts["pending"] == 0


async def test_a_skip_lane_goes_on_past_its_dead(make_store: Any) -> None:
    store = await make_store()
    sk = store.keys.shard(0)
    _, b = await publish_raw(store, "ep_lane", 2, on_dead="skip")
    (h,) = (await store.claim(sk, limit=9, lease_ms=60_000, token_prefix="s", worker="w")).items
    assert await store.record(sk, [outcome(h, "dead", 410)]) == [1]
    (h,) = (await store.claim(sk, limit=9, lease_ms=60_000, token_prefix="s", worker="w")).items
    assert h.id == b and await store.blocked_lanes(sk) == []


async def run_ordered(
    store: Store, redis_url: str, tmp_path: Path, rec: LaneReceiver, coro: Any, **env: str
) -> Any:
    procs = await start_workers(worker_env(store, redis_url, **env), PROCESSES, tmp_path)
    try:
        await wait_listening(store, PROCESSES, procs)
        return await coro
    finally:
        codes = await stop_workers(procs)
        assert codes == [0] * PROCESSES


async def test_fleet_keeps_every_lane_in_order(
    make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    """Fails with publish.lua putting every ordered delivery in due (its RPUSH kept,
    ``head`` left true): lane_problems lists lanes whose runs of numbers are not in
    publish order."""
    store = await make_store(retry_schedule=SCHEDULE)
    rec = await LaneReceiver().start()
    try:
        keyed = endpoint_record(url=rec.url + "/k", event_types=["lane.*"], ordering="key")
        keyed.update(rate_limit=2000, max_in_flight=10)
        whole = endpoint_record(url=rec.url + "/e", event_types=["whole.*"], ordering="endpoint")
        for ep in (keyed, whole):
            await store.put_endpoint(ep)
        publisher = Publisher(store)
        lanes = {f"key-{i}": "default" for i in range(20)}

        async def work() -> dict[str, list[int]]:
            expected, whole_lane = await asyncio.gather(
                publish_lanes(publisher, lanes, 50),
                publish_lanes(
                    publisher, {"whole": "default"}, 60, event_type="whole.t", keyed=False
                ),
            )
            expected.update(whole_lane)
            await until(lambda: done(store))
            return expected

        expected = await run_ordered(store, redis_server.url, tmp_path, rec, work())
        assert lane_problems(rec.hits, expected, await dead_ids(store)) == []
        assert rec.overlaps == []
        want = {(lane, n) for lane, ns in expected.items() for n in ns}
        dead = await dead_ids(store)
        assert rec.succeeded() | {(h.lane, h.n) for h in rec.hits if h.delivery in dead} == want
        assert any(h.status == 500 for h in rec.hits)  # retries took part
    finally:
        await rec.stop()


async def done(store: Store) -> bool:
    counts = (await store.stats())["counts"]
    return counts["pending"] == counts["delivering"] == counts["queued"] == 0


async def test_block_holds_the_lane_until_replay_or_discard(
    make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    """Fails with record.lua's block branch removed (``if false then``: a dead head
    always lets the next one go): ``sent_after`` holds requests past the dead heads."""
    store = await make_store(retry_schedule=SCHEDULE)
    rec = await LaneReceiver().start()
    stuck = [f"key-{i}" for i in range(4)]
    for lane in stuck:
        rec.fixed[(lane, 7)] = 410
    try:
        ep = endpoint_record(url=rec.url + "/b", ordering="key", ordering_on_dead="block")
        await store.put_endpoint(ep)
        lanes = {f"key-{i}": "default" for i in range(20)}

        async def work() -> dict[str, list[int]]:
            expected = await publish_lanes(Publisher(store), lanes, 20)
            await until(lambda: settled(store))
            # nothing due or in flight: what is left waits behind the dead heads
            sent_after = [h for h in rec.hits if h.lane in stuck and h.n > 7]
            assert sent_after == []
            stats = await store.stats()
            assert stats["blocked_lanes"] == 4
            assert stats["counts"]["queued"] == 4 * 12
            heads = dict(await store.blocked_lanes(store.keys.shard(0)))
            assert set(heads) == {f"{ep['id']}:{lane}" for lane in stuck}
            first = [heads[f"{ep['id']}:{lane}"] for lane in stuck]
            assert await store.discard(first[:2]) == dict.fromkeys(first[:2], "ok")
            for lane in stuck[2:]:
                del rec.fixed[(lane, 7)]  # the receiver was fixed: a replay succeeds
            assert await store.replay(first[2:]) == dict.fromkeys(first[2:], "ok")
            await until(lambda: done(store))
            assert (await store.stats())["blocked_lanes"] == 0
            return expected

        expected = await run_ordered(store, redis_server.url, tmp_path, rec, work())
        dead = await dead_ids(store)
        assert lane_problems(rec.hits, expected, dead) == []
        assert rec.overlaps == []
        replayed = [h for h in rec.hits if h.lane in stuck[2:] and h.n == 7]
        assert [h.status for h in replayed][:1] == [410] and replayed[-1].status == 200
    finally:
        await rec.stop()


async def test_a_deleted_endpoints_blocked_lane_is_let_go(make_store: Any) -> None:
    """Deleted while its lane was blocked: the next sweep discards the dead head, and the
    rest of the lane goes on (to be recorded dead, endpoint_deleted, by the worker)."""
    from relay.ops import metrics
    from relay.ops.retention import Retention

    store = await make_store()
    sk = store.keys.shard(0)
    ep = endpoint_record(url="http://127.0.0.1:9/x", ordering="endpoint", ordering_on_dead="block")
    await store.put_endpoint(ep)
    a, b = await publish_raw(store, ep["id"], 2)
    (h,) = (await store.claim(sk, limit=9, lease_ms=60_000, token_prefix="d", worker="w")).items
    assert await store.record(sk, [outcome(h, "dead", 410)]) == [1]
    assert await Retention(store).unblock_deleted() == 0  # its endpoint is still there
    metrics.set_queue(await store.stats())
    assert metrics.BLOCKED_LANES._value.get() == 1
    assert await store.delete_endpoint(ep)
    assert await Retention(store).unblock_deleted() == 1
    assert (await store.get_delivery(b) or {})["status"] == "pending"
    assert (await store.get_delivery(a) or {})["discarded_at"]
    metrics.set_queue(await store.stats())
    assert metrics.BLOCKED_LANES._value.get() == 0


async def test_recovered_dead_rejoin_their_lane_in_order(make_store: Any) -> None:
    """``POST /v1/endpoints/{id}/recover`` (``Store.replay_dead``) on a "skip" lane whose
    three deliveries all died: they rejoin the lane in the order they died.

    Fails with replay_dead replaying each page as it walks the dead letters (newest
    first): the lane takes them back as [c, b, a]."""
    store = await make_store()
    sk = store.keys.shard(0)
    published = await publish_raw(store, "ep_lane", 3, on_dead="skip")
    for _ in published:
        (h,) = (await store.claim(sk, limit=9, lease_ms=60_000, token_prefix="r", worker="w")).items
        assert await store.record(sk, [outcome(h, "dead", 410)]) == [1]
        await asyncio.sleep(0.002)  # deaths in distinct milliseconds
    assert await store.replay_dead(endpoint_id="ep_lane") == (3, 0)
    order = []
    for _ in published:
        (h,) = (await store.claim(sk, limit=9, lease_ms=60_000, token_prefix="s", worker="w")).items
        order.append(h.id)
        assert await store.record(sk, [outcome(h, "succeeded")]) == [1]
    assert order == published


async def test_a_lane_backlog_is_not_in_due(make_store: Any) -> None:
    """300 events in one lane and 5 unordered: the due queue holds the lane's head and the
    5, so a claim sees 6 (a backlog costs a claim nothing), and a blocked lane holds up
    nothing outside it."""
    store = await make_store()
    sk = store.keys.shard(0)
    lane = await publish_raw(store, "ep_lane:big", 300)
    plain = []
    for _ in range(5):
        now = int(time.time() * 1000)
        event_id, dlv = ids.new_id("evt", 0, now), ids.new_id("dlv", 0, now)
        await store.publish(
            shard=0,
            event_id=event_id,
            event_type="t",
            app="default",
            body=signing.build_body(event_id, "t", now, b"{}"),
            created_ms=now,
            deliveries=[(dlv, "ep_lane")],
        )
        plain.append(dlv)
    assert await store.redis.zcard(sk.due) == 6
    got = (await store.claim(sk, limit=50, lease_ms=60_000, token_prefix="b", worker="w")).items
    assert sorted(c.id for c in got) == sorted([lane[0], *plain])
    head = next(c for c in got if c.id == lane[0])
    assert await store.record(sk, [outcome(head, "dead", 410)]) == [1]  # blocks the lane
    assert await store.redis.zcard(sk.due) == 0 and await store.redis.zcard(sk.queued) == 299
