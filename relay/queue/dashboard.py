"""The dashboard's reads (``/v1/ui/*``): cheap by construction, pipelined per shard.

* per-minute outcomes come from the ``succeeded``/``dead``/``deliveries`` sorted sets of
  each shard (score = finish or creation time), one pipelined ``ZCOUNT`` per minute;
* per-endpoint success rates look at the endpoint's newest deliveries only (a bounded
  sample from its index, checked with ``ZMSCORE``), held counts are exact (``ZCARD`` of
  its held sets), and in-flight counts read the ``processing`` set, which is bounded by
  the workers' concurrency.
"""

from __future__ import annotations

from typing import Any

from relay.domain import eventrecord, ids
from relay.queue.reads import Reads


class Dashboard(Reads):
    async def minute_series(self, now_ms: int, minutes: int) -> dict[str, list[int]]:
        """Per-minute counts from the finish-time sets: ``3 * minutes`` ZCOUNTs a shard.

        ``minute_ms`` is the start of each minute, oldest first, the last one holding
        ``now_ms``. A replayed delivery leaves ``succeeded``/``dead``, so it counts in the
        minute of its latest finish only; retries are not counted (no cheap per-minute
        record of them).
        """
        first = (now_ms // 60_000 - (minutes - 1)) * 60_000
        starts = [first + i * 60_000 for i in range(minutes)]
        out = {"succeeded": [0] * minutes, "dead": [0] * minutes, "created": [0] * minutes}
        for sk in self.keys.all_shards():
            async with self.redis.pipeline(transaction=False) as pipe:
                for key in (sk.succeeded, sk.dead, sk.events):
                    for start in starts:
                        pipe.zcount(key, start, f"({start + 60_000}")
                counts = await pipe.execute()
            for k, name in enumerate(("succeeded", "dead", "created")):
                for i in range(minutes):
                    out[name][i] += int(counts[k * minutes + i])
        return {"minute_ms": starts, **out}

    async def endpoint_health(
        self, endpoint_ids: list[str], *, sample: int, processing_cap: int
    ) -> list[dict[str, Any]]:
        """Per endpoint: outcomes among its ``sample`` newest deliveries, its held count,
        and how many of the first ``processing_cap`` claimed deliveries are its."""
        newest: dict[str, list[tuple[float, str, int]]] = {e: [] for e in endpoint_ids}
        in_flight = dict.fromkeys(endpoint_ids, 0)
        held = dict.fromkeys(endpoint_ids, 0)
        for sk in self.keys.all_shards():
            async with self.redis.pipeline(transaction=False) as pipe:
                for ep in endpoint_ids:
                    pipe.zrevrange(sk.endpoint_index(ep), 0, sample - 1, withscores=True)
                    pipe.zcard(sk.held(ep))
                pipe.zrange(sk.processing, 0, processing_cap - 1)
                *per_endpoint, claimed = await pipe.execute()
            for i, ep in enumerate(endpoint_ids):
                members, parked = per_endpoint[2 * i], per_endpoint[2 * i + 1]
                newest[ep] += [(score, member, sk.shard) for member, score in members]
                held[ep] += int(parked)
            if claimed:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for d in claimed:
                        pipe.hget(sk.delivery(d), "endpoint_id")
                    owners = await pipe.execute()
                # a first claim writes no endpoint id: its event's header names it
                unset = [i for i, owner in enumerate(owners) if owner is None]
                named = {i: ids.derived(claimed[i]) for i in unset}
                events = list(dict.fromkeys(n[0] for n in named.values() if n is not None))
                headers = await self._headers(sk, events)
                for i, n in named.items():
                    header = headers.get(n[0]) if n is not None else None
                    if n is not None and header is not None:
                        owners[i] = eventrecord.endpoint_at(header, n[1])
                for owner in owners:
                    if owner in in_flight:
                        in_flight[owner] += 1
        chosen = {ep: sorted(newest[ep], reverse=True)[:sample] for ep in endpoint_ids}
        counts = {ep: {"succeeded": 0, "dead": 0, "pending": 0} for ep in endpoint_ids}
        for sk in self.keys.all_shards():  # one round trip per shard for every endpoint
            asked: list[str] = []
            async with self.redis.pipeline(transaction=False) as pipe:
                for ep in endpoint_ids:
                    members = [m for _, m, s in chosen[ep] if s == sk.shard]
                    if members:
                        asked.append(ep)
                        for key in (sk.succeeded, sk.dead, sk.due):
                            pipe.zmscore(key, members)
                scores = await pipe.execute() if asked else []
            for i, ep in enumerate(asked):
                ok, dead, due = scores[3 * i : 3 * i + 3]
                counts[ep]["succeeded"] += sum(x is not None for x in ok)
                counts[ep]["dead"] += sum(x is not None for x in dead)
                counts[ep]["pending"] += sum(x is not None for x in due)
        out = []
        for ep in endpoint_ids:
            c = counts[ep]
            finished = c["succeeded"] + c["dead"]
            out.append(
                {
                    "endpoint_id": ep,
                    "sample": len(chosen[ep]),
                    **c,
                    "success_rate": round(c["succeeded"] / finished, 4) if finished else None,
                    "held": held[ep],
                    "in_flight": in_flight[ep],
                    "last_created_at": int(chosen[ep][0][0]) if chosen[ep] else None,
                }
            )
        return out
