"""The event type catalog (``{cfg}:event_types``): records in and out of Redis.

The typed wrappers of ``event_type_put.lua`` and ``event_type_delete.lua`` and the plain
reads of the same hash. What a valid event type is (and its JSON Schema) is
:mod:`relay.domain.eventtypes`'s; the service around it is :mod:`relay.endpoints.catalog`.
Writes bump ``endpoint_epoch`` around the script call, as endpoint writes do, so a
cache fill that overlapped one of this process's own writes is never kept.
"""

from __future__ import annotations

from typing import Any

import orjson

from relay.queue.base import StoreBase


class EventTypeRecords(StoreBase):
    async def put_event_type(self, record: dict[str, Any], *, expected: str | None = None) -> bool:
        """Create ``record`` (``expected`` None: only if its name is new) or change it
        (only if it still holds ``expected``, the JSON read before). True when written."""
        self.endpoint_epoch += 1
        try:
            done = await self.scripts.event_type_put(
                keys=[self.keys.event_types],
                args=[
                    record["name"],
                    orjson.dumps(record),
                    self.keys.endpoints_changed,
                    "" if expected is None else expected,
                ],
                ack=(self.settings.ack_replicas, self.settings.ack_timeout),
            )
        finally:
            self.endpoint_epoch += 1
        return bool(int(done))

    async def delete_event_type(self, name: str) -> bool:
        """Remove one event type; False when there was none of that name."""
        self.endpoint_epoch += 1
        try:
            done = await self.scripts.event_type_delete(
                keys=[self.keys.event_types],
                args=[name, self.keys.endpoints_changed],
                ack=(self.settings.ack_replicas, self.settings.ack_timeout),
            )
        finally:
            self.endpoint_epoch += 1
        return bool(int(done))

    async def get_event_type_raw(self, name: str) -> str | None:
        """The stored JSON of one event type (what a compare-and-set expects), or None."""
        raw = await self.redis.hget(self.keys.event_types, name)
        return None if raw is None else str(raw)

    async def get_event_type(self, name: str) -> dict[str, Any] | None:
        raw = await self.redis.hget(self.keys.event_types, name)
        return orjson.loads(raw) if raw else None

    async def event_type_names(self) -> list[str]:
        """The names in the catalog (without their schemas)."""
        return sorted(await self.redis.hkeys(self.keys.event_types))

    async def list_event_types(self) -> list[dict[str, Any]]:
        """The whole catalog, by name."""
        raw = await self.redis.hvals(self.keys.event_types)
        return sorted((orjson.loads(v) for v in raw), key=lambda t: t["name"])
