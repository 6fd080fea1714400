"""Retention: lua/expire.lua, the sweeper and the memory test of thousands of deliveries.

The unit tests run on fakeredis and on a real ``redis-server``; finished states are made
through the real transitions (``claim`` then ``record``), and "time passing" is a cutoff
handed to the script, never a sleep.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fakeredis
import orjson
import pytest
import structlog

from relay.delivery.worker import Worker
from relay.domain import endpointstats, ids
from relay.domain.schema import endpoint_record
from relay.ops.retention import NONE, Retention
from relay.queue.store import Outcome, Store, connect
from relay.redisproc import RedisServer
from relay.runner import run_worker
from tests.helpers import event_ids, make_settings, publish_event

FAR = 10**15  # a cutoff after everything: "a very long time has passed"


@pytest.fixture(params=["fakeredis", "redis"])
async def st(request: pytest.FixtureRequest, redis_server: Any) -> AsyncIterator[Store]:
    """The same tests on fakeredis (same Lua) and on the session's real redis-server."""
    if request.param == "fakeredis":
        settings = make_settings()
        client = fakeredis.FakeAsyncRedis(decode_responses=True)
    else:
        settings = make_settings(redis_url=redis_server.url)
        client = connect(settings)
    store = Store(client, settings)
    await store.start()
    yield store
    await store.close()


async def add_endpoint(store: Store, url: str = "http://127.0.0.1:9/") -> str:
    ep = endpoint_record(url=url, app="default")
    await store.put_endpoint(ep)
    return str(ep["id"])


async def publish(store: Store, endpoint_ids: list[str], n: int = 0) -> tuple[str, list[str]]:
    event_id, dlv, _ = await publish_event(store, endpoint_ids, payload=b'{"n":%d}' % n)
    return event_id, dlv


async def finish(store: Store, outcomes: dict[str, str]) -> None:
    """Claim every due delivery and record ``outcomes[id]`` ("succeeded" / "dead")."""
    sk = store.keys.shard(0)
    res = await store.claim(sk, limit=1000, lease_ms=60_000, token_prefix="t", worker="w")
    done = []
    for c in res.items:
        if c.id in outcomes:
            entry = orjson.dumps({"at": int(time.time() * 1000), "worker": "w"})
            done.append(Outcome(c.id, c.token, outcomes[c.id], 0, 200, "", entry))
        else:  # not asked to finish: hand it back, still pending
            await store.release(sk, [(c.id, c.token)])
    assert await store.record(sk, done) == [1] * len(done)


async def keys_of(store: Store) -> set[str]:
    return {k async for k in store.redis.scan_iter(match=store.settings.key_prefix + ":*")}


async def indexed(store: Store, d: str, endpoint_id: str) -> dict[str, bool]:
    sk = store.keys.shard(0)
    where = {}
    for name, key in (
        ("succeeded", sk.succeeded),
        ("dead", sk.dead),
        ("due", sk.due),
        ("ep", sk.endpoint_index(endpoint_id)),
    ):
        where[name] = await store.redis.zscore(key, d) is not None
    event_id = (ids.derived(d) or ("", 0))[0]  # the events index lists the event
    where["events"] = await store.redis.zscore(sk.events, event_id) is not None
    return where


async def test_succeeded_delivery_goes_with_every_index_entry_and_its_event(st: Store) -> None:
    ep = await add_endpoint(st)
    before = await keys_of(st)
    event_id, (d,) = await publish(st, [ep])
    await finish(st, {d: "succeeded"})
    sk = st.keys.shard(0)
    assert await st.redis.exists(sk.log(d), sk.delivery(d), sk.event(event_id)) == 3

    got = await Retention(st).expire(succeeded_before=FAR)

    assert (got.deliveries, got.events) == (1, 1)
    assert await keys_of(st) == before  # hash, log, event and all five indexes: gone
    assert await st.get_delivery(d) is None and await st.get_event(event_id) is None


