"""GET /v1/events over both tiers against a real Redis and a real PostgreSQL: archived
events listed with Redis's under one cursor, newest first, each once (also while it is
in both tiers), the filters applied to either, and the payload search of the archive."""

from __future__ import annotations

from typing import Any

import orjson

from relay.domain import ids
from tests.helpers.api import call
from tests.helpers.archive import (
    FAR,
    archive_overrides,
    finish,
    finished_world,
    list_all,
    mover_of,
)


def _newest_first(event_ids: list[str]) -> list[str]:
    return sorted(event_ids, key=lambda e: (ids.created_ms(e) or 0, e), reverse=True)


async def _both_tiers(store: Any, receiver: Any) -> dict[str, Any]:
    """24 events moved to the archive, then 6 newer ones finished in Redis and written to
    the archive as well (caught mid-move: in both tiers)."""
    old = await finished_world(store, receiver, 24)
    mover = await mover_of(store)
    assert await mover.once(now_ms=FAR) == 48
    new = await finished_world(store, receiver, 6)
    await finish(store, 12)
    sk = store.keys.shard(0)
    done = await store.finished_before(sk, FAR, 100)
    records = await store.finished_records(sk, [f.id for f in done])
    stored = await store.stored_events(sk, sorted({r["event_id"] for r in records}))
    await mover.tables.write(
        0, [(r, int(f.score)) for r, f in zip(records, done, strict=True)], stored
    )
    assert len(stored) == 6 and await store.get_event(new["events"][0][0]) is not None
    await mover.tables.close()
    return {"old": old, "new": new}


async def test_events_page_through_both_tiers_each_once(
    make_store: Any, make_api: Any, receiver: Any, pg_server: Any
) -> None:
    store = await make_store(**archive_overrides(pg_server))
    api = await make_api(store)
    world = await _both_tiers(store, receiver)
    every = [e for w in (world["old"], world["new"]) for e, _ in w["events"]]

    for limit in (1, 4, 7, 50):
        listed = [r["id"] for r in await list_all(api, "/v1/events", limit=limit)]
        assert listed == _newest_first(every), limit

    archived = (await list_all(api, "/v1/events", limit=5))[-1]
    assert archived["id"] == _newest_first(every)[-1]
    assert archived["id"] in {e for e, _ in world["old"]["events"]}
    assert archived["delivery_count"] == 2
    assert archived["status_counts"] == {"succeeded": 1, "dead": 1}
    assert [d["status"] for d in archived["deliveries"]] == ["succeeded", "dead"]


async def test_filters_apply_to_archived_events(
    make_store: Any, make_api: Any, receiver: Any, pg_server: Any
) -> None:
    store = await make_store(**archive_overrides(pg_server))
    api = await make_api(store)
    world = await _both_tiers(store, receiver)
    old, new = world["old"], world["new"]
    every = [e for w in (old, new) for e, _ in w["events"]]

    async def listed(**params: Any) -> list[str]:
        return [r["id"] for r in await list_all(api, "/v1/events", limit=4, **params)]

    assert await listed(status="dead") == _newest_first(every)
    assert await listed(status="succeeded") == _newest_first(every)
    assert await listed(status="pending") == []
    assert await listed(endpoint_id=old["ok"]) == _newest_first([e for e, _ in old["events"]])
    assert await listed(endpoint_id=new["bad"]) == _newest_first([e for e, _ in new["events"]])
    assert await listed(type="order.*") == _newest_first(every)
    assert await listed(type="ping") == []
    assert await listed(app="default") == _newest_first(every)
    assert await listed(app="other") == []
    window = [e for e, _ in old["events"][5:11]]
    since = ids.created_ms(window[0]) or 0
    until = (ids.created_ms(window[-1]) or 0) + 1
    inside = [e for e in every if since <= (ids.created_ms(e) or 0) < until]
    assert set(window) <= set(inside)
    assert await listed(since=since, until=until) == _newest_first(inside)


async def test_idempotency_key_and_payload_search_the_archive(
    make_store: Any, make_api: Any, receiver: Any, pg_server: Any
) -> None:
    store = await make_store(**archive_overrides(pg_server))
    api = await make_api(store)
    world = await _both_tiers(store, receiver)
    keyed = {}
    for key in ("order-1", "order-2"):
        status, ev = await call(
            api,
            "POST",
            "/v1/events",
            json={"type": "order.paid", "payload": {"customer": {"id": 42}, "key": key}},
            headers={"Idempotency-Key": key},
        )
        assert status == 201, ev
        keyed[key] = ev["id"]
    await finish(store, 12 + 2 * 4)  # to the 4 endpoints of the world, 2 of them failing
    mover = await mover_of(store)
    assert await mover.once(now_ms=FAR) == 12 + 2 * 4
    await mover.tables.close()
    assert await store.get_event(keyed["order-1"]) is None  # archived only

    async def listed(**params: Any) -> list[str]:
        return [r["id"] for r in await list_all(api, "/v1/events", limit=2, **params)]

    assert await listed(idempotency_key="order-1") == [keyed["order-1"]]
    assert await listed(idempotency_key="order-3") == []
    assert await listed(payload=orjson.dumps({"customer": {"id": 42}}).decode()) == (
        _newest_first(list(keyed.values()))
    )
    threes = [
        e
        for w in (world["old"], world["new"])
        for i, (e, _) in enumerate(w["events"])
        if i % 7 == 3
    ]
    assert len(threes) == 4
    found = await listed(payload='{"customer": {"id": 3}}')
    assert found == _newest_first(threes)
    assert await listed(payload='{"customer": {"id": 3}}', status="pending") == []
    assert await listed(payload='{"key": "order-2"}', idempotency_key="order-1") == []
    status, body = await call(api, "GET", "/v1/events", params={"payload": "[1]"})
    assert (status, body["error"]) == (400, "invalid_payload_filter")


async def test_without_an_archive_payload_search_is_refused(make_store: Any, make_api: Any) -> None:
    store = await make_store()
    api = await make_api(store)
    status, body = await call(api, "GET", "/v1/events", params={"payload": '{"a": 1}'})
    assert (status, body["error"]) == (422, "archive_required")
    status, body = await call(api, "GET", "/v1/events")
    assert (status, body["data"]) == (200, [])
