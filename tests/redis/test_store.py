"""Contract tests for relay.queue.store and its Lua scripts, run on fakeredis AND real Redis.

The ``st`` fixture is parametrized over both backends, so the same scripts in ``lua/``
are held to the same tests on each; the NOSCRIPT test needs a real server.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from typing import Any

import orjson
import pytest

from relay.domain import ids, signing
from relay.queue.store import Outcome, Store
from tests.helpers import publish_event
from tests.helpers.store import add_endpoint, claim, h, log, outcome, publish, zmembers

pytestmark = pytest.mark.realredis


async def keyset(store: Store) -> set[str]:
    return {k async for k in store.redis.scan_iter(match=store.settings.key_prefix + "*")}


# ---------------------------------------------------------------------- publish


async def test_publish_writes_event_deliveries_and_indexes(st: Store) -> None:
    a, b = await add_endpoint(st), await add_endpoint(st)
    before = await keyset(st)
    event_id, dlv, taken = await publish(st, [a["id"], b["id"]])
    assert taken is None
    sk = st.keys.shard(0)
    written = await keyset(st) - before
    # layout v3: no delivery hash yet; the event's header and the due queue say it all
    assert written == {
        sk.event(event_id),
        sk.due,
        sk.events,
        sk.endpoint_index(a["id"]),
        sk.endpoint_index(b["id"]),
    }
    # one string, a header line and the payload (relay/domain/eventrecord.py): the body is
    # made again from the event's id, type and the creation time its id carries
    head, _, payload = (await st.redis.get(sk.event(event_id))).partition("\n")
    evt = orjson.loads(head)
    assert evt["type"] == "order.paid" and evt["app"] == "default"
    assert evt["max_attempts"] == st.settings.max_attempts and "created_at" not in evt
    assert orjson.loads(payload) == {"n": 1}
    created = ids.created_ms(event_id)
    assert evt["d"] == [a["id"], b["id"]]  # the ids derive from the event's: not listed
    assert dlv == [ids.delivery_id(event_id, 0), ids.delivery_id(event_id, 1)]
    assert set(await zmembers(st, sk.due)) == set(dlv)
    assert await zmembers(st, sk.events) == {event_id: created}  # one entry per event
    for d, ep in zip(dlv, (a, b), strict=True):
        assert await h(st, d) == {}
        rec = await st.get_delivery(d)
        assert rec is not None
        assert rec["status"] == "pending" and rec["attempts"] == 0
        assert rec["max_attempts"] == st.settings.max_attempts
        assert rec["event_id"] == event_id and rec["endpoint_id"] == ep["id"]
        assert rec["created_at"] == created
        assert rec["next_attempt_at"] == await st.redis.zscore(sk.due, d)
        assert rec["app"] == "default" and rec["type"] == "order.paid"
        assert list(await zmembers(st, sk.endpoint_index(ep["id"]))) == [d]


async def test_app_of_a_delivery_with_or_without_its_hash(st: Store) -> None:
    """The access check's read: a delivery as published (no hash yet) has its event's app,
    as one with a hash has its own; an id that names nothing has none. Fails with the
    read of a delivery without a hash left out of app_of."""
    ep = await add_endpoint(st, app="shop")
    event_id, (d,), _ = await publish_event(st, [ep["id"]], app="shop")
    assert not await st.redis.exists(st.keys.shard(0).delivery(d))
    assert await st.app_of("delivery", d) == "shop"
    assert await st.app_of("event", event_id) == "shop"
    (c,) = (await claim(st)).items
    assert c.id == d and await st.app_of("delivery", d) == "shop"
    assert await st.app_of("delivery", ids.delivery_id(event_id, 1)) is None
    assert await st.app_of("delivery", "dlv_nothing") is None


async def test_publish_with_ids_of_another_layout_writes_their_hashes(st: Store) -> None:
    """Deliveries whose ids do not derive from the event's (moved from layout v2 by relay
    migrate) are listed with their ids in the header and keep a hash that names the event."""
    a = await add_endpoint(st)
    now = int(time.time() * 1000)
    event_id = ids.new_event_id(0, now)
    dlv = ids.new_id("dlv", 0, now)
    body = signing.build_body(event_id, "order.paid", now, b'{"n":1}')
    await st.publish(
        shard=0,
        event_id=event_id,
        event_type="order.paid",
        app="default",
        body=body,
        created_ms=now,
        deliveries=[(dlv, a["id"])],
    )
    sk = st.keys.shard(0)
    head = (await st.redis.get(sk.event(event_id))).partition("\n")[0]
    assert orjson.loads(head)["d"] == [[dlv, a["id"]]]
    raw = await h(st, dlv)
    assert raw["event_id"] == event_id and raw["endpoint_id"] == a["id"]
    assert raw["status"] == "pending"
    (c,) = (await claim(st)).items
    assert (c.id, c.event_id, c.endpoint_id, c.max_attempts) == (
        dlv,
        event_id,
        a["id"],
        st.settings.max_attempts,
    )
    assert orjson.loads(c.body)["id"] == event_id
    rec = await st.get_delivery(dlv)
    assert rec is not None and rec["status"] == "delivering" and rec["event_id"] == event_id


async def test_publish_idempotency_key_taken_writes_nothing(st: Store) -> None:
    ep = await add_endpoint(st)
    _, first, taken = await publish(st, [ep["id"]], idem=("k1", b"first-answer"))
    assert taken is None
    before = await keyset(st)
    dbsize = await st.redis.dbsize()
    event_id, dlv, taken = await publish(st, [ep["id"]], idem=("k1", b"other"))
    assert taken == "first-answer"
    assert await keyset(st) == before
    assert await st.redis.dbsize() == dbsize
    sk = st.keys.shard(0)
    assert not await st.redis.exists(sk.event(event_id), sk.delivery(dlv[0]))
    assert list(await zmembers(st, sk.due)) == first
    # another key is free
    assert (await publish(st, [ep["id"]], idem=("k2", b"x")))[2] is None


# ---------------------------------------------------------------------- claim


async def test_claim_counts_attempt_leases_and_mints_tokens(st: Store) -> None:
    ep = await add_endpoint(st)
    _, _dlv, _ = await publish(st, [ep["id"]] * 3)
    sk = st.keys.shard(0)
    res = await claim(st, limit=2, lease_ms=60_000, tag="tokA")
    assert len(res.items) == 2
    assert res.next_due_ms is not None and res.next_due_ms <= res.now_ms
    leases = await zmembers(st, sk.processing)
    assert set(leases) == {c.id for c in res.items}
    for c in res.items:
        assert c.attempts == 1 and c.max_attempts == st.settings.max_attempts
        assert c.token.startswith("tokA:") and c.endpoint_id == ep["id"]
        assert orjson.loads(c.body)["data"] == {"n": 1}
        assert leases[c.id] == res.now_ms + 60_000
        rec = await h(st, c.id)
        assert rec["status"] == "delivering" and rec["claim"] == c.token
        assert rec["attempts"] == "1" and rec["worker"] == "w1"
    assert len({c.token for c in res.items}) == 2
    assert len(await zmembers(st, sk.due)) == 1
    rest = await claim(st, limit=10, tag="tokB")
    assert len(rest.items) == 1 and rest.items[0].id not in leases
    empty = await claim(st, tag="tokC")
    assert empty.items == [] and empty.next_due_ms is None
    assert empty.next_lease_ms == res.now_ms + 60_000


async def test_claim_skips_not_yet_due(st: Store) -> None:
    ep = await add_endpoint(st)
    _, dlv, _ = await publish(st, [ep["id"]])
    c = (await claim(st)).items[0]
    assert await st.record(st.keys.shard(0), [outcome(c, "retry", 60_000, 500)]) == [1]
    res = await claim(st)
    assert res.items == []
    assert res.next_due_ms is not None and res.next_due_ms >= res.now_ms + 59_000
    assert (await h(st, dlv[0]))["attempts"] == "1"


# ---------------------------------------------------------------------- record


async def test_record_succeeded(st: Store) -> None:
    ep = await add_endpoint(st)
    _, _dlv, _ = await publish(st, [ep["id"]])
    sk = st.keys.shard(0)
    c = (await claim(st)).items[0]
    assert await st.record(sk, [outcome(c, "succeeded")]) == [1]
    rec = await h(st, c.id)
    assert rec["status"] == "succeeded" and rec["last_status_code"] == "200"
    assert "lease_until" not in rec and "next_attempt_at" not in rec
    # the claim stays, its outcome written (the status says so): no longer a lease
    assert rec["claim"] == c.token and await st.extend(sk, [(c.id, c.token)], 60_000) == [0]
    assert "claim" not in (await st.get_delivery(c.id) or {})
    # layout v3: when it finished is its score in the succeeded index (and updated_at)
    assert "finished_at" not in rec
    assert await zmembers(st, sk.succeeded) == {c.id: float(rec["updated_at"])}
    shown = await st.get_delivery(c.id)
    assert shown is not None and shown["finished_at"] == int(rec["updated_at"])
    assert shown["next_attempt_at"] is None
    assert not await zmembers(st, sk.processing) and not await zmembers(st, sk.due)
    assert await log(st, c.id) == [
        {"n": 1, "attempt": 1, "at": 1, "status_code": 200, "worker": "w1"}
    ]


async def test_record_retry_then_dead(st: Store) -> None:
    ep = await add_endpoint(st)
    await publish(st, [ep["id"]])
    sk = st.keys.shard(0)
    c = (await claim(st)).items[0]
    assert await st.record(sk, [outcome(c, "retry", 0, 500)]) == [1]
    rec = await h(st, c.id)
    assert rec["status"] == "pending" and rec["attempts"] == "1"
    assert rec["last_status_code"] == "500" and rec["last_error"] == "x"
    due = await zmembers(st, sk.due)
    # layout v3: the next attempt is the due score, not a field of the hash
    assert "next_attempt_at" not in rec
    shown = await st.get_delivery(c.id)
    assert shown is not None and due == {c.id: float(shown["next_attempt_at"])}
    assert not await zmembers(st, sk.processing)
    c2 = (await claim(st)).items[0]
    assert c2.id == c.id and c2.attempts == 2 and c2.token != c.token
    assert await st.record(sk, [outcome(c2, "dead", 0, 500)]) == [1]
    rec = await h(st, c.id)
    assert rec["status"] == "dead" and "next_attempt_at" not in rec
    assert await zmembers(st, sk.dead) == {c.id: float(rec["finished_at"])}
    assert not await zmembers(st, sk.due) and not await zmembers(st, sk.processing)
    assert [e["n"] for e in await log(st, c.id)] == [1, 2]


async def test_record_defer_refunds_attempt_and_logs_nothing(st: Store) -> None:
    ep = await add_endpoint(st)
    await publish(st, [ep["id"]])
    sk = st.keys.shard(0)
    c = (await claim(st)).items[0]
    res = await st.record(sk, [Outcome(c.id, c.token, "defer", 60_000, None, "", b"{}")])
    assert res == [1]
    rec = await h(st, c.id)
    assert rec["status"] == "pending" and rec["attempts"] == "0"
    assert await st.extend(sk, [(c.id, c.token)], 60_000) == [0]  # no longer its lease
    assert "log_n" not in rec and await log(st, c.id) == []
    due = await zmembers(st, sk.due)
    shown = await st.get_delivery(c.id)
    assert shown is not None and shown["log_n"] == 0
    assert due[c.id] == float(shown["next_attempt_at"]) and due[c.id] > time.time() * 1000 + 50_000
    assert not await zmembers(st, sk.processing)


async def test_record_with_wrong_token_is_fenced(st: Store) -> None:
    """A superseded claim changes nothing but the log (entry marked fenced, next n)."""
    ep = await add_endpoint(st)
    await publish(st, [ep["id"]])
    sk = st.keys.shard(0)
    c = (await claim(st)).items[0]
    before = await h(st, c.id)
    lease = await zmembers(st, sk.processing)
    assert await st.record(sk, [outcome(c, "succeeded", token="someone-else:1")]) == [0]
    after = await h(st, c.id)
    assert after.pop("log_n") == "1" and "log_n" not in before
    assert after == before
    assert await zmembers(st, sk.processing) == lease
    assert not await zmembers(st, sk.succeeded)
    assert await log(st, c.id) == [
        {"n": 1, "fenced": True, "attempt": 1, "at": 1, "status_code": 200, "worker": "w1"}
    ]
    # a defer with a stale token is fenced too, and the holder still records normally
    assert await st.record(sk, [Outcome(c.id, "nope", "defer", 10, None, "", b"{}")]) == [0]
    assert (await h(st, c.id))["attempts"] == "1"
    assert await st.record(sk, [outcome(c, "succeeded")]) == [1]
    assert [(e["n"], e.get("fenced", False)) for e in await log(st, c.id)] == [
        (1, True),
        (2, False),
    ]


async def test_superseded_worker_is_fenced_after_reclaim(st: Store) -> None:
    ep = await add_endpoint(st)
    await publish(st, [ep["id"]])
    sk = st.keys.shard(0)
    old = (await claim(st, lease_ms=1, tag="old")).items[0]
    await asyncio.sleep(0.02)  # let the 1 ms lease run out
    assert (await st.reclaim(sk))[:2] == (1, 0)
    new = (await claim(st, tag="new")).items[0]
    assert new.id == old.id and new.attempts == 2
    assert await st.record(sk, [outcome(old, "dead", code=410)]) == [0]
    assert (await h(st, old.id))["status"] == "delivering"
    assert await st.record(sk, [outcome(new, "succeeded")]) == [1]
    assert (await h(st, old.id))["status"] == "succeeded"
    entries = await log(st, old.id)
    assert [(e["n"], e.get("fenced", False), e.get("status_code")) for e in entries] == [
        (1, False, None),  # the reclaim's lease_expired entry
        (2, True, 410),  # the superseded worker's request, logged but fenced
        (3, False, 200),
    ]
    assert entries[0]["error"] == "lease_expired"


async def test_record_for_missing_delivery_writes_nothing(st: Store) -> None:
    ep = await add_endpoint(st)
    await publish(st, [ep["id"]])
    c = (await claim(st)).items[0]
    ghost = dataclasses.replace(outcome(c, "succeeded", token="t"), id=ids.new_id("dlv"))
    before = await keyset(st)
    assert await st.record(st.keys.shard(0), [ghost]) == [0]
    assert await keyset(st) == before


# ---------------------------------------------------------------------- reclaim


async def test_reclaim_returns_expired_to_due_then_dead_when_spent(st: Store) -> None:
    ep = await add_endpoint(st)
    _, (d,), _ = await publish(st, [ep["id"]])
    sk = st.keys.shard(0)
    # a live lease is left alone
    await claim(st, lease_ms=60_000)
    assert await st.reclaim(sk) == (0, 0, [])
    await st.release(sk, [(d, (await h(st, d))["claim"])])
    max_attempts = st.settings.max_attempts
    for attempt in range(1, max_attempts + 1):
        c = (await claim(st, lease_ms=1, tag=f"t{attempt}")).items[0]
        assert c.attempts == attempt
        await asyncio.sleep(0.02)  # let the 1 ms lease run out
        back, dead, got = await st.reclaim(sk)
        assert got == [d]
        rec = await h(st, d)
        assert "claim" not in rec and "lease_until" not in rec
        if attempt < max_attempts:
            assert (back, dead) == (1, 0) and rec["status"] == "pending"
            assert d in await zmembers(st, sk.due)
        else:
            assert (back, dead) == (0, 1) and rec["status"] == "dead"
            assert list(await zmembers(st, sk.dead)) == [d]
            assert not await zmembers(st, sk.due)
        assert not await zmembers(st, sk.processing)
    entries = await log(st, d)
    # the first entry is the hand-back of the setup claim; then one per expired lease
    assert [e["n"] for e in entries] == list(range(1, max_attempts + 2))
    assert entries[0]["outcome"] == "handed_back"
    assert {e["error"] for e in entries[1:]} == {"lease_expired"}
    assert await st.redis.hget(sk.stats, "reclaimed") == str(max_attempts)
    assert (await st.stats())["reclaimed_total"] == max_attempts


# ---------------------------------------------------------------------- replay


async def test_replay_only_dead_or_succeeded_and_once(st: Store) -> None:
    ep = await add_endpoint(st)
    _, dlv, _ = await publish(st, [ep["id"]] * 3)
    sk = st.keys.shard(0)
    cs = {c.id: c for c in (await claim(st, limit=2)).items}
    d1, d2 = cs
    (d3,) = set(dlv) - set(cs)
    await st.record(sk, [outcome(cs[d1], "dead", code=410), outcome(cs[d2], "succeeded")])
    missing = ids.new_id("dlv")
    result = await st.replay([d1, d2, d3, missing, "garbage"])
    assert result == {d1: "ok", d2: "ok", d3: "pending", missing: "", "garbage": ""}
    for d in (d1, d2):
        rec = await h(st, d)
        assert rec["status"] == "pending" and rec["attempts"] == "0"
        assert rec["replays"] == "1" and "finished_at" not in rec
    assert set(await zmembers(st, sk.due)) == {d1, d2, d3}
    assert not await zmembers(st, sk.dead) and not await zmembers(st, sk.succeeded)
    assert await st.replay([d1]) == {d1: "pending"}  # a second operator is refused
    again = (await claim(st, limit=5)).items
    assert {c.id: c.attempts for c in again}[d1] == 1


# ---------------------------------------------------------------------- extend, release


async def test_extend_only_own_claims(st: Store) -> None:
    ep = await add_endpoint(st)
    await publish(st, [ep["id"]] * 2)
    sk = st.keys.shard(0)
    a, b = (await claim(st, limit=2, lease_ms=1000)).items
    before = await zmembers(st, sk.processing)
    assert await st.extend(sk, [(a.id, a.token), (b.id, "stale")], 600_000) == [1, 0]
    after = await zmembers(st, sk.processing)
    assert after[a.id] >= before[a.id] + 590_000
    assert after[b.id] == before[b.id]
    # the lease's expiry is its processing score, and only there; a read shows it
    assert "lease_until" not in await h(st, a.id)
    assert (await st.get_delivery(a.id) or {})["lease_until"] == int(after[a.id])
    # a finished delivery is not put back into processing by a late heartbeat
    await st.record(sk, [outcome(a, "succeeded")])
    assert await st.extend(sk, [(a.id, a.token)], 600_000) == [0]
    assert a.id not in await zmembers(st, sk.processing)


async def test_release_refunds_attempt(st: Store) -> None:
    ep = await add_endpoint(st)
    await publish(st, [ep["id"]])
    sk = st.keys.shard(0)
    c = (await claim(st)).items[0]
    assert await st.release(sk, [(c.id, "stale")]) == [0]
    assert (await h(st, c.id))["status"] == "delivering"
    assert await st.release(sk, [(c.id, c.token)]) == [1]
    rec = await h(st, c.id)
    assert rec["status"] == "pending" and rec["attempts"] == "0"
    assert await st.extend(sk, [(c.id, c.token)], 60_000) == [0]  # no longer its lease
    assert c.id in await zmembers(st, sk.due) and not await zmembers(st, sk.processing)
    # the interrupted send may have reached the receiver: it is in the attempt log
    logged = (await st.get_delivery(c.id))["attempt_log"]
    assert [(e["n"], e["attempt"], e["outcome"], e["error"]) for e in logged] == [
        (1, 1, "handed_back", "shutdown")
    ]
    assert await st.release(sk, [(c.id, c.token)]) == [0]
    assert len((await st.get_delivery(c.id))["attempt_log"]) == 1
    assert (await claim(st)).items[0].attempts == 1


# ---------------------------------------------------------------------- list, stats


async def test_list_deliveries_cursor_walk_newest_first(st: Store) -> None:
    a, b = await add_endpoint(st), await add_endpoint(st)
    base = int(time.time() * 1000) - 100_000
    made: list[tuple[int, str]] = []
    for i in range(23):
        # several events share a millisecond, so ties are broken by id in the cursor
        created = base + (i // 3)
        _, dlv, _ = await publish(st, [a["id"], b["id"]], created_ms=created)
        made += [(created, d) for d in dlv]
    expected = [d for _, d in sorted(made, reverse=True)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        rows, cursor = await st.list_deliveries(limit=7, cursor=cursor)
        pages += 1
        seen += [r["id"] for r in rows]
        if cursor is None:
            break
        assert pages < 20
    assert pages >= 3
    assert seen == expected  # every delivery exactly once, newest first

    by_ep: list[str] = []
    cursor = None
    while True:
        rows, cursor = await st.list_deliveries(endpoint_id=a["id"], limit=5, cursor=cursor)
        assert {r["endpoint_id"] for r in rows} <= {a["id"]}
        by_ep += [r["id"] for r in rows]
        if cursor is None:
            break
    assert by_ep == [d for d in expected if d in {x for _, x in made[0::2]}]

    by_status: list[str] = []
    cursor = None
    while True:
        rows, cursor = await st.list_deliveries(status="pending", limit=4, cursor=cursor)
        by_status += [r["id"] for r in rows]
        if cursor is None:
            break
    assert sorted(by_status) == sorted(expected) and len(by_status) == len(expected)


async def test_list_deliveries_filters(st: Store) -> None:
    a, b = await add_endpoint(st), await add_endpoint(st)
    sk = st.keys.shard(0)
    ev1, (d1a, d1b), _ = await publish(st, [a["id"], b["id"]])
    ev2, (d2a,), _ = await publish(st, [a["id"]])
    cs = {c.id: c for c in (await claim(st, limit=1)).items}
    await st.record(sk, [outcome(c, "succeeded") for c in cs.values()])
    done = set(cs)

    async def ids_of(**kw: Any) -> set[str]:
        rows, cursor = await st.list_deliveries(**kw)
        assert cursor is None
        return {r["id"] for r in rows}

    assert await ids_of(status="succeeded") == done
    assert await ids_of(status="pending") == {d1a, d1b, d2a} - done
    assert await ids_of(status="dead") == set()
    assert await ids_of(endpoint_id=a["id"]) == {d1a, d2a}
    assert await ids_of(endpoint_id=b["id"], status="pending") == {d1b} - done
    assert await ids_of(event_id=ev1) == {d1a, d1b}
    assert await ids_of(event_id=ev2, endpoint_id=b["id"]) == set()
    assert await ids_of(event_id=ids.new_id("evt")) == set()


async def test_list_deliveries_by_event_paginates(st: Store) -> None:
    eps = [await add_endpoint(st) for _ in range(7)]
    ev, dlv, _ = await publish(st, [e["id"] for e in eps])
    seen: list[str] = []
    cursor = None
    while True:
        rows, cursor = await st.list_deliveries(event_id=ev, limit=3, cursor=cursor)
        seen += [r["id"] for r in rows]
        if cursor is None:
            break
    assert sorted(seen) == sorted(dlv) and len(seen) == len(dlv)


@pytest.mark.parametrize(
    "cursor",
    ["!!!", "abc", "e30", base64.urlsafe_b64encode(b'"x"').decode(), "W10", "W251bGwsbnVsbF0"],
)
async def test_list_deliveries_garbage_cursor(st: Store, cursor: str) -> None:
    with pytest.raises(ValueError):
        await st.list_deliveries(cursor=cursor)


async def test_stats_counts(st: Store) -> None:
    ep = await add_endpoint(st)
    await publish(st, [ep["id"]] * 4)
    sk = st.keys.shard(0)
    a, b, c = (await claim(st, limit=3)).items
    await st.record(
        sk,
        [outcome(a, "succeeded"), outcome(b, "dead", code=410), outcome(c, "retry", 600_000, 500)],
    )
    await claim(st, limit=1)  # the fourth is now delivering
    stats = await st.stats()
    assert stats["counts"] == {
        "scheduled": 0,
        "pending": 1,
        "queued": 0,
        "held": 0,
        "delivering": 1,
        "succeeded": 1,
        "dead": 1,
    }
    assert stats["queue"]["due"] == 0 and stats["queue"]["scheduled"] == 1
    assert stats["queue"]["processing"] == 1
    assert stats["queue"]["oldest_due_age_seconds"] == 0.0
    assert stats["reclaimed_total"] == 0 and stats["shards"] == 1
    await publish(st, [ep["id"]])
    stats = await st.stats()
    assert stats["queue"]["due"] == 1 and stats["queue"]["oldest_due_age_seconds"] >= 0


# ---------------------------------------------------------------------- real Redis only


async def test_noscript_after_script_flush_reloads(make_store: Any) -> None:
    store = await make_store()
    ep = await add_endpoint(store)
    await store.redis.script_flush()
    _, (d,), _ = await publish(store, [ep["id"]])
    await store.redis.script_flush()
    c = (await claim(store)).items[0]
    await store.redis.script_flush()
    assert await store.record(store.keys.shard(0), [outcome(c, "succeeded")]) == [1]
    assert (await h(store, d))["status"] == "succeeded"
    assert all(await store.redis.script_exists(store.scripts.record.sha))


async def test_sharded_list_walk(make_store: Any) -> None:
    store = await make_store(shards=3)
    ep = await add_endpoint(store)
    base = int(time.time() * 1000) - 50_000
    made = []
    for i in range(20):
        _, dlv, _ = await publish(store, [ep["id"]], created_ms=base + i // 2, shard=i % 3)
        made += [(base + i // 2, dlv[0])]
    seen: list[str] = []
    cursor = None
    while True:
        rows, cursor = await store.list_deliveries(limit=6, cursor=cursor)
        seen += [r["id"] for r in rows]
        if cursor is None:
            break
    assert seen == [d for _, d in sorted(made, reverse=True)]


async def test_list_deliveries_by_event_type_walks_a_sparse_type(st: Store) -> None:
    """Exact and prefix type filters; a rare type among many is found page by page.

    300 other deliveries stand between the few matches, more than one call's scan budget
    (200 entries for limit 2), so the walk has to carry on through returned cursors.
    """
    ep = await add_endpoint(st)
    want: list[str] = []
    for i in range(306):
        kind = "customer.created" if i % 51 == 0 else "order.paid"
        _, (d,), _ = await publish(st, [ep["id"]], event_type=kind, created_ms=1_000 + i)
        if kind == "customer.created":
            want.append(d)
    seen: list[str] = []
    cursor = None
    for _ in range(100):
        rows, cursor = await st.list_deliveries(event_type="customer.*", limit=2, cursor=cursor)
        assert all(r["type"] == "customer.created" for r in rows)
        seen += [r["id"] for r in rows]
        if cursor is None:
            break
    assert seen == list(reversed(want))  # every match once, newest first
    exact, _ = await st.list_deliveries(event_type="order.paid", limit=500)
    assert len(exact) == 300
    assert (await st.list_deliveries(event_type="order", limit=5))[0] == []


async def test_replay_dead_by_endpoint_and_since(st: Store) -> None:
    """Dead letters of one endpoint, died at or after ``since``; others untouched."""
    a, b = await add_endpoint(st), await add_endpoint(st)
    sk = st.keys.shard(0)
    died: dict[str, int] = {}
    for i, ep in enumerate([a, b, a, a]):
        _, (d,), _ = await publish(st, [ep["id"]])
        c = (await claim(st)).items[0]
        assert await st.record(sk, [outcome(c, "dead", code=500)]) == [1]
        # time of death, set apart so `since` falls between them
        died[d] = 1_000 + 1_000 * i
        await st.redis.hset(sk.delivery(d), "finished_at", died[d])
        await st.redis.zadd(sk.dead, {d: died[d]})
    a_ids = [d for d, t in died.items() if t in (1_000, 3_000, 4_000)]
    # the CLI's progress totals: counted over every shard, `since` inclusive
    assert (await st.count_dead(), await st.count_dead(3_000), await st.count_dead(5_000)) == (
        4,
        2,
        0,
    )
    assert await st.count_succeeded(10**15) == 0
    pages: list[int] = []
    replayed, refused = await st.replay_dead(endpoint_id=a["id"], since=3_000, on_page=pages.append)
    assert (replayed, refused, pages) == (2, 0, [2])
    statuses = {d: (await h(st, d))["status"] for d in died}
    assert [statuses[d] for d in a_ids] == ["dead", "pending", "pending"]
    assert statuses[next(d for d in died if d not in a_ids)] == "dead"  # b's stays
    # unfiltered, with since: stops at the first page older than since
    assert await st.replay_dead(since=2_000) == (1, 0)
    assert await st.replay_dead() == (1, 0)
    assert await st.redis.zcard(sk.dead) == 0
