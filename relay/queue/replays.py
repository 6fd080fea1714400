"""Reconciliation replay jobs in Redis: the job records (``replay_job.lua``), the walk of
a delivery index (``replay_scan.lua``) and the reads a job needs.

A job is one hash under the tag ``{rpl}`` (``Keys.replay_job``), indexed in
``Keys.replay_jobs`` and, while it runs, in ``Keys.replays_running``; every change of it
is one ``replay_job.lua`` call, fenced on the lease of the worker advancing it. The
deliveries themselves are replayed with ``Store.replay`` (``replay.lua``), which only
replays finished ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relay.queue.base import StoreBase
from relay.queue.keys import ShardKeys


@dataclass(frozen=True, slots=True)
class Scanned:
    """One entry of a delivery index met by a replay job's walk."""

    id: str
    created: int
    status: str
    endpoint_id: str
    type: str


@dataclass(frozen=True, slots=True)
class JobWrite:
    """The answer of a ``replay_job.lua`` call: ``ok``, else the job's state and owner."""

    ok: bool
    state: str = ""
    owner: str = ""


class ReplayJobs(StoreBase):
    async def replay_scan(
        self,
        sk: ShardKeys,
        *,
        endpoint_id: str | None,
        since: int,
        until: int,
        cursor: tuple[int, str] | None,
        limit: int,
    ) -> tuple[list[Scanned], bool]:
        """The deliveries of the next ``limit`` entries of the shard's events index (or of
        one endpoint's deliveries) created in ``[since, until]`` after ``cursor`` (score,
        delivery id); True when the range is done."""
        index = sk.endpoint_index(endpoint_id) if endpoint_id else sk.events
        res = await self.scripts.replay_scan(
            keys=[index],
            args=[
                sk.delivery_prefix,
                since,
                until,
                cursor[0] if cursor else "",
                cursor[1] if cursor else "",
                limit,
                "" if endpoint_id else sk.event_prefix,
                sk.event_prefix,
            ],
        )
        flat = res[1:]
        rows = [
            Scanned(flat[i], int(float(flat[i + 1])), flat[i + 2], flat[i + 3], flat[i + 4])
            for i in range(0, len(flat), 5)
        ]
        return rows, bool(int(res[0]))

    async def replay_job(
        self,
        op: str,
        replay_id: str,
        *,
        owner: str = "",
        lease_ms: int = 0,
        fields: Mapping[str, str | int] | None = None,
    ) -> JobWrite:
        """Create, lease, save or cancel a job (``replay_job.lua``; see its header)."""
        pairs: list[Any] = []
        for name, value in (fields or {}).items():
            pairs += [name, value]
        res = await self.scripts.replay_job(
            keys=[
                self.keys.replay_job(replay_id),
                self.keys.replay_jobs,
                self.keys.replays_running,
            ],
            args=[op, replay_id, owner, lease_ms, len(pairs) // 2, *pairs],
        )
        if int(res[0]) == 1:
            return JobWrite(True)
        return JobWrite(False, str(res[1]), str(res[2]))

    async def get_replay_job(self, replay_id: str) -> dict[str, str] | None:
        raw = await self.redis.hgetall(self.keys.replay_job(replay_id))
        return dict(raw) if raw else None

    async def list_replay_jobs(self, limit: int = 50) -> list[dict[str, str]]:
        """The newest jobs first."""
        job_ids = await self.redis.zrevrange(self.keys.replay_jobs, 0, limit - 1)
        if not job_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for j in job_ids:
                pipe.hgetall(self.keys.replay_job(j))
            rows = await pipe.execute()
        return [dict(r) for r in rows if r]

    async def running_replay_jobs(self) -> list[str]:
        return sorted(await self.redis.smembers(self.keys.replays_running))

    async def delivery_statuses(self, delivery_ids: Sequence[str]) -> dict[str, str]:
        """Each delivery's status ("" when it is gone), one round trip. A delivery without a
        hash is pending while it is due (layout v3: none until its first claim)."""
        found = {d: sk for d in delivery_ids if (sk := self.shard_keys_for(d)) is not None}
        out = dict.fromkeys(delivery_ids, "")
        if not found:
            return out
        async with self.redis.pipeline(transaction=False) as pipe:
            for d, sk in found.items():
                pipe.hget(sk.delivery(d), "status")
                pipe.zscore(sk.due, d)
            rows = await pipe.execute()
        for i, d in enumerate(found):
            status, due = rows[2 * i], rows[2 * i + 1]
            out[d] = status or ("pending" if due is not None else "")
        return out
