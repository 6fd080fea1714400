"""The event type catalog as a service: create, change, delete, strict subscriptions, and
the API's cache of catalog entries.

* ``Catalog`` writes through the Store (a create refuses an existing name; a change is a
  compare-and-set, retried), checks every schema when it is written, refuses to delete a
  type that endpoints subscribe to by name, and in strict mode
  (``RELAY_EVENT_TYPES_STRICT=1``) holds endpoint subscriptions to the catalog.
* ``EventTypeCache``: the publish path looks a type up here, so a publish costs no Redis
  call for it; an entry holds the schema serialized, compiled by whichever process
  judges the payload (a sandbox's evaluator keeps its compiled validators). It rides on
  the endpoint cache's subscription to ``relay:v3:{cfg}:changed`` (one subscription,
  one mechanism): every message there,
  an endpoint's or an event type's, drops it; it is used only while that subscription
  holds; writes made through this process bump ``Store.endpoint_epoch``, so an entry
  filled before or during one of them is not served after it. Unknown names are cached
  too (as unknown), so publishing types outside the catalog stays as cheap.
* :func:`lookup` is the uncached read the other publishers (the outbox connector) use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from relay.domain import matching
from relay.domain.eventtypes import (
    EventTypeIn,
    SchemaInvalid,
    Validator,
    check_schema,
    compile_schema,
    event_type_record,
)
from relay.endpoints.cache import EndpointCache
from relay.queue.store import Store

MAX_AGE = 30.0
MAX_ENTRIES = 10_000
# Checking a schema near the size limits is long CPU work (the metaschema check most of
# it): one thread does it, so the event loop keeps answering, and concurrent writes queue
# for that thread instead of sharing the process's CPU among them.
_CHECKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="relay-schema-check")

__all__ = ["Catalog", "EventTypeCache", "Known", "SchemaInvalid", "lookup"]


class EventTypeExists(Exception):
    """POST of a name already in the catalog."""


class EventTypeInUse(Exception):
    """DELETE of a type that endpoints subscribe to by name."""

    def __init__(self, name: str, endpoint_ids: list[str]) -> None:
        shown = ", ".join(endpoint_ids[:10]) + (" ..." if len(endpoint_ids) > 10 else "")
        super().__init__(
            f"endpoints subscribe to {name}: {shown}; change their event_types first, "
            "or mark the type deprecated instead"
        )
        self.endpoint_ids = endpoint_ids


class UnknownEventTypes(ValueError):
    """Strict mode: endpoint subscriptions that name no type of the catalog."""

    def __init__(self, patterns: list[str]) -> None:
        super().__init__(
            "RELAY_EVENT_TYPES_STRICT=1: not in the event type catalog: "
            + ", ".join(patterns[:10])
            + " (a pattern such as order.* must match at least one known type)"
        )
        self.patterns = patterns


@dataclass(frozen=True, slots=True)
class Known:
    """A type of the catalog, ready for the publish path."""

    record: dict[str, Any]
    # the schema serialized, what the publish path hands its judge (None: any payload)
    schema_json: bytes | None = field(init=False, default=None)
    _validator: Validator | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.record.get("schema") is not None:
            object.__setattr__(self, "schema_json", orjson.dumps(self.record["schema"]))

    @property
    def validator(self) -> Validator | None:
        """The schema compiled, on first use: the publish path never asks (the process
        that judges the payload compiles ``schema_json`` itself)."""
        if self._validator is None and self.schema_json is not None:
            object.__setattr__(self, "_validator", compile_schema(self.record["schema"]))
        return self._validator

    @property
    def deprecated(self) -> bool:
        return bool(self.record.get("deprecated"))


def _known(record: dict[str, Any] | None) -> Known | None:
    if record is None:
        return None
    return Known(record)


async def lookup(store: Store, name: str) -> Known | None:
    """The type ``name`` from Redis (no cache)."""
    return _known(await store.get_event_type(name))


def unknown_patterns(patterns: Iterable[str], names: Iterable[str]) -> list[str]:
    """The subscription patterns that match no known type name (``*`` always passes:
    it means every type, and in strict mode those are the catalog's)."""
    known = list(names)
    return [p for p in patterns if p != "*" and not any(matching.matches([p], n) for n in known)]


async def _check(schema: Any) -> None:
    await asyncio.get_running_loop().run_in_executor(_CHECKER, check_schema, schema)


class Catalog:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def create(self, fields: EventTypeIn) -> dict[str, Any]:
        """Add a type; raises :class:`SchemaInvalid` or :class:`EventTypeExists`."""
        if fields.schema_ is not None:
            await _check(fields.schema_)
        record = event_type_record(fields)
        if not await self.store.put_event_type(record):
            raise EventTypeExists(f"event type {fields.name} already exists")
        return record

    async def update(self, name: str, changes: Mapping[str, Any]) -> dict[str, Any] | None:
        """Apply validated changes (``schema`` checked first); None when no such type."""
        if changes.get("schema") is not None:
            await _check(changes["schema"])
        for _ in range(20):
            raw = await self.store.get_event_type_raw(name)
            if raw is None:
                return None
            record = {**orjson.loads(raw), **changes, "updated_at": int(time.time() * 1000)}
            if await self.store.put_event_type(record, expected=raw):
                return record
        raise RuntimeError(f"event type {name} kept changing; gave up after 20 tries")

    async def delete(self, name: str) -> bool:
        """Remove a type; False when there was none. Raises :class:`EventTypeInUse` when an
        endpoint subscribes to it by name (wildcards do not hold it: they match others).
        The check reads the endpoints first: an endpoint subscribing in the same instant
        is not seen (an admin race, not a delivery one: that endpoint simply gets no
        events of the type in strict mode, and uncatalogued ones otherwise)."""
        users = [e["id"] for e in await self.store.list_endpoints() if name in e["event_types"]]
        if users:
            raise EventTypeInUse(name, users)
        return await self.store.delete_event_type(name)

    async def check_subscriptions(self, patterns: Iterable[str]) -> None:
        """Strict mode only: raise :class:`UnknownEventTypes` for patterns that match no
        type of the catalog (deprecated types count: they are still accepted)."""
        if not self.store.settings.event_types_strict:
            return
        wanted = [p for p in patterns if p != "*"]
        if not wanted:
            return
        bad = unknown_patterns(wanted, await self.store.event_type_names())
        if bad:
            raise UnknownEventTypes(bad)


class EventTypeCache:
    """Compiled catalog entries by name, for the API's publish path (see the module doc)."""

    def __init__(self, store: Store, endpoint_cache: EndpointCache) -> None:
        self.store = store
        self._subscription = endpoint_cache
        self._entries: dict[str, tuple[int, float, Known | None]] = {}
        self._generation = 0
        self.hits = 0
        self.misses = 0
        endpoint_cache.listeners.append(self.invalidate)

    def invalidate(self) -> None:
        self._generation += 1
        self._entries.clear()

    async def lookup(self, name: str) -> Known | None:
        epoch, now = self.store.endpoint_epoch, time.monotonic()
        subscribed = self._subscription.subscribed
        hit = self._entries.get(name)
        if subscribed and hit and hit[0] == epoch and now - hit[1] < MAX_AGE:
            self.hits += 1
            return hit[2]
        self.misses += 1
        generation = self._generation
        known = await lookup(self.store, name)
        unchanged = generation == self._generation and epoch == self.store.endpoint_epoch
        if subscribed and self._subscription.subscribed and unchanged:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[name] = (epoch, now, known)
        return known
