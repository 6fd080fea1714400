"""The history archive (relay/archive/, relay/ops/archiving.py) against a real Redis and a
real PostgreSQL: finished deliveries move, reads are the same from either tier, lists
page through both, and Redis keeps a few bytes per moved delivery."""

from __future__ import annotations

import random
from typing import Any

from relay.archive.history import History
from relay.domain import signing
from relay.ops.replays import Job, ReplayRunner
from tests.helpers.api import call
from tests.helpers.archive import (
    FAR,
    archive_overrides,
    finish,
    finished_world,
    list_all,
    mover_of,
    read,
    tables_of,
)


async def test_reads_are_the_same_before_and_after_the_move(
    make_store: Any, make_api: Any, receiver: Any, pg_server: Any
) -> None:
    store = await make_store(**archive_overrides(pg_server))
    api = await make_api(store)
    world = await finished_world(store, receiver, 40)
    mover = await mover_of(store)
    sample = random.Random(7).sample(world["events"], 30)
    paths = [f"/v1/events/{e}" for e, _ in sample]
    paths += [f"/v1/deliveries/{d}" for _, ds in sample for d in ds]
    before = {p: await read(api, p) for p in paths}
    listed_before = await list_all(api, limit=7)
    assert len(listed_before) == 80

    moved = await mover.once(now_ms=FAR)

    assert moved == 80
    assert not await store.finished_before(store.keys.shard(0), FAR, 10)
    after = {p: await read(api, p) for p in paths}
    assert after == before
    listed_after = await list_all(api, limit=7)
    assert [r["id"] for r in listed_after] == [r["id"] for r in listed_before]
    _, stats = await call(api, "GET", "/v1/stats")
    assert stats["counts"]["succeeded"] == 40 and stats["counts"]["dead"] == 40
    assert stats["archived"] == {"succeeded": 40, "dead": 40}
    await mover.tables.close()


async def test_a_batch_written_twice_leaves_one_row_each(
    make_store: Any, receiver: Any, pg_server: Any
) -> None:
    store = await make_store(**archive_overrides(pg_server))
    await finished_world(store, receiver, 10)
    mover = await mover_of(store)
    sk = store.keys.shard(0)
    finished = await store.finished_before(sk, FAR, 100)
    records = await store.finished_records(sk, [f.id for f in finished])
    events = await store.stored_events(sk, sorted({r["event_id"] for r in records}))
    rows = [(r, int(f.score)) for r, f in zip(records, finished, strict=True)]
    await mover.tables.write(0, rows, events)
    await mover.tables.write(0, rows, events)
    assert await mover.tables.counts() == {"succeeded": 10, "dead": 10}
    history = History(store, tables_of(store))
    page, _ = await history.search(_filters(), limit=100, cursor=None)
    assert len(page) == 20
    await history.close()
    await mover.tables.close()


def _filters(**kw: Any) -> Any:
    from relay.archive.tables import Filters

    return Filters(**kw)


async def test_archived_dead_deliveries_replay_one_and_by_range(
    make_store: Any, make_api: Any, receiver: Any, pg_server: Any
) -> None:
    store = await make_store(**archive_overrides(pg_server))
    api = await make_api(store)
    world = await finished_world(store, receiver, 6)
    mover = await mover_of(store)
    assert await mover.once(now_ms=FAR) == 12
    dead = [ds[1] for _, ds in world["events"]]
    first = await read(api, f"/v1/deliveries/{dead[0]}")
    assert first["status"] == "dead" and len(first["attempt_log"]) == 2

    status, body = await call(api, "POST", f"/v1/deliveries/{dead[0]}/replay")
    assert (status, body) == (202, {"id": dead[0], "status": "pending"})
    live = await read(api, f"/v1/deliveries/{dead[0]}")
    assert live["status"] == "pending" and live["replays"] == 1
    assert live["attempt_log"] == first["attempt_log"]  # its earlier attempts, live again
    archived = await mover.tables.delivery(dead[0])
    assert archived is not None and archived["status"] == "dead"
    assert archived["attempt_log"] == first["attempt_log"]  # the archive keeps them too
    status, body = await call(api, "POST", f"/v1/deliveries/{dead[0]}/replay")
    assert status == 409 and body["current_status"] == "pending"  # replayed once, not twice

    created = [ids_created(d) for d in dead]
    spec = {"since": rfc3339(min(created)), "until": rfc3339(max(created) + 1), "status": ["dead"]}
    status, dry = await call(api, "POST", "/v1/replays", json={**spec, "dry_run": True})
    assert status == 200 and dry["matched"] == 5  # the archived dead ones (one is pending)
    status, job = await call(api, "POST", "/v1/replays", json=spec)
    assert status == 202
    runner = ReplayRunner(store, owner="t", history=History.of(store))
    assert (await store.replay_job("lease", job["id"], owner="t", lease_ms=60_000)).ok
    loaded = Job(await store.get_replay_job(job["id"]) or {})
    while await runner.step(loaded):
        pass
    assert (loaded.matched, loaded.replayed, loaded.skipped) == (5, 5, 0)
    for d in dead:
        assert (await read(api, f"/v1/deliveries/{d}"))["status"] == "pending"
    await finish(store, 6)  # they fail again and die again, in Redis
    assert await mover.once(now_ms=FAR) == 6
    again = await read(api, f"/v1/deliveries/{dead[3]}")
    assert again["status"] == "dead" and len(again["attempt_log"]) == 4
    assert len(await list_all(api)) == 12
    assert runner.history is not None
    await runner.history.close()
    await mover.tables.close()


def rfc3339(ms: int) -> str:
    return signing.rfc3339_ms(ms)


def ids_created(delivery_id: str) -> int:
    from relay.domain import ids

    return int(ids.created_ms(delivery_id) or 0)