async def test_cutoff_is_respected(st: Store) -> None:
    ep = await add_endpoint(st)
    _, (d,) = await publish(st, [ep])
    await finish(st, {d: "succeeded"})
    finished = int((await st.get_delivery(d) or {}).get("finished_at") or 0)
    assert finished > 0

    assert (await Retention(st).expire(succeeded_before=finished - 1)).deliveries == 0
    assert (await indexed(st, d, ep))["succeeded"]
    assert (await Retention(st).expire(succeeded_before=finished)).deliveries == 1


async def test_dead_kept_until_dead_retention(st: Store) -> None:
    st.settings = make_settings(
        key_prefix=st.settings.key_prefix, retention=60.0, dead_retention=3600.0
    )
    ep = await add_endpoint(st)
    _, (ok, dead) = await publish(st, [ep, ep])
    await finish(st, {ok: "succeeded", dead: "dead"})
    now = int(time.time() * 1000)
    retention = Retention(st)

    # two minutes on: past RELAY_RETENTION, not past RELAY_DEAD_RETENTION
    got = await retention.sweep(now_ms=now + 120_000)
    assert got.deliveries == 1
    assert await st.get_delivery(ok) is None
    assert (await st.get_delivery(dead) or {}).get("status") == "dead"
    assert (await indexed(st, dead, ep))["dead"]

    # two hours on: the dead one goes too, and with it the event
    got = await retention.sweep(now_ms=now + 7_200_000)
    assert (got.deliveries, got.events) == (1, 1)
    assert await st.get_delivery(dead) is None


async def test_pending_and_delivering_are_never_expired(st: Store) -> None:
    ep = await add_endpoint(st)
    event_id, (pending, delivering) = await publish(st, [ep, ep])
    sk = st.keys.shard(0)
    # take one under a lease (delivering), leave the other pending
    res = await st.claim(sk, limit=2, lease_ms=60_000, token_prefix="t", worker="w")
    back = next(c for c in res.items if c.id == pending)
    await st.release(sk, [(back.id, back.token)])
    before = await keys_of(st)

    got = await Retention(st).expire(succeeded_before=FAR, dead_before=FAR)

    assert (got.deliveries, got.events) == (0, 0)
    assert await keys_of(st) == before
    assert (await st.get_delivery(pending) or {})["status"] == "pending"
    assert (await st.get_delivery(delivering) or {})["status"] == "delivering"
    assert await st.get_event(event_id) is not None


async def test_event_kept_for_a_delivery_never_claimed(st: Store) -> None:
    """Layout v3: a delivery never claimed has no hash, only its due entry and its place in
    the event's header; the sweep of its sibling must keep the event for it. Fails with
    expire.lua's due check removed: the event goes, and the delivery with it."""
    ep = await add_endpoint(st)
    event_id, (a, b) = await publish(st, [ep, ep])
    sk = st.keys.shard(0)
    (c,) = (await st.claim(sk, limit=1, lease_ms=60_000, token_prefix="t", worker="w")).items
    assert c.id == a
    entry = orjson.dumps({"at": int(time.time() * 1000), "worker": "w"})
    assert await st.record(sk, [Outcome(c.id, c.token, "succeeded", 0, 200, "", entry)]) == [1]
    assert not await st.redis.exists(sk.delivery(b))  # as published: no hash

    got = await Retention(st).expire(succeeded_before=FAR, dead_before=FAR)
    assert (got.deliveries, got.events) == (1, 0)
    assert await st.redis.exists(sk.event(event_id))
    assert (await st.get_delivery(b) or {}).get("status") == "pending"
    (later,) = (await st.claim(sk, limit=5, lease_ms=60_000, token_prefix="u", worker="w")).items
    assert later.id == b and later.endpoint_id == ep
    assert orjson.loads(later.body)["data"] == {"n": 0}


