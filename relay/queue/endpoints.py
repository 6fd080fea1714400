"""Endpoint records (``{cfg}``) and each endpoint's shared health state (``{ep_X}``).

The typed wrappers of ``endpoint_put.lua``, ``endpoint_delete.lua``,
``endpoints_for_app.lua``, ``admit.lua`` and ``settle.lua``, and the plain reads and
writes of the same keys. The policy (thresholds, bursts, what an operator's re-enable
forgets) is :mod:`relay.endpoints.health`'s; this module only moves it in and out of
Redis.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import orjson

from relay.domain import endpointstats, ids
from relay.queue.base import StoreBase
from relay.queue.records import Admission, Settled

# How long a deleted endpoint's tombstone lives: far past the last send in flight
# (RELAY_HTTP_TIMEOUT, a lease) that could still settle.
TOMBSTONE_MS = 86_400_000


class EndpointRecords(StoreBase):
    # ------------------------------------------------------------------ records

    @contextlib.contextmanager
    def _endpoint_write(self) -> Iterator[None]:
        """Bump ``endpoint_epoch`` before and after a write: a cache fill that started
        before it, or overlapped it, must not be kept."""
        self.endpoint_epoch += 1
        try:
            yield
        finally:
            self.endpoint_epoch += 1

    async def _endpoint_put(
        self,
        endpoint: dict[str, Any],
        *,
        old_app: str | None = None,
        expected: str | None = None,
        confirm: bool = True,
    ) -> bool:
        """Write an endpoint and its app index (``endpoint_put.lua``); with ``expected``
        (the JSON read before) only if it still holds that. True when written.
        ``confirm``: wait for ``RELAY_ACK_REPLICAS`` replicas (a client's write)."""
        app = self.keys.app(endpoint["app"])
        keys = [self.keys.endpoints, app, self.keys.app(old_app) if old_app is not None else app]
        keys += [self.keys.ops, self.keys.placement]
        args: list[Any] = [endpoint["id"], orjson.dumps(endpoint), self.keys.endpoints_changed]
        args += [expected if expected is not None else "", ids.ops_entry_id()]
        with self._endpoint_write():
            ack = (self.settings.ack_replicas if confirm else 0, self.settings.ack_timeout)
            return bool(int(await self.scripts.endpoint_put(keys=keys, args=args, ack=ack)))

    async def put_endpoint(self, endpoint: dict[str, Any]) -> None:
        """Create (or overwrite) an endpoint; changes go through :meth:`update_endpoint`."""
        await self._endpoint_put(endpoint)

    async def update_endpoint(
        self,
        endpoint_id: str,
        change: Callable[[dict[str, Any]], dict[str, Any] | None],
        *,
        confirm: bool = True,
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Read, ``change``, compare-and-set; retried when another writer got in between.
        ``confirm=False``: a worker's write (auto-disable), which waits for no replica.

        ``change`` gets a copy and returns the new endpoint (or None to write nothing).
        Returns ``(before, after)``, or None when the endpoint does not exist.
        """
        for _ in range(20):
            raw = await self.redis.hget(self.keys.endpoints, endpoint_id)
            if raw is None:
                return None
            before = orjson.loads(raw)
            after = change(orjson.loads(raw))
            if after is None:
                return before, before
            if await self._endpoint_put(
                after, old_app=before["app"], expected=raw, confirm=confirm
            ):
                return before, after
        raise RuntimeError(f"endpoint {endpoint_id} kept changing; gave up after 20 tries")

    async def get_endpoint(self, endpoint_id: str) -> dict[str, Any] | None:
        raw = await self.redis.hget(self.keys.endpoints, endpoint_id)
        return orjson.loads(raw) if raw else None

    async def get_endpoints(self, endpoint_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        wanted = list(dict.fromkeys(endpoint_ids))
        if not wanted:
            return {}
        values = await self.redis.hmget(self.keys.endpoints, wanted)
        return {i: orjson.loads(v) for i, v in zip(wanted, values, strict=True) if v}

    async def list_endpoints(self, app: str | None = None) -> list[dict[str, Any]]:
        """Every endpoint (of one app: ``endpoints_for_app.lua``, one round trip), by id."""
        if app is not None:
            raw = await self.scripts.endpoints_for_app(
                keys=[self.keys.endpoints, self.keys.app(app)]
            )
        else:
            raw = await self.redis.hvals(self.keys.endpoints)
        return sorted((orjson.loads(v) for v in raw), key=lambda e: e["id"])

    async def endpoint_count_and_ids(self, cap: int) -> tuple[int, list[str]]:
        """How many endpoints there are, and the ids of at most ``cap`` of them (sorted):
        every id when there are no more than ``cap``, else the first ``cap`` HSCAN gives."""
        key = self.keys.endpoints
        count = int(await self.redis.hlen(key))
        if count <= cap:
            return count, sorted(await self.redis.hkeys(key))
        # Too many to list: take the first `cap` that HSCAN hands out (HSCAN may repeat a
        # field, hence the set).
        ids: set[str] = set()
        async for field, _ in self.redis.hscan_iter(key, count=cap):
            ids.add(field)
            if len(ids) >= cap:
                break
        return count, sorted(ids)

    async def delete_endpoint(self, endpoint: dict[str, Any]) -> bool:
        """Delete an endpoint and its app index entry (``endpoint_delete.lua``)."""
        with self._endpoint_write():
            done = await self.scripts.endpoint_delete(
                ack=(self.settings.ack_replicas, self.settings.ack_timeout),
                keys=[self.keys.endpoints, self.keys.app(endpoint["app"])],
                args=[endpoint["id"], self.keys.endpoints_changed],
            )
        return bool(done)

    # ------------------------------------------------------------------ shared health state

    async def delete_endpoint_state(self, endpoint_id: str) -> None:
        """Drop a deleted endpoint's breaker, rate and in-flight keys and leave its
        tombstone, so a late settle writes nothing (``endpoint_forget.lua``)."""
        ek = self.keys.endpoint_state(endpoint_id)
        await self.scripts.endpoint_forget(
            keys=[ek.breaker, ek.rate, ek.inflight, ek.ops, ek.deleted], args=[TOMBSTONE_MS]
        )

    async def admit(
        self,
        endpoint_id: str,
        tokens: Sequence[str],
        *,
        rate: float,
        burst: int,
        max_in_flight: int,
        slot_hold_ms: int,
        spread_ms: int,
    ) -> Admission:
        """Which of these claims may be sent now, for all workers together (``admit.lua``):
        breaker, then in-flight cap (0: none), then rate (requests/s, 0: none)."""
        ek = self.keys.endpoint_state(endpoint_id)
        res = await self.scripts.admit(
            keys=[ek.breaker, ek.rate, ek.inflight],
            args=[rate, burst, max_in_flight, slot_hold_ms, spread_ms, len(tokens), *tokens],
        )
        return Admission(res[0], [int(float(x)) for x in res[1:]])

    async def settle(
        self,
        endpoint_id: str,
        results: Sequence[tuple[str, str] | tuple[str, str, str]],
        *,
        threshold: int,
        cooldown_ms: int,
        cooldown_max_ms: int,
        at_ms: int | None = None,
    ) -> Settled:
        """Count results in the breaker and free their slots (``settle.lua``), and add
        their attempts to the endpoint's counters of the minute of ``at_ms`` (now).
        ``results``: (claim token, "1" success | "0" failure | "-" neutral[, what the
        attempt counts: ``endpointstats.stat_of``, "" or absent for nothing])."""
        ek = self.keys.endpoint_state(endpoint_id)
        at = int(time.time() * 1000) if at_ms is None else at_ms
        args: list[Any] = [threshold, cooldown_ms, cooldown_max_ms, len(results)]
        for token, verdict, *_ in results:
            args += [token, verdict]
        adds = endpointstats.increments(x[2] for x in results if len(x) > 2)
        args += [ids.ops_entry_id(), endpoint_id, f"{endpointstats.minute_in_hour(at)}:"]
        args += [endpointstats.RETAIN_MS, len(adds), *(x for kv in adds.items() for x in kv)]
        counters = self.keys.endpoint_stats(endpoint_id, str(endpointstats.hour_of(at)))
        keys = [ek.breaker, ek.inflight, ek.ops, ek.deleted, counters]
        r = await self.scripts.settle(keys=keys, args=args)
        return Settled(r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5]))

    async def breaker_states(self, endpoint_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """Each endpoint's raw breaker hash (empty when it has none), one round trip."""
        if not endpoint_ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for e in endpoint_ids:
                pipe.hgetall(self.keys.endpoint_state(e).breaker)
            rows = await pipe.execute()
        return dict(zip(endpoint_ids, rows, strict=True))

    async def pacing_states(
        self, endpoint_ids: Sequence[str], now_ms: int
    ) -> dict[str, tuple[dict[str, str], int, int]]:
        """Per endpoint: its raw breaker hash, its rate limit's theoretical arrival time
        (ms, 0 when none) and its live in-flight slots (expiring after ``now_ms``)."""
        if not endpoint_ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for e in endpoint_ids:
                ek = self.keys.endpoint_state(e)
                pipe.hgetall(ek.breaker)
                pipe.get(ek.rate)
                pipe.zcount(ek.inflight, f"({now_ms}", "+inf")
            rows = await pipe.execute()
        return {
            e: (rows[3 * i], int(float(rows[3 * i + 1] or 0)), int(rows[3 * i + 2]))
            for i, e in enumerate(endpoint_ids)
        }

    async def endpoint_counters(
        self, endpoint_id: str, hours: Sequence[int]
    ) -> dict[int, dict[str, str]]:
        """The endpoint's attempt counters of each of ``hours`` (empty: none kept)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for hour in hours:
                pipe.hgetall(self.keys.endpoint_stats(endpoint_id, str(hour)))
            rows = await pipe.execute()
        return dict(zip(hours, rows, strict=True))

    async def reset_failing(self, endpoint_id: str) -> None:
        """Forget when the endpoint's failure streak began (its ``failing_since``)."""
        await self.redis.hdel(self.keys.endpoint_state(endpoint_id).breaker, "failing_since")
