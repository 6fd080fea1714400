"""Redis CPU per delivery: a claim and its outcome in few commands.

claim.lua reads no event (Store.claim reads the claimed events in one MGET after it) and
writes no endpoint id (the outcome writes it); record.lua deletes nothing on the common
path: the claim field stays once its outcome is written, the status saying it was. What
that must not change, each on fakeredis and on a real Redis:

- a claim is a lease only while its delivery is "delivering": once its outcome is
  written, its token extends, holds and hands back nothing (fails with the status check
  taken out of extend.lua, of hold.lua, of release.lua, and out of record.lua's own
  fence: a retried write then writes again);
- a retried write of an outcome (its reply lost) changes nothing, also after a later
  claim has taken the delivery (fails with claim.lua not moving the token to
  "recorded", and with record.lua not reading it: the retry is logged as a fenced
  request);
- the endpoint is shown while in flight (the header's, also past HEADER_READ), and is in
  the hash once the outcome, a reclaim or a hold is written (fails with each write
  taken out, record.lua ignoring the endpoint it is given, and the dashboard's
  header fallback removed or reading only the first HEADER_READ bytes);
- a claimed delivery whose event is gone is a dead letter (event_missing), not a send
  (fails with Store.claim not recording it);
- hashes as an older version of the scripts wrote them (the claim deleted at the
  outcome, "recorded" holding its token) are read and written on as they are.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from relay.queue.reads import HEADER_READ
from relay.queue.store import Outcome, Store
from tests.helpers.store import (
    add_endpoint,
    claim,
    h,
    log,
    outcome,
    publish,
    stored_event,
    zmembers,
)

pytestmark = pytest.mark.realredis


async def _one(st: Store) -> tuple[dict[str, Any], str]:
    ep = await add_endpoint(st)
    _, (delivery_id,), _ = await publish(st, [ep["id"]])
    return ep, delivery_id


async def test_a_written_outcome_ends_the_lease(st: Store) -> None:
    ep, _ = await _one(st)
    sk = st.keys.shard(0)
    c = (await claim(st)).items[0]
    assert await st.record(sk, [outcome(c, "succeeded")]) == [1]
    before = await h(st, c.id)
    assert before["claim"] == c.token and before["status"] == "succeeded"
    assert await st.extend(sk, [(c.id, c.token)], 60_000) == [0]
    assert await st.hold(sk, ep["id"], [(c.id, c.token)]) == 0
    assert await st.release(sk, [(c.id, c.token)]) == [0]
    assert await h(st, c.id) == before
    assert not await zmembers(st, sk.processing) and not await zmembers(st, sk.due)
    assert not await zmembers(st, sk.held(ep["id"]))
    assert await zmembers(st, sk.succeeded) == {c.id: float(before["updated_at"])}


async def test_a_retried_write_changes_nothing(st: Store) -> None:
    await _one(st)
    sk = st.keys.shard(0)
    c = (await claim(st)).items[0]
    first = outcome(c, "retry", 60_000, 500)
    assert await st.record(sk, [first]) == [1]
    after = await h(st, c.id)
    assert await st.record(sk, [first]) == [1]  # its reply was lost: written again
    assert await h(st, c.id) == after and len(await log(st, c.id)) == 1


async def test_a_retried_write_after_a_later_claim_is_still_known(st: Store) -> None:
    await _one(st)
    sk = st.keys.shard(0)
    c1 = (await claim(st)).items[0]
    assert await st.record(sk, [outcome(c1, "retry", 0, 500)]) == [1]
    c2 = (await claim(st)).items[0]
    assert (c2.id, c2.attempts) == (c1.id, 2)
    raw = await h(st, c1.id)
    assert (raw["claim"], raw["recorded"], raw["status"]) == (c2.token, c1.token, "delivering")
    # c1's write again (its reply lost): known, not logged as a fenced request
    assert await st.record(sk, [outcome(c1, "retry", 0, 500)]) == [1]
    assert [e.get("fenced") for e in await log(st, c1.id)] == [None]
    assert await st.record(sk, [outcome(c2, "succeeded")]) == [1]
    assert [e["attempt"] for e in await log(st, c1.id)] == [1, 2]
    # a claim that was never written is fenced: its request logged as such
    stale = outcome(c2, "succeeded", token="c:stale:1")
    assert await st.record(sk, [stale]) == [0]
    assert [e.get("fenced") for e in await log(st, c1.id)] == [None, None, True]


async def test_the_endpoint_is_the_headers_until_the_outcome_writes_it(st: Store) -> None:
    ep, d = await _one(st)
    sk = st.keys.shard(0)
    c = (await claim(st)).items[0]
    assert c.endpoint_id == ep["id"]
    assert "endpoint_id" not in await h(st, d)  # the first claim writes none
    shown = await st.get_delivery(d)
    assert shown is not None and (shown["endpoint_id"], shown["status"]) == (ep["id"], "delivering")
    assert shown["claim"] == c.token  # in flight: the lease is shown
    health = await st.endpoint_health([ep["id"]], sample=10, processing_cap=100)
    assert health[0]["in_flight"] == 1
    # an outcome that names no endpoint (this test's): the header's is written
    assert await st.record(sk, [outcome(c, "succeeded")]) == [1]
    assert (await h(st, d))["endpoint_id"] == ep["id"]
    shown = await st.get_delivery(d)
    assert shown is not None and "claim" not in shown


async def test_in_flight_counts_read_a_header_past_the_first_read(st: Store) -> None:
    """A fan-out's header longer than HEADER_READ: the dashboard's in-flight count still
    finds each first attempt's endpoint (fails with a reader of the first HEADER_READ
    bytes only: every count 0)."""
    eps = [f"ep_{i:026d}" for i in range(160)]
    event_id = await stored_event(st, eps)
    head = await st.redis.getrange(st.keys.shard(0).event(event_id), 0, HEADER_READ - 1)
    assert "\n" not in head  # the header goes on past the first read
    assert len((await claim(st, limit=200)).items) == len(eps)
    health = await st.endpoint_health(eps, sample=1, processing_cap=1000)
    assert [h["in_flight"] for h in health] == [1] * len(eps)


async def test_the_outcome_writes_the_endpoint_it_is_given(st: Store) -> None:
    _, d = await _one(st)
    sk = st.keys.shard(0)
    c = (await claim(st)).items[0]
    given = Outcome(c.id, c.token, "dead", 0, 410, "http_status", b'{"attempt":1}', "", "ep_x")
    assert await st.record(sk, [given]) == [1]
    assert (await h(st, d))["endpoint_id"] == "ep_x"


async def test_a_reclaim_and_a_hold_write_the_endpoint(st: Store) -> None:
    ep = await add_endpoint(st)
    _, (d1, d2), _ = await publish(st, [ep["id"], ep["id"]])
    sk = st.keys.shard(0)
    got = {c.id: c for c in (await claim(st, lease_ms=1)).items}
    assert await st.hold(sk, ep["id"], [(d2, got[d2].token)]) == 1
    assert (await h(st, d2))["endpoint_id"] == ep["id"]
    await asyncio.sleep(0.01)
    back, dead, reclaimed = await st.reclaim(sk)
    assert (back, dead, reclaimed) == (1, 0, [d1])
    raw = await h(st, d1)
    assert (raw["endpoint_id"], raw["status"]) == (ep["id"], "pending")


async def test_a_claimed_delivery_whose_event_is_gone_is_a_dead_letter(st: Store) -> None:
    ep = await add_endpoint(st)
    event_id, (gone,), _ = await publish(st, [ep["id"]])
    _, (kept,), _ = await publish(st, [ep["id"]])
    sk = st.keys.shard(0)
    await st.redis.delete(sk.event(event_id))
    got = await claim(st)
    assert [c.id for c in got.items] == [kept]
    raw = await h(st, gone)
    assert (raw["status"], raw["last_error"]) == ("dead", "event_missing")
    assert gone in await zmembers(st, sk.dead)
    assert list(await zmembers(st, sk.processing)) == [kept]
    assert [e["error"] for e in await log(st, gone)] == ["event_missing"]


async def test_hashes_the_scripts_before_wrote_are_read_as_they_are(st: Store) -> None:
    """Layout v3 as the scripts before this change left it: an outcome deleted the claim
    and kept its token in "recorded"; a claim wrote the endpoint id."""
    ep = await add_endpoint(st)
    _, (flying, retried), _ = await publish(st, [ep["id"], ep["id"]])
    sk = st.keys.shard(0)
    now = str(int(time.time() * 1000))
    written = {"endpoint_id": ep["id"], "attempts": "1", "updated_at": now}
    # in flight under an old claim
    await st.redis.zrem(sk.due, flying)
    await st.redis.zadd(sk.processing, {flying: int(now) + 60_000})
    old_claim = {"status": "delivering", "claim": "old:1:1", "worker": "w0"}
    await st.redis.hset(sk.delivery(flying), mapping={**written, **old_claim})
    # its first request failed: pending, due now, its token recorded
    failed = {"status": "pending", "recorded": "old:1:2", "log_n": "1", "last_status_code": "500"}
    await st.redis.hset(sk.delivery(retried), mapping={**written, **failed})
    assert await st.extend(sk, [(flying, "old:1:1")], 60_000) == [1]
    c = (await claim(st)).items[0]
    assert (c.id, c.attempts, c.endpoint_id) == (retried, 2, ep["id"])
    assert (await h(st, retried))["recorded"] == "old:1:2"  # kept: its claim was deleted
    old_flying = Outcome(flying, "old:1:1", "succeeded", 0, 200, "", b'{"attempt":1}', "")
    old_retried = Outcome(retried, "old:1:2", "retry", 0, 500, "x", b'{"attempt":1}')
    assert await st.record(sk, [old_flying, old_retried]) == [1, 1]
    assert await st.record(sk, [old_flying, outcome(c, "succeeded")]) == [1, 1]
    assert (await h(st, flying))["status"] == "succeeded"
    assert [e.get("fenced") for e in await log(st, retried)] == [None]  # the new one's
    assert set(await zmembers(st, sk.succeeded)) == {flying, retried}