async def test_event_removed_only_with_its_last_delivery(st: Store) -> None:
    ep = await add_endpoint(st)
    event_id, (a, b, c) = await publish(st, [ep, ep, ep])
    await finish(st, {a: "succeeded", b: "dead"})
    sk = st.keys.shard(0)
    retention = Retention(st)

    got = await retention.expire(succeeded_before=FAR, dead_before=FAR)
    assert (got.deliveries, got.events) == (2, 0)
    assert await st.get_event(event_id) is not None  # c is still pending
    assert await st.redis.exists(sk.event(event_id))
    assert await st.redis.exists(sk.event(event_id))

    await finish(st, {c: "succeeded"})
    got = await retention.expire(succeeded_before=FAR)
    assert (got.deliveries, got.events) == (1, 1)
    assert await st.get_event(event_id) is None
    assert not await st.redis.exists(sk.event(event_id))


async def test_event_is_removed_with_its_last_delivery_only(st: Store) -> None:
    """The sweep removes an event once none of the deliveries its header lists is kept."""
    ep = await add_endpoint(st)
    event_id, (a, b) = await publish(st, [ep, ep])
    await finish(st, {a: "succeeded"})
    retention = Retention(st)

    assert (await retention.expire(succeeded_before=FAR)).events == 0
    assert await st.get_event(event_id) is not None
    await finish(st, {b: "succeeded"})
    assert (await retention.expire(succeeded_before=FAR)).events == 1
    assert await st.get_event(event_id) is None


async def test_event_whose_deliveries_go_in_one_call_is_removed_once(st: Store) -> None:
    ep = await add_endpoint(st)
    event_id, dlv = await publish(st, [ep, ep, ep])
    await finish(st, dict.fromkeys(dlv, "succeeded"))

    got = await Retention(st).expire(succeeded_before=FAR)

    assert (got.deliveries, got.events) == (3, 1)
    assert await st.get_event(event_id) is None
    assert await event_ids(st, 0) == []


async def test_replayed_delivery_is_not_expired(st: Store) -> None:
    ep = await add_endpoint(st)
    _, (d,) = await publish(st, [ep])
    await finish(st, {d: "succeeded"})
    assert await st.replay([d]) == {d: "ok"}

    assert (await Retention(st).expire(succeeded_before=FAR)).deliveries == 0
    assert (await st.get_delivery(d) or {})["status"] == "pending"


async def test_each_call_is_bounded_and_the_loop_finishes(st: Store) -> None:
    ep = await add_endpoint(st)
    made = [(await publish(st, [ep], n))[1][0] for n in range(7)]
    await finish(st, dict.fromkeys(made, "succeeded"))
    retention = Retention(st, batch=3)
    sk = st.keys.shard(0)

    got, more = await retention.expire_shard(sk, succeeded_before=FAR, dead_before=NONE)
    assert (got.deliveries, more) == (3, True)
    assert await st.redis.zcard(sk.succeeded) == 4
    calls: list[int] = []
    total = await retention.expire(
        succeeded_before=FAR, progress=lambda e: calls.append(e.deliveries)
    )
    assert total.deliveries == 4 and calls == [3, 1]
    assert await st.redis.zcard(sk.events) == 0


async def test_event_without_deliveries_is_not_indexed_and_expires_by_itself(st: Store) -> None:
    event_id, dlv = await publish(st, [])
    sk = st.keys.shard(0)
    assert dlv == []
    assert await st.get_event(event_id) is not None
    assert await st.redis.exists(sk.event(event_id)) and await event_ids(st, 0) == []
    ttl = await st.redis.pttl(sk.event(event_id))
    assert 0 < ttl <= st.settings.retention * 1000


# ---------------------------------------------------------------------- real Redis only


