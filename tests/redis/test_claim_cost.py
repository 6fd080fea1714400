"""Redis CPU per delivery: what claim.lua does to cost less, and that it changes
nothing a claim returns or leaves behind.

- A new processing set is made a skiplist (a long member added with the first leases and
  removed in the same call): as a listpack, every lease added would scan the whole set.
  Needs a real Redis (OBJECT ENCODING); fails with the pad taken out ("listpack").
- A claim's events are read by Store.claim in one MGET after the script (claim.lua reads
  none: a string passed through Lua is hashed byte by byte and copied twice), and a
  first claim's endpoint and attempt budget are the header's, read in Python: every
  shape below claims the same endpoint and attempt budget on fakeredis and on a real
  Redis, as a Lua reader with string.find and cjson would. Fails with
  eventrecord.endpoint_of off by one (each delivery given its neighbour's endpoint).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from relay.domain import ids
from relay.queue.store import Store
from tests.helpers.store import add_endpoint, claim, outcome, publish, stored_event

pytestmark = pytest.mark.realredis


async def test_a_new_processing_set_is_a_skiplist_and_holds_only_leases(make_store: Any) -> None:
    st = await make_store()
    sk = st.keys.shard(0)
    ep = await add_endpoint(st)
    for _ in range(3):
        await publish(st, [ep["id"]])
    got = await claim(st, limit=2)
    assert await st.redis.object("encoding", sk.processing) == "skiplist"
    leases = await st.redis.zrange(sk.processing, 0, -1, withscores=True)
    assert sorted(m for m, _ in leases) == sorted(c.id for c in got.items)
    assert got.next_lease_ms == leases[0][1]  # the head lease, not the pad's +inf

    # a set that exists is added to as it is (one more lease, still a skiplist)
    more = await claim(st, limit=5)
    assert len(more.items) == 1
    assert await st.redis.zcard(sk.processing) == 3
    assert await st.redis.object("encoding", sk.processing) == "skiplist"

    # emptied, the set is gone; the next claim makes a skiplist again
    done = [outcome(c, "succeeded") for c in got.items + more.items]
    assert await st.record(sk, done) == [1, 1, 1]
    assert not await st.redis.exists(sk.processing)
    await publish(st, [ep["id"]])
    again = await claim(st)
    assert len(again.items) == 1
    assert await st.redis.object("encoding", sk.processing) == "skiplist"
    assert await st.redis.zrange(sk.processing, 0, -1) == [again.items[0].id]


TRACE = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("as published", {}),
    ("fan-out of three", {"fan": 3}),
    ("trace context and created_at", {"trace": TRACE, "created_ms": 1_700_000_000_000}),
    ("a filtered endpoint", {"filtered": [{"endpoint_id": "ep_X", "reason": "filter"}]}),
    ("an escaped quote in the type", {"event_type": 'order."paid"'}),
    ("a backslash in the app", {"app": "a\\b"}),
    ("a newline in the type", {"event_type": "order\npaid"}),
    ("a big attempt budget", {"max_attempts": 123456}),
]


@pytest.mark.parametrize(("name", "kw"), SHAPES, ids=[s[0] for s in SHAPES])
async def test_every_header_shape_claims_its_endpoint_and_budget(
    st: Store, name: str, kw: dict[str, Any]
) -> None:
    kw = dict(kw)  # the parameters are shared by both backends' runs
    fan = kw.pop("fan", 1)
    eps = [(await add_endpoint(st))["id"] for _ in range(fan)]
    event_id = await stored_event(st, eps, **kw)
    got = await claim(st, limit=10)
    by_id = {c.id: c for c in got.items}
    assert len(by_id) == fan
    for i, ep in enumerate(eps):
        c = by_id[ids.delivery_id(event_id, i)]
        budget = kw.get("max_attempts", 7)
        assert (c.endpoint_id, c.max_attempts, c.event_id) == (ep, budget, event_id)


D_SHAPES = [
    ("a migrated pair", ["ep_A", ["dlv_PAIR", "ep_B"], "ep_C"]),
    ("an escaped endpoint id", ["ep_A", 'ep_"quoted"\\', "ep_C"]),
    ("a backslash at the end", ["ep_A", "ep_\\", "ep_C"]),
]


@pytest.mark.parametrize(("name", "d"), D_SHAPES, ids=[s[0] for s in D_SHAPES])
async def test_every_shape_of_d_claims_its_own_entry(st: Store, name: str, d: list[Any]) -> None:
    # d as relay migrate leaves it ([delivery id, endpoint id]) beside derived entries, or an
    # endpoint id that JSON escapes: each claimed delivery gets its own entry all the same
    event_id = ids.new_event_id()
    sk = st.keys.shard(0)
    header = {"type": "t", "app": "default", "max_attempts": 4, "d": d}
    await st.redis.set(sk.event(event_id), (orjson.dumps(header) + b"\n{}").decode())
    mine = {ids.delivery_id(event_id, i): e for i, e in enumerate(d) if isinstance(e, str)}
    await st.redis.zadd(sk.due, {k: 0 for k in mine})
    got = {c.id: c for c in (await claim(st)).items}
    assert {k: c.endpoint_id for k, c in got.items()} == mine
    assert {c.max_attempts for c in got.values()} == {4}
