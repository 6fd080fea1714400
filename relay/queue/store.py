"""The Store: relay's Redis data model, the only code that talks to Redis about it.

Every state change is one script call (``relay/queue/lua/``, each called by exactly one
typed method); reads are pipelined per shard. Key names come from
:mod:`relay.queue.keys`. The Store is made of parts, one module each:

* :mod:`relay.queue.base`: the client, settings, keys and scripts; ``connect``, ``ping``,
  ``now_ms``, wake pub/sub;
* :mod:`relay.queue.transitions`: publish, claim, record, extend, release, reclaim,
  hold, resume, replay, expire;
* :mod:`relay.queue.reads`: deliveries, events, listings;
* :mod:`relay.queue.counts`: stats and counts by status;
* :mod:`relay.queue.eventlist`: events as listed and searched (``GET /v1/events``);
* :mod:`relay.queue.endpoints`: endpoint records and their shared health state
  (admit, settle, breakers);
* :mod:`relay.queue.eventtypes`: the event type catalog;
* :mod:`relay.queue.dashboard`: the dashboard's per-minute series and endpoint health;
* :mod:`relay.queue.facts`: the server's durability settings (``server_facts``);
* :mod:`relay.queue.replays`: reconciliation replay jobs (records, index walk);
* :mod:`relay.queue.auth`: API keys and portal sessions (credentials, API rate limit);
* :mod:`relay.queue.opsbox`: the ops outboxes of operational events;
* :mod:`relay.queue.apps`: the applications of the Svix-compatible API;
* :mod:`relay.queue.requests`: its POSTs' idempotency keys;
* :mod:`relay.queue.moving`: what the archive mover reads and removes;
* :mod:`relay.queue.guards`: idempotency guards of a two-step publish, placement's marker.

Services and entry points use the Store's methods, never its ``redis`` client.
"""

from __future__ import annotations

from collections.abc import Callable

from relay.queue.apps import AppRecords
from relay.queue.auth import AuthRecords
from relay.queue.base import StoreBase, connect
from relay.queue.counts import Counts
from relay.queue.dashboard import Dashboard
from relay.queue.endpoints import EndpointRecords
from relay.queue.eventlist import EventFilter, EventListing
from relay.queue.eventtypes import EventTypeRecords
from relay.queue.facts import ServerFacts
from relay.queue.guards import Guards
from relay.queue.migrate import Migrated, Migration
from relay.queue.moving import ArchiveMoves, Finished
from relay.queue.opsbox import OpsOutbox
from relay.queue.reads import Reads, decode_cursor, encode_cursor
from relay.queue.records import (
    STATUSES,
    Admission,
    Claimed,
    ClaimResult,
    Outcome,
    Settled,
    Swept,
)
from relay.queue.replays import JobWrite, ReplayJobs, Scanned
from relay.queue.requests import RequestRecords
from relay.queue.transitions import Transitions

__all__ = [
    "STATUSES",
    "Admission",
    "ClaimResult",
    "Claimed",
    "EventFilter",
    "Finished",
    "JobWrite",
    "Migrated",
    "Outcome",
    "Scanned",
    "Settled",
    "Store",
    "StoreBase",
    "Swept",
    "connect",
    "decode_cursor",
    "encode_cursor",
]


class Store(
    Transitions,
    Dashboard,  # before Reads, whose subclass it is (it reads headers as Reads does)
    EventListing,  # so is this one
    ArchiveMoves,  # a subclass of Reads too (it reads records and events as Reads does)
    Reads,
    Counts,
    EndpointRecords,
    EventTypeRecords,
    ServerFacts,
    ReplayJobs,
    AuthRecords,
    AppRecords,
    RequestRecords,
    OpsOutbox,
    Guards,
    Migration,
):
    """relay's Redis data model, for one client and one settings object."""

    async def start(self) -> None:
        await super().start()
        await self.placement_since()  # marked before this process publishes anything

    async def replay_dead(
        self,
        *,
        endpoint_id: str | None = None,
        since: int | None = None,
        until: int | None = None,
        on_page: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """Replay every dead delivery (of one endpoint; that died at or after ``since`` ms
        and, with ``until``, before ``until`` ms).

        Walks the dead letters newest first, a page at a time, then replays them in the
        order they died, oldest first (so the dead of an ordered lane rejoin its back in
        their lane's order), one replay script call per 500 and shard. Returns
        ``(replayed, refused)``: refused ones were replayed by someone else meanwhile.
        ``on_page(n)`` reports progress.
        """
        chosen: list[tuple[int, str]] = []
        cursor: str | None = None
        while True:
            rows, cursor = await self.list_deliveries(
                status="dead", endpoint_id=endpoint_id, limit=500, cursor=cursor
            )
            chosen += [
                (r.get("finished_at") or 0, r["id"])
                for r in rows
                if (since is None or (r.get("finished_at") or 0) >= since)
                and (until is None or (r.get("finished_at") or 0) < until)
            ]
            # Unfiltered, the dead index is in order of death: past `since`, nothing counts.
            older = rows and since is not None and (rows[-1].get("finished_at") or 0) < since
            if cursor is None or (endpoint_id is None and older):
                break
        chosen.sort()
        replayed = refused = 0
        for start in range(0, len(chosen), 500):
            page = [i for _, i in chosen[start : start + 500]]
            done = sum(1 for v in (await self.replay(page)).values() if v == "ok")
            replayed += done
            refused += len(page) - done
            if on_page is not None:
                on_page(len(page))
        return replayed, refused