@pytest.mark.realredis
async def test_concurrent_sweepers_remove_each_delivery_once(make_store: Any) -> None:
    """Many sweepers at once: every delivery and event is removed, and counted, exactly once.

    The protection is that expire.lua takes each id out of its set (ZREM) in the same
    atomic call that removes it. Fails with it removed (the ZREM line deleted from a copy
    of expire.lua loaded through ``Scripts(client, lua_dir=...)``): the sweepers
    take the same ids again and again and never finish, so the deadline trips.
    """
    stores = [await make_store() for _ in range(4)]
    st = stores[0]
    ep = await add_endpoint(st)
    made: list[str] = []
    events = []
    for n in range(300):
        event_id, dlv = await publish(st, [ep, ep], n)
        made += dlv
        events.append(event_id)
    await finish(st, dict.fromkeys(made, "succeeded"))
    before_count = len(await keys_of(st))

    sweeps = (Retention(s, batch=37).expire(succeeded_before=FAR) for s in stores)
    results = await asyncio.wait_for(asyncio.gather(*sweeps), 60)

    assert sum(r.deliveries for r in results) == len(made)
    assert sum(r.events for r in results) == len(events)
    sk = st.keys.shard(0)
    for key in (sk.succeeded, sk.events, sk.endpoint_index(ep)):
        assert await st.redis.zcard(key) == 0
    assert len(await keys_of(st)) == before_count - 2 * len(made) - len(events) - 3


@pytest.mark.realredis
async def test_late_fenced_outcome_after_expiry_leaves_nothing_behind(make_store: Any) -> None:
    """A worker that stalled past its lease reports after the delivery already expired.

    record.lua logs a fenced outcome only while the delivery exists; without that check
    (the EXISTS test removed from a copy of record.lua: the test fails) the late report
    re-creates a log list and a delivery hash holding only ``log_n``, which nothing would
    ever expire.
    """
    st = await make_store()
    ep = await add_endpoint(st)
    _, (d,) = await publish(st, [ep])
    sk = st.keys.shard(0)
    stale = (await st.claim(sk, limit=1, lease_ms=1, token_prefix="old", worker="a")).items[0]
    await asyncio.sleep(0.01)  # let the 1 ms lease run out (no timing is asserted)
    await st.reclaim(sk)
    await finish(st, {d: "succeeded"})
    before = await keys_of(st)
    await Retention(st).expire(succeeded_before=FAR)
    gone = await keys_of(st)
    assert sk.delivery(d) not in gone and sk.log(d) not in gone

    entry = orjson.dumps({"at": 1, "worker": "a"})
    res = await st.record(sk, [Outcome(d, stale.token, "succeeded", 0, 200, "", entry)])

    assert res == [0]
    assert await keys_of(st) == gone
    assert before - gone >= {sk.delivery(d), sk.log(d)}


# ------------------------------------------------------------ thousands of deliveries

PUBLISH_BATCH = 200


async def memory(store: Store) -> int:
    """``used_memory`` with one client connected and Redis's own slow log emptied.

    The connection pool's other connections are closed first (each holds buffers that
    count in used_memory); SLOWLOG RESET drops Redis's record of slow commands (up to 128
    entries with their arguments) and CONFIG RESETSTAT its per-command statistics (Redis
    7 keeps a latency histogram of some KB for every command name ever called): none of
    that is relay's data. Then it is read until it holds still for half a second (at most
    5 s): Redis frees some memory in its cron (100 ms a step), such as its keyspace
    tables as they shrink, and one reading in three here came right after the last sweep
    at +72 KB against +6.6 KB (the cause not pinned down). A leak holds still too, so it
    still fails the test.
    """
    await store.redis.connection_pool.disconnect()
    await store.redis.slowlog_reset()
    await store.redis.config_resetstat()
    used = int((await store.redis.info("memory"))["used_memory"])
    for _ in range(10):
        await asyncio.sleep(0.5)
        again = int((await store.redis.info("memory"))["used_memory"])
        if again == used:
            break
        used = again
    return used


async def index_sizes(store: Store, endpoint_id: str) -> dict[str, int]:
    sk = store.keys.shard(0)
    names = {
        "due": sk.due,
        "processing": sk.processing,
        "succeeded": sk.succeeded,
        "dead": sk.dead,
        "events": sk.events,
        "ep": sk.endpoint_index(endpoint_id),
        "held": sk.held(endpoint_id),
    }
    return {n: int(await store.redis.zcard(k)) for n, k in names.items()}


