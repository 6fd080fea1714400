"""Redis transitions and reads: the only module that talks to Redis about deliveries.

Every state change is one script call (see ``lua/``); reads are pipelined per shard.
Key names come from :mod:`relay.queue.keys`.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from relay.domain import ids, matching
from relay.queue.keys import Keys, ShardKeys
from relay.queue.scripts import Scripts
from relay.settings import Settings

STATUSES = ("pending", "delivering", "succeeded", "dead")
_INT_FIELDS = (
    "attempts",
    "max_attempts",
    "created_at",
    "updated_at",
    "next_attempt_at",
    "last_attempt_at",
    "finished_at",
    "lease_until",
    "log_n",
    "replays",
    "replayed_at",
)


def connect(settings: Settings) -> Any:
    """An asyncio Redis (or Redis Cluster) client for ``settings.redis_url``."""
    if settings.redis_cluster:
        # reinitialize_steps=0: a MOVED patches that slot in the client's map. The default
        # (5) closes every node connection on each 5th MOVED, under the commands other
        # tasks have in flight on them (redis-py 8.1: AttributeError 'writelines' there),
        # and a slot being migrated sends MOVED often (ASKING and the command it covers
        # may leave on different pooled connections). max_connections is per node, and
        # past it a command fails at once (MaxConnectionsError; no blocking pool here):
        # room for a busy API replica, opened only as needed.
        return RedisCluster.from_url(
            settings.redis_url, decode_responses=True, reinitialize_steps=0, max_connections=1024
        )
    # A blocking pool: past max_connections a command waits for a free connection
    # instead of failing with MaxConnectionsError (which made busy API replicas 500).
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url,
        decode_responses=True,
        health_check_interval=30,
        max_connections=256,
        timeout=20,
    )
    return aioredis.Redis.from_pool(pool)


@dataclass(frozen=True, slots=True)
class Claimed:
    """One delivery taken by a claim: what a worker needs to send it."""

    id: str
    token: str
    attempts: int
    max_attempts: int
    event_id: str
    endpoint_id: str
    body: str


@dataclass(frozen=True, slots=True)
class ClaimResult:
    now_ms: int
    next_due_ms: int | None
    next_lease_ms: int | None
    items: list[Claimed]


@dataclass(frozen=True, slots=True)
class Outcome:
    """A finished send, ready for ``record``."""

    id: str
    token: str
    outcome: str  # "succeeded" | "retry" | "dead"
    delay_ms: int
    status_code: int | None
    error: str
    entry: bytes  # attempt log entry, JSON object without "n"


def _num(value: str | int | None) -> int | None:
    """An integer field or script result; None for absent, empty or the -1 sentinel."""
    if value is None or value == "":
        return None
    number = int(float(value))
    return None if number == -1 else number


def encode_cursor(score: float, member: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([score, member])).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """Raises ValueError on anything that is not a cursor relay made."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, member = orjson.loads(raw)
        return float(score), str(member)
    except Exception as exc:  # binascii.Error, orjson.JSONDecodeError, unpacking
        raise ValueError("cursor is not valid") from exc


