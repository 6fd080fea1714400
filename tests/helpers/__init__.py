"""Helpers shared by the test tiers: settings, publishing, a recording receiver.

Fixtures live in ``tests/conftest.py``; topic helpers in the modules beside this one.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from relay.domain import ids, signing
from relay.queue.store import Store
from relay.redisproc import RedisCluster
from relay.redisslots import SlotControl
from relay.settings import Settings


class ClusterHandle(SlotControl):
    """The ``redis_cluster`` fixture: 3 masters, shard tags {s0} {s1} {s2} on 3 nodes.

    Slot control for tests comes from :class:`relay.redisslots.SlotControl`; its clients
    are synchronous: call them through ``asyncio.to_thread`` beside a running worker.
    """

    TAGS = ("{s0}", "{s1}", "{s2}")

    def __init__(self, cluster: RedisCluster) -> None:
        super().__init__(cluster)
        self.url = cluster.url

    def spread_shards(self) -> None:
        self.spread(self.TAGS)


def make_settings(**overrides: Any) -> Settings:
    """Settings for tests: own key prefix, loopback allowed, fast retries."""
    values: dict[str, Any] = {
        "key_prefix": "t" + uuid.uuid4().hex[:10],
        "allow_private_networks": True,
        "retry_schedule": (0.05, 0.1),
        "retry_jitter": 0.0,
        "http_timeout": 5.0,
        "lease_seconds": 5.0,
        "api_tokens": ("test-token",),
        "shutdown_grace": 5.0,
        "worker_id": "w-" + uuid.uuid4().hex[:6],
    }
    values.update(overrides)
    return Settings(**values)


StoreFactory = Callable[..., Store]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """Records requests; ``responses[path]`` decides the answer (default 200)."""

    url: str
    requests: list[Received] = field(default_factory=list)
    responses: dict[str, Callable[[web.Request], Any]] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def for_path(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    async def wait_for(self, count: int, within: float = 10.0, path: str | None = None) -> None:
        async def enough() -> None:
            while len(self.for_path(path) if path else self.requests) < count:
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(enough(), within)


async def publish_event(
    store: Store,
    endpoint_ids: list[str],
    *,
    shard: int = 0,
    event_type: str = "order.paid",
    payload: bytes = b'{"n":1}',
    created_ms: int | None = None,
    idempotency: tuple[str, bytes] | None = None,
    app: str = "default",
) -> tuple[str, list[str], str | None]:
    """One event to ``endpoint_ids`` through ``Store.publish``, with ids as
    ``relay.publishing`` makes them (layout v3: the delivery ids derive from the event's,
    so the deliveries have no hash until their first claim). Returns the event id, the
    delivery ids and what ``Store.publish`` returned (the taken idempotency value, or None)."""
    now = created_ms or int(time.time() * 1000)
    event_id = ids.new_event_id(shard, now)
    deliveries = [(ids.delivery_id(event_id, i), e) for i, e in enumerate(endpoint_ids)]
    taken = await store.publish(
        shard=shard,
        event_id=event_id,
        event_type=event_type,
        app=app,
        body=signing.build_body(event_id, event_type, now, payload),
        created_ms=now,
        deliveries=deliveries,
        idempotency=idempotency,
    )
    return event_id, [d for d, _ in deliveries], taken


async def event_ids(store: Store, shard: int | None = None) -> list[str]:
    """The ids of the events kept in Redis that have deliveries (one shard, or all): the
    events index of layout v3, each checked against its event key."""
    shards = store.keys.all_shards() if shard is None else [store.keys.shard(shard)]
    found: set[str] = set()
    for sk in shards:
        events = set(await store.redis.zrange(sk.events, 0, -1))
        async with store.redis.pipeline(transaction=False) as pipe:
            for e in sorted(events):
                pipe.exists(sk.event(e))
            kept = await pipe.execute()
        found |= {e for e, k in zip(sorted(events), kept, strict=True) if k}
    return sorted(found)
