"""Placement by key: a publisher of the older placement, pairs of keys on chosen shards,
and the child a crash test kills between the two steps of a publish.

``publish_by_app`` is what a relay before placement by key did with a keyed event (the
guard and the event on ``app_shard``, one ``publish.lua`` call, the same record): the
"old process" of the upgrade tests.

``python -m tests.helpers.placement <settings JSON> <event JSON> <key>`` publishes one
event through :class:`relay.publishing.Publisher` and stops between the two steps of a
two-step publish (the guard taken, the event not written): it prints ``between`` and
sleeps until the test kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson

from relay.domain import ids, ordering, signing
from relay.domain.schema import EventIn
from relay.endpoints.cache import EndpointCache
from relay.endpoints.catalog import EventTypeCache
from relay.publishing import Publisher, fingerprint, select_targets
from relay.queue.store import Store, connect
from relay.settings import Settings
from tests.helpers.cluster import until


def keys_apart(app: str, shards: int, prefix: str = "k") -> tuple[str, str]:
    """An Idempotency-Key and an ordering key of ``app`` on two different shards, neither
    on the app's own."""
    home = ordering.app_shard(app, shards)
    taken: dict[int, str] = {}
    n = 0
    while len(taken) < 2:
        key = f"{prefix}-{n}"
        s = ordering.key_shard(app, key, shards)
        if s != home and s not in taken:
            taken[s] = key
        n += 1
    idem, lane = taken.values()
    return idem, lane


@asynccontextmanager
async def cached_publisher(store: Store) -> AsyncIterator[Publisher]:
    """A :class:`Publisher` as the API builds it: endpoints and event types from caches
    kept by the change channel, so a publish reads no endpoint from Redis."""
    cache = EndpointCache(store)
    types = EventTypeCache(store, cache)
    task = asyncio.create_task(cache.run())
    try:
        await until(lambda: cache.subscribed)
        yield Publisher(store, cache.endpoints_for_app, types.lookup)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def publish_by_app(store: Store, event: EventIn, key: str) -> tuple[dict[str, Any], bool]:
    """Publish ``event`` under ``key`` as the older placement did: ``(answer, created)``."""
    shard = ordering.app_shard(event.app, store.settings.shards)
    endpoints = await store.list_endpoints(app=event.app)
    targets = select_targets(endpoints, event)
    now = int(time.time() * 1000)
    event_id = ids.new_event_id(shard, now)
    deliveries = [(ids.delivery_id(event_id, i), e["id"]) for i, e in enumerate(targets)]
    lanes = [(ordering.lane_of(e, event.ordering_key) or "", ordering.on_dead(e)) for e in targets]
    answer = {
        "id": event_id,
        "type": event.type,
        "app": event.app,
        "created_at": signing.rfc3339_ms(now),
        "deliveries": [{"id": d, "endpoint_id": e} for d, e in deliveries],
    }
    taken = await store.publish(
        shard=shard,
        event_id=event_id,
        event_type=event.type,
        app=event.app,
        body=signing.build_body(event_id, event.type, now, orjson.dumps(event.payload)),
        created_ms=now,
        deliveries=deliveries,
        idempotency=(key, orjson.dumps({"h": fingerprint(event), "answer": answer})),
        lanes=lanes if any(lane for lane, _ in lanes) else None,
    )
    if taken is None:
        return answer, True
    return orjson.loads(taken)["answer"], False


async def _publish_and_stall(settings: Settings, event: EventIn, key: str) -> None:
    store = Store(connect(settings), settings)
    await store.start()
    write = Store.publish

    async def stall(self: Store, **kw: Any) -> Any:
        if kw.get("copy"):  # step 2: the guard is taken; stop here until killed
            print("between", flush=True)
            await asyncio.sleep(3600)
        return await write(self, **kw)

    Store.publish = stall  # type: ignore[method-assign]
    await Publisher(store).publish(event, idempotency_key=key)
    print("published", flush=True)


if __name__ == "__main__":
    settings = Settings(**orjson.loads(sys.argv[1]))
    asyncio.run(_publish_and_stall(settings, EventIn.model_validate_json(sys.argv[2]), sys.argv[3]))
