"""Seeding finished deliveries for the replay tests."""

from __future__ import annotations

from typing import Any

import orjson

from relay.domain import eventrecord, ids, signing
from relay.domain.schema import endpoint_record
from relay.queue.store import Store

DAY = 86_400_000


async def seed(
    store: Store,
    endpoints: list[str],
    n: int,
    *,
    status: str = "dead",
    created: int,
    event_type: str = "order.paid",
) -> list[str]:
    """``n`` finished deliveries (round robin over ``endpoints`` and the shards), written
    as publish.lua and record.lua leave them, in pipelines: a test helper, not relay."""
    made: list[str] = []
    shards = store.settings.shards
    async with store.redis.pipeline(transaction=False) as pipe:
        for i in range(n):
            sk = store.keys.shard(i % shards)
            at = created + i
            event_id = ids.new_event_id(sk.shard, at)
            dlv = ids.delivery_id(event_id, 0)
            ep = endpoints[i % len(endpoints)]
            body = signing.build_body(event_id, event_type, at, orjson.dumps({"i": i}))
            pipe.set(
                sk.event(event_id),
                eventrecord.pack(
                    event_id=event_id,
                    event_type=event_type,
                    app="default",
                    created_ms=at,
                    max_attempts=3,
                    deliveries=[(dlv, ep)],
                    body=body,
                ),
            )
            # layout v3: the id names the event, the header the budget, app and type; the
            # index scores say when it finished (a dead one keeps finished_at too)
            fields: dict[str, Any] = {
                "endpoint_id": ep,
                "status": status,
                "attempts": 3,
                "updated_at": at,
                "log_n": 0,
            }
            if status == "dead":
                fields["finished_at"] = at
            pipe.hset(sk.delivery(dlv), mapping=fields)
            pipe.zadd(sk.dead if status == "dead" else sk.succeeded, {dlv: at})
            pipe.zadd(sk.events, {event_id: at})
            pipe.zadd(sk.endpoint_index(ep), {dlv: at})
            made.append(dlv)
            if i % 2000 == 1999:
                await pipe.execute()
        await pipe.execute()
    return made


async def endpoint(store: Store, url: str = "http://127.0.0.1:9/x", **fields: Any) -> str:
    record = endpoint_record(url=url, **fields)
    await store.put_endpoint(record)
    return str(record["id"])
