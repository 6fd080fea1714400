"""Idempotency guards on a shard of their own: the records a two-step publish keeps.

An ``Idempotency-Key``'s guard (``ShardKeys.idempotency``) lives on the key's shard; an
ordered event lives on its ordering key's. When the two differ, the publish takes the
guard first (``reserve.lua``), then writes the event with ``publish.lua`` guarded by
the event shard's copy (``ShardKeys.published``). relay.idempotency orders the steps;
this module holds their records and the marker of when placement by key began.
"""

from __future__ import annotations

from relay.queue.base import StoreBase


class Guards(StoreBase):
    async def reserve(self, shard: int, app: str, key: str, value: bytes | str) -> str | None:
        """Take ``key``'s guard on ``shard`` with ``value`` (``reserve.lua``); None when
        taken by this call, else the stored value. Confirmed by ``RELAY_ACK_REPLICAS``
        replicas, on the hit path too (the script then writes the key again)."""
        res = await self.scripts.reserve(
            keys=[self.keys.shard(shard).idempotency(app, key)],
            args=[value, int(self.settings.idempotency_ttl * 1000)],
            ack=(self.settings.ack_replicas, self.settings.ack_timeout),
        )
        return None if int(res[0]) == 1 else str(res[1])

    async def replace_idempotency(self, shard: int, app: str, key: str, value: str) -> None:
        """Overwrite ``key``'s guard on ``shard`` (its TTL kept) with the record that won
        on the app's shard: the first answer there is the one every request gets."""
        await self.redis.set(
            self.keys.shard(shard).idempotency(app, key), value, xx=True, keepttl=True
        )

    async def placement_since(self) -> int:
        """When placement by key began (ms): 0 when the first endpoint was written by
        this layout (``endpoint_put.lua`` marks it) or there is none yet; else marked
        now by the first caller (a relay that placed keyed events by app ran here)."""
        raw = await self.redis.get(self.keys.placement)
        if raw is None:
            if not await self.redis.exists(self.keys.endpoints):
                return 0  # nothing written yet: the first endpoint put marks it
            await self.redis.set(self.keys.placement, await self.now_ms(), nx=True)
            raw = await self.redis.get(self.keys.placement)
        return int(raw or 0)
