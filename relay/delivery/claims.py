"""Claiming from one shard: reclaim expired leases when due, claim a batch, read its
endpoints; and what the worker learnt about when each shard has work next.

Each claim also reports the shard's earliest due time and lease expiry, which is all an
idle worker needs to know when to look again (no polling tick).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog

from relay.delivery.stats import Stats
from relay.ops import metrics
from relay.queue.keys import ShardKeys
from relay.queue.store import Claimed, Store
from relay.settings import Settings

log = structlog.get_logger("relay.worker")

Batch = tuple[list[Claimed], dict[str, dict[str, Any]]]  # claims, their endpoints by id
# endpoint ids -> the endpoints that exist, by id (the worker's EndpointCache.by_ids)
Endpoints = Callable[[Iterable[str]], Awaitable[dict[str, dict[str, Any]]]]


class Claims:
    def __init__(
        self, store: Store, settings: Settings, stats: Stats, endpoints: Endpoints | None = None
    ) -> None:
        self.store = store
        self.endpoints = endpoints or store.get_endpoints
        self.settings = settings
        self.stats = stats
        self.shards = store.keys.all_shards()
        self.next_due: dict[int, int | None] = {}
        self.next_lease: dict[int, int | None] = {}
        self.backlog = False  # the last claim left work due now
        # time.monotonic() before the last claim call: its leases run out lease_seconds
        # after it at the latest (the claim loop admits a batch before the next claim)
        self.claim_started = time.monotonic()
        self._lease_ms = int(settings.lease_seconds * 1000)
        self._tokens = itertools.count()
        # Claim tokens: 48 random bits per process, the claim call's number, the item's
        # (``5f1c0a9e2b44:17:3``). Unique per claim, and short: a finished delivery keeps
        # its last one (``recorded``), so its length is Redis memory per delivery; the
        # worker is named in the hash and the attempt log, not in the token.
        self._token_base = os.urandom(6).hex()

    async def claim(self, sk: ShardKeys, free: int) -> Batch | None:
        """Up to ``free`` (and ``claim_batch``) due deliveries of one shard, or None."""
        try:
            lease_at = self.next_lease.get(sk.shard)
            if lease_at is not None and lease_at <= time.time() * 1000:
                back, dead, reclaimed = await self.store.reclaim(sk)
                if reclaimed:
                    self.stats.reclaimed += len(reclaimed)
                    metrics.RECLAIMED.inc(len(reclaimed))
                    log.warning(
                        "lease.reclaimed",
                        shard=sk.shard,
                        pending=back,
                        dead=dead,
                        deliveries=reclaimed[:20],
                    )
            self.claim_started = time.monotonic()
            res = await self.store.claim(
                sk,
                limit=min(free, self.settings.claim_batch),
                lease_ms=self._lease_ms,
                token_prefix=f"{self._token_base}:{next(self._tokens)}",
                worker=self.settings.worker_id,
            )
        except Exception as exc:  # Redis down or restarting: back off, keep running
            log.warning("claim.failed", shard=sk.shard, error=str(exc))
            # Both wake-up times, or a lease expiry seen before the outage (now in the
            # past) makes the idle wait ~0 and the loop spins against a dead Redis.
            retry_at = int(time.time() * 1000) + 500
            self.next_due[sk.shard] = retry_at
            self.next_lease[sk.shard] = retry_at
            return None
        self.next_due[sk.shard] = res.next_due_ms
        self.next_lease[sk.shard] = res.next_lease_ms
        self.backlog = res.next_due_ms is not None and res.next_due_ms <= res.now_ms
        if not res.items:
            return None
        items = res.items
        self.stats.claimed += len(items)
        self.stats.claim_batches += 1
        metrics.CLAIM_BATCH.observe(len(res.items))
        try:
            endpoints = await self.endpoints(c.endpoint_id for c in items)
        except Exception as exc:  # Redis went away after the claim: the leases bring them back
            log.warning("claim.endpoints_failed", shard=sk.shard, error=str(exc))
            self.next_due[sk.shard] = int(time.time() * 1000) + 500
            return None
        # each claim carries its publish span's context (its event's header): no read more
        return items, endpoints

    def nothing_due_soon(self) -> bool:
        now = time.time() * 1000
        for sk in self.shards:
            due, lease = self.next_due.get(sk.shard), self.next_lease.get(sk.shard)
            if (due is not None and due <= now + 50) or lease is not None:
                return False
        return True

    def wake_at(self) -> list[int]:
        """Every due time and lease expiry known, ms."""
        return [t for t in (*self.next_due.values(), *self.next_lease.values()) if t]
