"""Endpoints, events and waiting for the in-process worker tests."""

from __future__ import annotations

from typing import Any

import orjson

from relay.domain.schema import endpoint_record
from relay.queue.store import Store
from tests.helpers import publish_event
from tests.helpers.waiting import until  # noqa: F401  (imported from here by tests)


async def add_endpoint(store: Store, url: str, **extra: Any) -> dict[str, Any]:
    ep = endpoint_record(url=url, app="default")
    ep.update(extra)  # as given: a test may store what the API would refuse
    await store.put_endpoint(ep)
    return ep


async def publish(store: Store, *endpoint_ids: str, payload: Any = None) -> tuple[str, list[str]]:
    body = orjson.dumps(payload or {"n": 1})
    event_id, dlv, _ = await publish_event(store, list(endpoint_ids), payload=body)
    return event_id, dlv
