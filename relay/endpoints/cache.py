"""The API's cache of each app's endpoints, so a publish costs one Redis call, not two;
and the worker's cache of endpoints by id, so a claimed batch costs no read of them.

Correctness first: the cache is used only while this process is subscribed to the
endpoint change channel (``relay:v3:{cfg}:changed``), which ``endpoint_put.lua`` and
``endpoint_delete.lua`` publish on after every write; any message drops the whole cache,
and so does losing the subscription. Writes made through this process's own Store bump
``Store.endpoint_epoch`` around the script call, so an entry filled before or during
one of its own writes is never served after it. Another replica's write reaches this
cache as fast as Redis delivers the pub/sub message (well under a millisecond on a LAN);
entries older than ``MAX_AGE`` are refetched regardless, as a backstop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from relay.queue.store import Store
from relay.queue.subscription import keep_subscribed

MAX_AGE = 30.0
MAX_APPS = 10_000
MAX_IDS = 100_000


class EndpointCache:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._by_app: dict[str, tuple[int, float, list[dict[str, Any]]]] = {}
        # endpoint id -> (epoch, filled at, the endpoint or None: there is none)
        self._by_id: dict[str, tuple[int, float, dict[str, Any] | None]] = {}
        self._subscribed = False
        self._generation = 0  # bumped on every invalidation
        self.hits = 0
        self.misses = 0
        # Other caches of {cfg} data (relay.endpoints.catalog.EventTypeCache) ride on this
        # subscription: each invalidation runs them too.
        self.listeners: list[Callable[[], None]] = []

    @property
    def subscribed(self) -> bool:
        """True while the change channel is subscribed (a cache may serve entries)."""
        return self._subscribed

    def invalidate(self) -> None:
        self._generation += 1
        self._by_app.clear()
        self._by_id.clear()
        for listener in self.listeners:
            listener()

    async def endpoints_for_app(self, app: str) -> list[dict[str, Any]]:
        """The app's endpoints (a shared list: callers must not change it)."""
        epoch, now = self.store.endpoint_epoch, time.monotonic()
        hit = self._by_app.get(app)
        if self._subscribed and hit and hit[0] == epoch and now - hit[1] < MAX_AGE:
            self.hits += 1
            return hit[2]
        self.misses += 1
        generation = self._generation
        endpoints = await self.store.list_endpoints(app)
        unchanged = generation == self._generation and epoch == self.store.endpoint_epoch
        if self._subscribed and unchanged:
            if len(self._by_app) >= MAX_APPS:
                self._by_app.clear()
            self._by_app[app] = (epoch, now, endpoints)
        return endpoints

    async def by_ids(self, endpoint_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The endpoints of these ids that exist, by id (shared dicts: callers must not
        change them), read from Redis only for ids not cached (one HMGET)."""
        epoch, now = self.store.endpoint_epoch, time.monotonic()
        found: dict[str, dict[str, Any]] = {}
        missing: list[str] = []
        for i in dict.fromkeys(endpoint_ids):
            hit = self._by_id.get(i)
            if self._subscribed and hit and hit[0] == epoch and now - hit[1] < MAX_AGE:
                if hit[2] is not None:
                    found[i] = hit[2]
            else:
                missing.append(i)
        if not missing:
            self.hits += 1
            return found
        self.misses += 1
        generation = self._generation
        got = await self.store.get_endpoints(missing)
        found.update(got)
        if (
            self._subscribed
            and generation == self._generation
            and epoch == self.store.endpoint_epoch
        ):
            if len(self._by_id) + len(missing) > MAX_IDS:
                self._by_id.clear()
            for i in missing:
                self._by_id[i] = (epoch, now, got.get(i))
        return found

    async def run(self) -> None:
        """Keep the subscription; every change message (or a lost connection) invalidates."""
        await keep_subscribed(
            self.store,
            [self.store.keys.endpoints_changed],
            lambda _msg: self.invalidate(),
            on_subscribed=self._on_subscribed,
            on_lost=self._on_lost,
            name="endpoint_cache",
        )

    def _on_subscribed(self) -> None:
        self.invalidate()
        self._subscribed = True

    def _on_lost(self) -> None:
        self._subscribed = False
        self.invalidate()
