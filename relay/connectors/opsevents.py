"""The ops relay: operational events from the ops outboxes into the ops app.

The script that makes a transition appends its event to an outbox in its own hash slot
(:mod:`relay.queue.opsbox`): ``settle.lua`` (breaker opened or closed) under the
endpoint's ``{ep_X}``, ``endpoint_put.lua`` (enabled changed) under ``{cfg}``, and
``ops_cut.lua`` (dead-letter tallies that ``record.lua`` and ``reclaim.lua`` keep) under
each shard's ``{sN}``. An event cannot be published from those scripts themselves (the
events and deliveries live in the shards' slots), so every worker runs this relay
beside its sweeper: it publishes each entry through the ordinary :class:`Publisher`,
with an Idempotency-Key derived from the entry's id, and then removes it. A relay that
dies between the publish and the removal, or two relays taking the same entry, publish
the same event again and get the first answer: one event per transition, with ordinary
deliveries (signed, retried) to the ops app's endpoints.

Which outboxes: the ``{cfg}`` and shard outboxes every tick; an endpoint's when this
worker's settle reported an entry (:meth:`OpsRelay.poke`), and every endpoint's once per
``RELAY_SWEEP_INTERVAL`` (an entry whose worker died before poking).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import orjson
import structlog

from relay.domain import opsevents
from relay.domain.schema import EventIn
from relay.publishing import IdempotencyKeyReused, Publisher, PublishError
from relay.queue.store import Store

log = structlog.get_logger("relay.ops_events")

BATCH = 50


class OpsRelay:
    def __init__(self, store: Store, publisher: Publisher | None = None) -> None:
        self.store = store
        self.settings = store.settings
        self.publisher = publisher or Publisher(store, relay_events=True)
        self.app = self.settings.ops_app
        self.window_ms = int(self.settings.ops_dead_window * 1000)
        self.tick = max(0.05, min(1.0, self.settings.ops_dead_window / 4))
        self._dirty: set[str] = set()
        self._poked = asyncio.Event()
        self.published = 0  # entries this relay published (first time or again)

    def poke(self, endpoint_id: str) -> None:
        """A settle in this process appended to ``endpoint_id``'s outbox: drain it soon."""
        self._dirty.add(endpoint_id)
        self._poked.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set: every tick, on a poke, and a full pass per sweep.
        Waits with ``asyncio.wait`` on the events (never ``wait_for``, which on Python
        3.11 can swallow a cancellation that lands as its wait ends)."""
        next_full = 0.0
        while not stop.is_set():
            full = time.monotonic() >= next_full
            try:
                await self.once(full=full)
                if full:
                    next_full = time.monotonic() + self.settings.sweep_interval * random.uniform(
                        0.5, 1.0
                    )
            except Exception as exc:  # Redis away: the entries wait for the next tick
                log.warning("ops_events.relay_failed", error=str(exc) or type(exc).__name__)
            waiters = [
                asyncio.ensure_future(stop.wait()),
                asyncio.ensure_future(self._poked.wait()),
            ]
            try:
                await asyncio.wait(waiters, timeout=self.tick, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
            self._poked.clear()

    async def once(self, *, full: bool = False) -> int:
        """One pass: cut ripe dead-letter tallies, then drain the outboxes. ``full``:
        every endpoint's outbox too. Returns the entries published."""
        keys = self.store.keys
        shards = keys.all_shards()
        for sk in shards:
            await self.store.ops_cut(sk, self.window_ms)
        outboxes = [keys.ops, *(sk.ops for sk in shards)]
        endpoints, self._dirty = self._dirty, set()
        if full:
            everyone = [e["id"] for e in await self.store.list_endpoints()]
            boxes = [keys.endpoint_state(e).ops for e in everyone]
            lengths = await self.store.ops_lengths(boxes)
            endpoints |= {e for e, n in zip(everyone, lengths, strict=True) if n}
        outboxes += [keys.endpoint_state(e).ops for e in sorted(endpoints)]
        done = 0
        for outbox in outboxes:
            done += await self.drain(outbox)
        return done

    async def drain(self, outbox: str) -> int:
        """Publish and remove the entries of one outbox, oldest first."""
        done = 0
        while True:
            entries = await self.store.ops_peek(outbox, BATCH)
            for raw in entries:
                await self._publish(raw)
                await self.store.ops_remove(outbox, raw)
                done += 1
            if len(entries) < BATCH:
                return done

    async def _publish(self, raw: str) -> None:
        entry: dict[str, Any] = orjson.loads(raw)
        endpoint = None
        if entry.get("endpoint_id"):
            endpoint = await self.store.get_endpoint(entry["endpoint_id"])
        if entry["type"] == "delivery.dead" and (endpoint or {}).get("app") == self.app:
            # the ops app's own dead letters: reporting them to the ops app would feed
            # its failing endpoint an endless trickle of summaries about itself
            log.info("ops_events.own_dead_dropped", count=entry.get("count"))
            return
        event = EventIn(
            type=entry["type"], payload=opsevents.payload_of(entry, endpoint), app=self.app
        )
        try:
            published = await self.publisher.publish(
                event, idempotency_key=opsevents.idempotency_key(entry)
            )
        except IdempotencyKeyReused:
            return  # published before, with the endpoint's app as it was then
        except PublishError as exc:  # cannot happen for these small payloads; never loop
            log.error("ops_events.refused", type=entry["type"], error=str(exc))
            return
        self.published += 1
        log.info(
            "ops_events.published",
            type=entry["type"],
            event_id=published.answer["id"],
            created=published.created,
        )

    async def archive_behind(self, backlog: int, lag: float) -> None:
        """Publish ``archive.behind``: finished deliveries waiting to move to the archive
        passed ``RELAY_ARCHIVE_BACKLOG_ALERT`` (at most one event per hour)."""
        now = time.time()
        entry = {
            "id": f"archive.behind:{int(now // 3600)}",
            "type": "archive.behind",
            "at": int(now * 1000),
            "backlog": backlog,
            "lag_seconds": lag,
            "threshold": self.store.settings.archive_backlog_alert,
        }
        await self._publish(orjson.dumps(entry).decode())
