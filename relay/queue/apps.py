"""Applications of the Svix-compatible API (``Keys.apps``): records in and out of Redis.

An application is a relay app (the name endpoints and events carry) with what the Svix
API keeps about it: ``uid``, ``name``, ``metadata``, ``throttle_rate`` and timestamps.
Creation and changes go through ``app_put.lua`` (create if new, else compare-and-set);
the service around them is :mod:`relay.api.svix.applications`.
"""

from __future__ import annotations

from typing import Any

import orjson

from relay.queue.base import StoreBase


class AppRecords(StoreBase):
    async def put_app(self, record: dict[str, Any], *, expected: str | None = None) -> bool:
        """Create ``record`` (``expected`` None: only if its name is new) or change it
        (only if it still holds ``expected``, the JSON read before). True when written."""
        done = await self.scripts.app_put(
            keys=[self.keys.apps],
            args=[record["app"], orjson.dumps(record), "" if expected is None else expected],
            ack=(self.settings.ack_replicas, self.settings.ack_timeout),
        )
        return bool(int(done))

    async def delete_app(self, app: str) -> bool:
        """Forget one application's record; False when there was none."""
        return bool(await self.redis.hdel(self.keys.apps, app))

    async def get_app_raw(self, app: str) -> str | None:
        """The stored JSON of one application (what a compare-and-set expects), or None."""
        raw = await self.redis.hget(self.keys.apps, app)
        return None if raw is None else str(raw)

    async def list_apps(self) -> list[dict[str, Any]]:
        """Every application, by name."""
        raw = await self.redis.hvals(self.keys.apps)
        return sorted((orjson.loads(v) for v in raw), key=lambda a: a["app"])