@pytest.mark.realredis
@pytest.mark.parametrize("total", [5_000, pytest.param(50_000, marks=pytest.mark.long)])
async def test_deliveries_leave_memory_and_keys_where_they_started(
    receiver: Any, tmp_path: Path, total: int
) -> None:
    """``total`` deliveries with a 1 s retention: Redis memory and every key count come
    back (50,000 in ``make test-long``, 5,000 in ``make test``).

    A private ``redis-server`` (no AOF, nothing else on it) so ``used_memory`` is ours.
    Published in batches of Store.publish calls while one in-process Worker (concurrency
    64, run as ``relay worker`` runs it) delivers to the local receiver and its sweeper
    (every 0.2 s) expires what succeeded. With the sweeper off (``Retention.run``
    returning at once) the test fails: 100,000 keys and every index stay.
    """
    server = RedisServer(data_dir=tmp_path, appendonly=False)
    server.start()
    settings = make_settings(
        redis_url=server.url,
        worker_concurrency=64,
        retention=1.0,
        dead_retention=1.0,
        sweep_interval=0.2,
    )
    store = Store(connect(settings), settings)
    await store.start()
    logging_config = structlog.get_config()
    # a "delivery.attempt" line per delivery is not what this test is about
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    try:
        ep = await add_endpoint(store, receiver.url + "/hook")
        start_keys = await keys_of(store)
        start_memory = await memory(store)
        first_hour = endpointstats.hour_of(int(time.time() * 1000))
        assert set((await index_sizes(store, ep)).values()) == {0}

        stop = asyncio.Event()
        worker = Worker(store, settings)
        task = asyncio.create_task(run_worker(store, stop, worker))
        peak_keys = 0
        for start in range(0, total, PUBLISH_BATCH):
            await asyncio.gather(
                *(publish(store, [ep], n) for n in range(start, start + PUBLISH_BATCH))
            )
            if start % 10_000 == 0:
                peak_keys = max(peak_keys, int(await store.redis.dbsize()))
        await receiver.wait_for(total, within=240.0)
        for _ in range(300):  # the sweeper catches up (at most a minute)
            if not (await index_sizes(store, ep))["events"]:
                break
            await asyncio.sleep(0.2)
        stop.set()
        await task

        end_keys = await keys_of(store)
        end_memory = await memory(store)
        peak_memory = int((await store.redis.info("memory"))["used_memory_peak"])
        sizes = await index_sizes(store, ep)
        print(
            f"\n[retention] {total} deliveries: used_memory start {start_memory} "
            f"peak {peak_memory} end {end_memory} (+{end_memory - start_memory} B); "
            f"keys start {len(start_keys)} peak-sample {peak_keys} end {len(end_keys)}; "
            f"indexes {sizes}; worker outcomes {worker.stats.outcomes}"
        )
        assert worker.stats.outcomes == {"succeeded": total}
        assert len(receiver.requests) == total
        assert set(sizes.values()) == {0}
        # Left behind: only the endpoint's breaker hash, the shard's counters and the
        # endpoint's attempt counters of the hours the run spanned (each with its TTL).
        ek = store.keys.endpoint_state(ep)
        hours = range(first_hour, endpointstats.hour_of(int(time.time() * 1000)) + 1)
        counters = {store.keys.endpoint_stats(ep, str(h)) for h in hours}
        assert end_keys - start_keys <= {
            ek.breaker,
            ek.inflight,
            ek.rate,
            store.keys.shard(0).stats,
            *counters,
        }
        for key in counters & end_keys:
            assert 0 < await store.redis.pttl(key) <= endpointstats.RETAIN_MS
        assert start_keys <= end_keys
        # Memory back within 64 KiB of the start (about 1 byte per delivery handled;
        # what is left is the breaker hash), while the data took megabytes on the way.
        assert end_memory - start_memory < 64 * 1024
        assert peak_memory - start_memory > 1 << 20 and peak_keys > 100
    finally:
        structlog.configure(**logging_config)
        await store.close()
        server.stop()