class Store:
    """relay's Redis data model, for one client and one settings object."""

    def __init__(self, client: Any, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix, settings.shards)
        self.scripts = Scripts(client)
        # bumped by every endpoint write made through this Store, so a cache in the same
        # process never serves what was there before its own write
        self.endpoint_epoch = 0

    async def start(self) -> None:
        await self.scripts.load()

    async def close(self) -> None:
        await self.redis.aclose()

    def wake_pubsub(self, attempt: int = 0) -> Any:
        """A pub/sub connection for the shards' wake channels (``attempt``: reconnects so far).

        On a cluster the scripts' PUBLISH reaches every node, so one node's connection
        hears all shards; each reconnect takes the next node the client knows, so a node
        that failed is not retried first.
        """
        if not isinstance(self.redis, RedisCluster):
            return self.redis.pubsub()
        nodes = self.redis.get_nodes()
        return self.redis.pubsub(node=nodes[attempt % len(nodes)])

    def shard_keys_for(self, ident: str) -> ShardKeys | None:
        shard = ids.shard_of(ident)
        if shard is None or shard >= self.settings.shards:
            return None
        return self.keys.shard(shard)

    # ------------------------------------------------------------------ endpoints

    @contextlib.contextmanager
    def _endpoint_write(self) -> Iterator[None]:
        """Bump ``endpoint_epoch`` before and after a write: a cache fill that started
        before it, or overlapped it, must not be kept."""
        self.endpoint_epoch += 1
        try:
            yield
        finally:
            self.endpoint_epoch += 1

    async def put_endpoint(self, endpoint: dict[str, Any]) -> None:
        """Create (or overwrite) an endpoint; changes go through :meth:`update_endpoint`."""
        app = self.keys.app(endpoint["app"])
        with self._endpoint_write():
            await self.scripts.endpoint_put(
                keys=[self.keys.endpoints, app, app],
                args=[endpoint["id"], orjson.dumps(endpoint), self.keys.endpoints_changed],
            )

    async def delete_endpoint_state(self, endpoint_id: str) -> None:
        """Drop an endpoint's breaker, rate and in-flight keys (one slot: its own tag)."""
        ek = self.keys.endpoint_state(endpoint_id)
        await self.redis.delete(ek.breaker, ek.rate, ek.inflight)

    async def update_endpoint(
        self, endpoint_id: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Read, ``change``, compare-and-set; retried when another writer got in between.

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
            keys = [self.keys.endpoints, self.keys.app(after["app"]), self.keys.app(before["app"])]
            args = [endpoint_id, orjson.dumps(after), self.keys.endpoints_changed, raw]
            with self._endpoint_write():
                written = int(await self.scripts.endpoint_put(keys=keys, args=args))
            if written:
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
        if app is not None:
            raw = await self.scripts.endpoints_for_app(
                keys=[self.keys.endpoints, self.keys.app(app)]
            )
        else:
            raw = await self.redis.hvals(self.keys.endpoints)
        return sorted((orjson.loads(v) for v in raw), key=lambda e: e["id"])

    async def delete_endpoint(self, endpoint: dict[str, Any]) -> bool:
        with self._endpoint_write():
            done = await self.scripts.endpoint_delete(
                keys=[self.keys.endpoints, self.keys.app(endpoint["app"])],
                args=[endpoint["id"], self.keys.endpoints_changed],
            )
        return bool(done)

    # ------------------------------------------------------------------ publish

    async def publish(
        self,
        *,
        shard: int,
        event_id: str,
        event_type: str,
        app: str,
        body: bytes,
        created_ms: int,
        deliveries: Sequence[tuple[str, str]],
        idempotency: tuple[str, bytes] | None = None,
    ) -> str | None:
        """Store an event with its deliveries in one script.

        ``idempotency`` is ``(key, value)``; when the key is already taken nothing is
        written and the stored value is returned instead of None.
        """
        sk = self.keys.shard(shard)
        idem_key = sk.idempotency(app, idempotency[0]) if idempotency else sk.base + "idem:-"
        keys = [idem_key, sk.event(event_id), sk.events, sk.due, sk.deliveries]
        args: list[Any] = [
            "1" if idempotency else "0",
            idempotency[1] if idempotency else "",
            int(self.settings.idempotency_ttl * 1000),
            event_id,
            event_type,
            app,
            body,
            created_ms,
            self.settings.max_attempts,
            sk.wake,
            orjson.dumps([{"id": d, "endpoint_id": e} for d, e in deliveries]),
        ]
        for delivery_id, endpoint_id in deliveries:
            keys += [sk.delivery(delivery_id), sk.endpoint_index(endpoint_id)]
            args += [delivery_id, endpoint_id]
        args.append(int(self.settings.retention * 1000))  # TTL of an event with no delivery
        res = await self.scripts.publish(keys=keys, args=args)
        return None if int(res[0]) == 1 else res[1]

    # ------------------------------------------------------------------ worker transitions

    async def claim(
        self, sk: ShardKeys, *, limit: int, lease_ms: int, token_prefix: str, worker: str
    ) -> ClaimResult:
        res = await self.scripts.claim(
            keys=[sk.due, sk.processing],
            args=[sk.base, limit, lease_ms, token_prefix, worker],
        )
        n = int(res[3])
        items = []
        for i in range(n):
            g = res[4 + 7 * i : 11 + 7 * i]
            items.append(Claimed(g[0], g[1], int(g[2]), int(g[3]), g[4], g[5], g[6]))
        return ClaimResult(int(res[0]), _num(res[1]), _num(res[2]), items)

    async def record(self, sk: ShardKeys, outcomes: Sequence[Outcome]) -> list[int]:
        keys = [sk.due, sk.processing, sk.succeeded, sk.dead]
        args: list[Any] = [sk.wake]
        for o in outcomes:
            keys += [sk.delivery(o.id), sk.log(o.id)]
            code = "" if o.status_code is None else o.status_code
            args += [o.id, o.token, o.outcome, o.delay_ms, code, o.error, o.entry]
        return [int(x) for x in await self.scripts.record(keys=keys, args=args)]

    async def extend(
        self, sk: ShardKeys, claims: Sequence[tuple[str, str]], lease_ms: int
    ) -> list[int]:
        keys = [sk.processing] + [sk.delivery(i) for i, _ in claims]
        args = [lease_ms, *(t for _, t in claims), *(i for i, _ in claims)]
        return [int(x) for x in await self.scripts.extend(keys=keys, args=args)]

    async def release(self, sk: ShardKeys, claims: Sequence[tuple[str, str]]) -> list[int]:
        """Hand back interrupted sends, uncharged; each is logged as ``handed_back``."""
        keys = [sk.due, sk.processing]
        args: list[Any] = [sk.wake, self.settings.worker_id]
        for delivery_id, token in claims:
            keys += [sk.delivery(delivery_id), sk.log(delivery_id)]
            args += [token, delivery_id]
        return [int(x) for x in await self.scripts.release(keys=keys, args=args)]

    async def reclaim(self, sk: ShardKeys, limit: int = 500) -> tuple[int, int, list[str]]:
        res = await self.scripts.reclaim(
            keys=[sk.due, sk.processing, sk.dead, sk.stats], args=[sk.base, limit, sk.wake]
        )
        return int(res[0]), int(res[1]), list(res[2:])

    # ------------------------------------------------------------------ operator transitions

    async def replay(self, delivery_ids: Sequence[str]) -> dict[str, str]:
        """Replay deliveries; each id maps to "ok" or the status that refused it."""
        by_shard: dict[int, list[str]] = {}
        result: dict[str, str] = {}
        for d in delivery_ids:
            sk = self.shard_keys_for(d)
            if sk is None:
                result[d] = ""
            else:
                by_shard.setdefault(sk.shard, []).append(d)
        for shard, group in by_shard.items():
            sk = self.keys.shard(shard)
            for start in range(0, len(group), 500):
                chunk = group[start : start + 500]
                res = await self.scripts.replay(
                    keys=[sk.due, sk.succeeded, sk.dead, *(sk.delivery(d) for d in chunk)],
                    args=[sk.wake, self.settings.max_attempts, *chunk],
                )
                result.update(zip(chunk, res, strict=True))
        return result

    async def replay_dead(
        self,
        *,
        endpoint_id: str | None = None,
        since: int | None = None,
        on_page: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """Replay every dead delivery (of one endpoint; that died at or after ``since`` ms).

        Walks the dead letters newest first, a page at a time, one replay script call per
        page and shard. Returns ``(replayed, refused)``: refused ones were replayed by
        someone else meanwhile. ``on_page(n)`` reports progress.
        """
        replayed = refused = 0
        cursor: str | None = None
        while True:
            rows, cursor = await self.list_deliveries(
                status="dead", endpoint_id=endpoint_id, limit=500, cursor=cursor
            )
            chosen = [
                r["id"] for r in rows if since is None or (r.get("finished_at") or 0) >= since
            ]
            if chosen:
                done = sum(1 for v in (await self.replay(chosen)).values() if v == "ok")
                replayed += done
                refused += len(chosen) - done
                if on_page is not None:
                    on_page(len(chosen))
            # Unfiltered, the dead index is in order of death: past `since`, nothing counts.
            older = rows and since is not None and (rows[-1].get("finished_at") or 0) < since
            if cursor is None or (endpoint_id is None and older):
                return replayed, refused

    # ------------------------------------------------------------------ reads

    async def get_delivery(self, delivery_id: str, with_log: bool = True) -> dict[str, Any] | None:
        sk = self.shard_keys_for(delivery_id)
        if sk is None:
            return None
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(sk.delivery(delivery_id))
            if with_log:
                pipe.lrange(sk.log(delivery_id), 0, -1)
            res = await pipe.execute()
        if not res[0]:
            return None
        record = _delivery(res[0])
        if with_log:
            record["attempt_log"] = [orjson.loads(e) for e in res[1]]
        return record

    async def get_deliveries(self, sk: ShardKeys, delivery_ids: Sequence[str]) -> list[dict]:
        if not delivery_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for d in delivery_ids:
                pipe.hgetall(sk.delivery(d))
            rows = await pipe.execute()
        return [_delivery(r) for r in rows if r]

    async def get_event(self, event_id: str) -> dict[str, Any] | None:
        sk = self.shard_keys_for(event_id)
        if sk is None:
            return None
        raw = await self.redis.hgetall(sk.event(event_id))
        if not raw:
            return None
        body = orjson.loads(raw["body"])
        return {
            "id": raw["id"],
            "type": raw["type"],
            "app": raw["app"],
            "created_at": int(raw["created_at"]),
            "payload": body["data"],
            "deliveries": orjson.loads(raw["deliveries"]),
        }

    async def list_deliveries(
        self,
        *,
        status: str | None = None,
        endpoint_id: str | None = None,
        event_id: str | None = None,
        event_type: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first, across shards; ``cursor`` continues a previous page.

        ``event_type`` is exact or a prefix pattern (``order.*``). A filter that matches
        little scans a bounded number of index entries per call and returns the cursor of
        where it stopped, so a page may hold fewer than ``limit`` rows and still continue.
        """
        after = decode_cursor(cursor) if cursor else None

        def wanted(row: dict[str, Any]) -> bool:
            return (
                (status is None or row.get("status") == status)
                and (endpoint_id is None or row.get("endpoint_id") == endpoint_id)
                and (event_type is None or matching.matches([event_type], row.get("type", "")))
            )

        if event_id is not None:
            event = await self.get_event(event_id)
            sk = self.shard_keys_for(event_id)
            if event is None or sk is None:
                return [], None
            rows = await self.get_deliveries(sk, [d["id"] for d in event["deliveries"]])
            rows = [r for r in rows if wanted(r)]
            # Same order and cursor as the indexes (created, id), so an event with more
            # deliveries than one page is walked page by page like any other listing.
            rows.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
            if after is not None:
                rows = [r for r in rows if (r["created_at"], r["id"]) < after]
            if len(rows) > limit:
                last = rows[limit - 1]
                return rows[:limit], encode_cursor(last["created_at"], last["id"])
            return rows, None

        def source(sk: ShardKeys) -> str:
            if endpoint_id is not None:
                return sk.endpoint_index(endpoint_id)
            if status is not None:
                return {
                    "pending": sk.due,
                    "delivering": sk.processing,
                    "succeeded": sk.succeeded,
                    "dead": sk.dead,
                }[status]
            return sk.deliveries

        # Each shard contributes up to limit + 1 matches, scanning at most `budget`
        # index entries; a shard cut short by the budget bounds how far this page may go.
        found: list[tuple[float, str, dict[str, Any]]] = []
        cuts: list[tuple[float, str]] = []
        budget = max(limit * 10, 200)
        for sk in self.keys.all_shards():
            key = source(sk)
            top: float | str = "+inf" if after is None else after[0]
            offset, scanned, matched = 0, 0, 0
            while True:
                batch = await self.redis.zrange(
                    key,
                    top,
                    "-inf",
                    desc=True,
                    byscore=True,
                    offset=offset,
                    num=limit + 1,
                    withscores=True,
                )
                offset += len(batch)
                scanned += len(batch)
                page = [
                    (s, m)
                    for m, s in batch
                    if after is None or s < after[0] or (s == after[0] and m < after[1])
                ]
                got = {r["id"]: r for r in await self.get_deliveries(sk, [m for _, m in page])}
                for s, m in page:
                    r = got.get(m)
                    if r is not None and wanted(r):
                        found.append((s, m, r))
                        matched += 1
                if len(batch) <= limit or matched > limit:
                    break
                if scanned >= budget:
                    cuts.append((batch[-1][1], batch[-1][0]))
                    break
        found.sort(key=lambda t: (t[0], t[1]), reverse=True)
        if cuts:
            bound = max(cuts)
            found = [f for f in found if (f[0], f[1]) >= bound]
        if len(found) > limit:
            s, m, _ = found[limit - 1]
            return [r for _, _, r in found[:limit]], encode_cursor(s, m)
        if cuts:
            s, m = max(cuts)
            return [r for _, _, r in found], encode_cursor(s, m)
        return [r for _, _, r in found], None

    async def stats(self) -> dict[str, Any]:
        counts = dict.fromkeys(STATUSES, 0)
        due_now = 0
        oldest: int | None = None
        reclaimed = 0
        # One TIME, outside the pipelines: a cluster pipeline refuses keyless commands.
        t = await self.redis.time()
        now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
        for sk in self.keys.all_shards():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zcard(sk.due)
                pipe.zcard(sk.processing)
                pipe.zcard(sk.succeeded)
                pipe.zcard(sk.dead)
                pipe.zcount(sk.due, "-inf", now_ms)
                pipe.zrange(sk.due, 0, 0, withscores=True)
                pipe.hget(sk.stats, "reclaimed")
                due, proc, ok, dead, now_due, head, rec = await pipe.execute()
            counts["pending"] += due
            counts["delivering"] += proc
            counts["succeeded"] += ok
            counts["dead"] += dead
            due_now += now_due
            reclaimed += int(rec or 0)
            if now_due:  # the head is due: it is the oldest due delivery of this shard
                score = int(head[0][1])
                oldest = score if oldest is None else min(oldest, score)
        return {
            "counts": counts,
            "queue": {
                "due": due_now,
                "scheduled": counts["pending"] - due_now,
                "processing": counts["delivering"],
                "oldest_due_age_seconds": 0.0
                if oldest is None
                else round((now_ms - oldest) / 1000, 3),
            },
            "reclaimed_total": reclaimed,
            "shards": self.settings.shards,
        }


def _delivery(raw: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = dict(raw)
    for f in _INT_FIELDS:
        if f in out:
            out[f] = _num(out[f])
    code = out.get("last_status_code")
    out["last_status_code"] = int(code) if code else None
    out["last_error"] = out.get("last_error") or None
    # Scripts delete these when they stop applying; the API still lists them, as null.
    for f in ("next_attempt_at", "finished_at", "last_attempt_at"):
        out.setdefault(f, None)
    return out
