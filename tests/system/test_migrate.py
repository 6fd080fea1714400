"""``relay migrate`` moves a Redis populated by key layout v1 or v2 to v3 with no loss.

``tests/data/layout_v1.json`` and ``layout_v2.json`` were written by that layout's code
itself (scripts/layout_fixture.py, run from a checkout of its last commit): every key it
left, and what it answered for every event and delivery. Each is loaded into this
session's real ``redis-server`` under a fresh prefix, migrated, then read, delivered and
swept by this code. Without the migration the v3 code finds none of v1's events (every
get_event None); with v1's event hashes copied as they are, claim.lua fails on
WRONGTYPE; with v2's event strings copied as they are, claim.lua finds no
``max_attempts`` in their headers for the pending deliveries.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from relay.delivery.worker import Worker
from relay.ops.retention import Retention
from relay.queue.store import Store
from tests.helpers import Receiver

pytestmark = pytest.mark.realredis

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = {
    layout: orjson.loads((DATA / f"layout_{layout}.json").read_bytes()) for layout in ("v1", "v2")
}
FAR = 10**15


def _put(pipe: Any, key: str, row: dict[str, Any]) -> None:
    """Queue the writes that recreate one dumped key (``row``) as ``key``."""
    kind, value = row["type"], row["value"]
    if kind == "string":
        pipe.set(key, value)
    elif kind == "hash":
        pipe.hset(key, mapping=value)
    elif kind == "list":
        pipe.rpush(key, *value)
    elif kind == "set":
        pipe.sadd(key, *value)
    else:
        pipe.zadd(key, dict((m, s) for m, s in value))
    if row["pttl"] > 0:
        pipe.pexpire(key, row["pttl"])


async def _load(store: Store, data: dict[str, Any]) -> None:
    """The fixture's keys, under this store's prefix (values name no key)."""
    old = data["prefix"] + ":"
    async with store.redis.pipeline(transaction=False) as pipe:
        for row in data["keys"]:
            _put(pipe, store.settings.key_prefix + ":" + row["key"][len(old) :], row)
        await pipe.execute()


async def _keys(store: Store, layout: str) -> list[str]:
    pattern = f"{store.settings.key_prefix}:{layout}:*"
    return [k async for k in store.redis.scan_iter(match=pattern)]


@pytest.fixture(params=sorted(FIXTURES))
def old(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def old_store(make_store: Any, old: str) -> Store:
    data = FIXTURES[old]
    store: Store = await make_store(key_prefix="m" + uuid.uuid4().hex[:8], shards=data["shards"])
    await _load(store, data)
    return store


async def test_api_and_worker_refuse_a_redis_of_an_older_layout(
    old_store: Store, old: str, redis_server: Any
) -> None:
    assert await old_store.legacy_left() == old
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        RELAY_REDIS_URL=redis_server.url,
        RELAY_KEY_PREFIX=old_store.settings.key_prefix,
        RELAY_SHARDS=str(FIXTURES[old]["shards"]),
        RELAY_API_TOKENS="t",
    )
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "relay", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"layout {old}" in proc.stderr and "relay migrate" in proc.stderr


async def test_migrate_moves_everything_and_today_s_code_reads_it_as_the_old_did(
    old_store: Store, old: str, receiver: Receiver
) -> None:
    store = old_store
    DATA = FIXTURES[old]
    total = len(DATA["keys"])
    dry = await store.migrate(dry_run=True)
    assert dry.keys == total and len(await _keys(store, old)) == total  # nothing changed

    done = await store.migrate()
    # v1's events index and the old deliveries indexes go; v3's events index is made
    dropped = [r for r in DATA["keys"] if r["key"].endswith((":events", ":deliveries"))]
    assert (done.keys, done.events, done.already) == (total, len(DATA["events"]) + 1, 0)
    assert done.dropped == len(dropped) == DATA["shards"] * (2 if old == "v1" else 1)
    assert await _keys(store, old) == []
    made = [k for k in await _keys(store, "v3") if k.endswith(":events")]
    assert len(await _keys(store, "v3")) == total - len(dropped) + len(made)
    indexed: dict[str, float] = {}
    for key in made:
        indexed.update(await store.redis.zrange(key, 0, -1, withscores=True))
    assert indexed == {e: float(ev["created_at"]) for e, ev in DATA["events"].items()}
    assert await store.legacy_left() is None
    # a moved delivery keeps no next_attempt_at: v3 reads it from the due score
    moved = [k for k in await _keys(store, "v3") if ":dlv:" in k]
    assert len(moved) == len(DATA["deliveries"])
    for key in moved:
        assert not await store.redis.hexists(key, "next_attempt_at"), key
    assert (await store.migrate()).keys == 0  # run again: nothing left to move

    # every event and delivery reads exactly as the v1 code answered for it
    for event_id, event in DATA["events"].items():
        assert await store.get_event(event_id) == event, event_id
    for delivery_id, delivery in DATA["deliveries"].items():
        assert await store.get_delivery(delivery_id) == delivery, delivery_id
    # what had a TTL (the event no endpoint took, the idempotency keys) keeps it
    for row in (r for r in DATA["keys"] if r["pttl"] > 0):
        moved = store.settings.key_prefix + ":v3:" + row["key"].split(f":{old}:", 1)[1]
        assert 0 < await store.redis.pttl(moved) <= row["pttl"], row["key"]

    # what was pending is delivered, the body as published; then everything is swept
    for endpoint in await store.list_endpoints():
        endpoint["url"] = receiver.url + "/ok"
        await store.put_endpoint(endpoint)
    import asyncio

    await Worker(store, store.settings).run(asyncio.Event(), burst=True)
    pending = DATA["pending"]
    assert len(receiver.requests) == len(pending) > 0
    sent = {r.headers["webhook-id"]: orjson.loads(r.body) for r in receiver.requests}
    for delivery_id in pending:
        event_id = DATA["deliveries"][delivery_id]["event_id"]
        assert sent[event_id]["data"] == DATA["events"][event_id]["payload"]
        assert (await store.get_delivery(delivery_id) or {})["status"] == "succeeded"
    swept = await Retention(store).expire(succeeded_before=FAR, dead_before=FAR)
    assert (swept.deliveries, swept.events) == (len(DATA["deliveries"]), len(DATA["events"]))
    for event_id in DATA["events"]:
        assert await store.get_event(event_id) is None


async def test_migrate_on_a_redis_cluster_scans_every_primary(cluster_store: Any) -> None:
    """The v2 fixture's keys under shards {s0}..{s2} and {cfg}: on three primaries."""
    store: Store = await cluster_store(key_prefix="m" + uuid.uuid4().hex[:8], shards=3)
    DATA = FIXTURES["v2"]
    spread = [row for row in DATA["keys"] if ":{s0}:" in row["key"] or ":{cfg}:" in row["key"]]
    for n, row in enumerate(spread):  # the same records, spread over the three shards
        shard = f"{{s{n % 3}}}" if ":{s0}:" in row["key"] else "{cfg}"
        rest = row["key"].split(":v2:", 1)[1].split(":", 1)[1]
        key = f"{store.settings.key_prefix}:v2:{shard}:{rest}"
        async with store.redis.pipeline(transaction=False) as pipe:  # one slot per key
            _put(pipe, key, row)
            await pipe.execute()
    done = await store.migrate()
    assert done.keys == len(spread) and done.already == 0
    nodes = store.redis.get_primaries()
    left = 0
    for node in nodes:
        pattern = f"{store.settings.key_prefix}:v2:*"
        cursor, found = 0, []
        while True:
            reply = await store.redis.execute_command(
                "SCAN", cursor, "MATCH", pattern, "COUNT", 1000, target_nodes=node
            )
            cursor, batch = reply
            cursor = next(iter(cursor.values())) if isinstance(cursor, dict) else cursor
            found += batch
            if int(cursor) == 0:
                break
        left += len(found)
    assert left == 0 and len(nodes) == 3
