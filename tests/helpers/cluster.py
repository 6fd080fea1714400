"""Seeding and waiting on the Redis Cluster tests."""

from __future__ import annotations

from functools import partial
from typing import Any

from relay.domain.schema import endpoint_record
from relay.queue.store import Store
from tests.helpers import publish_event, waiting

LONG_LEASE_MS = 60_000


async def seed(store: Store, shard: int, n: int, endpoint_id: str = "ep_none") -> list[str]:
    """One event with ``n`` deliveries on ``shard`` (one script call); their ids."""
    _, deliveries, taken = await publish_event(
        store, [endpoint_id] * n, shard=shard, event_type="cluster.test"
    )
    assert taken is None
    return deliveries


def endpoint(url: str) -> dict[str, Any]:
    """An endpoint record as the API stores it (for ``Store.put_endpoint``)."""
    return endpoint_record(url=url)


until = partial(waiting.until, within=20.0)


async def settled(store: Store, succeeded: int) -> bool:
    counts = (await store.stats())["counts"]
    return bool(counts["succeeded"] == succeeded and counts["delivering"] == 0)
