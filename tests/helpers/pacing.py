"""Endpoints, events and waiting for the pacing and health tests."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import orjson

from relay.delivery.worker import Worker
from relay.domain.schema import endpoint_record
from relay.queue.store import Store
from tests.helpers import publish_event, waiting


async def add_endpoint(store: Store, url: str, **extra: Any) -> dict[str, Any]:
    ep = endpoint_record(url=url, app="default")
    ep.update(extra)  # as given: a test may store what the API would refuse
    await store.put_endpoint(ep)
    return ep


async def publish(store: Store, endpoint_id: str, payload: Any = None, shard: int = 0) -> str:
    """Publish one event with one delivery to ``endpoint_id`` on ``shard``; returns the
    delivery id."""
    body = orjson.dumps(payload or {"n": 1})
    _, (delivery_id,), _ = await publish_event(
        store, [endpoint_id], event_type="t", payload=body, shard=shard
    )
    return delivery_id


until = partial(waiting.until, within=15.0, every=0.02)


async def deliver_one(store: Any, receiver: Any, endpoint_id: str) -> Any:
    """Publish one delivery to ``endpoint_id`` and return the request the receiver got."""
    before = len(receiver.requests)
    await publish(store, endpoint_id)
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        await receiver.wait_for(before + 1)
    finally:
        stop.set()
        await task
    return receiver.requests[-1]
