"""The ops outboxes: operational events waiting to be published into the ops app.

An outbox is a list per hash tag (``Keys.ops`` under ``{cfg}``, ``EndpointKeys.ops``
under ``{ep_X}``, ``ShardKeys.ops`` under ``{sN}``), appended to only by the script that
makes a transition (``endpoint_put.lua``, ``settle.lua``, ``ops_cut.lua``), so an entry
exists exactly when its transition happened. Entries are JSON objects with an ``id``;
:mod:`relay.connectors.opsevents` publishes each (keyed on that id) and then removes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from relay.domain import ids
from relay.queue.base import StoreBase
from relay.queue.keys import ShardKeys


class OpsOutbox(StoreBase):
    async def ops_cut(self, sk: ShardKeys, window_ms: int, limit: int = 100) -> int:
        """Move the shard's ripe dead-letter tallies into its outbox (``ops_cut.lua``)."""
        n = await self.scripts.ops_cut(
            keys=[sk.dead_tally_index, sk.ops],
            args=[sk.dead_tally_prefix, window_ms, ids.ops_entry_id(), limit],
        )
        return int(n)

    async def ops_peek(self, outbox: str, limit: int) -> list[str]:
        """The oldest ``limit`` entries of one outbox (raw JSON), left in place."""
        return list(await self.redis.lrange(outbox, 0, limit - 1))

    async def ops_remove(self, outbox: str, entry: str) -> None:
        """Remove one published entry (a no-op when another relay removed it first)."""
        await self.redis.lrem(outbox, 1, entry)

    async def ops_lengths(self, outboxes: Sequence[str]) -> list[int]:
        """How many entries each outbox holds, in one pipelined round trip."""
        if not outboxes:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in outboxes:
                pipe.llen(key)
            return [int(n) for n in await pipe.execute()]
