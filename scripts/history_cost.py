"""Redis memory of what the receiver answered and of the endpoint counters, measured.

Starts a private ``redis-server`` (no persistence, a free loopback port, a temp dir) and
prints, per attempt-log entry of a failed attempt (a 503 with a body and the headers a
typical receiver sends), the ``used_memory`` delta over many entries for several body
caps, with and without the answer's headers; and the ``MEMORY USAGE`` of one endpoint's
counters for an hour and a day of steady traffic. Run:
``.venv/bin/python scripts/history_cost.py``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import orjson

from relay.domain import attemptlog, endpointstats
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer
from relay.settings import Settings

ENTRIES = 20_000
HEADERS = [
    ("Content-Type", "text/html; charset=utf-8"),
    ("Date", "Fri, 04 Dec 2026 08:40:00 GMT"),
    ("Server", "nginx/1.25.3"),
    ("Retry-After", "30"),
    ("X-Request-Id", "9f1c2d3e-4b5a-6c7d-8e9f-0a1b2c3d4e5f"),
    ("Cache-Control", "no-store"),
    ("Set-Cookie", "session=abcdef; HttpOnly"),
]


async def used(store: Store) -> int:
    info = await store.redis.info("memory")
    return int(info["used_memory"])


def entry(cap: int, with_headers: bool) -> bytes:
    body = ("<html><body>503 Service Unavailable: upstream busy</body></html>" * 1100)[:cap]
    headers = attemptlog.answer_headers(HEADERS) if with_headers else None
    fields = attemptlog.fields(
        3, 1_764_837_600_000, 12.34, 503, "http_status", body, "retry", "w1-123", headers
    )
    return orjson.dumps(fields)


async def log_cost(store: Store, cap: int, with_headers: bool) -> float:
    """Bytes per entry: ENTRIES entries appended to 2,000 logs (ten each)."""
    sk = store.keys.shard(0)
    value = entry(cap, with_headers)
    await store.redis.flushdb()
    before = await used(store)
    for start in range(0, ENTRIES, 1000):
        async with store.redis.pipeline(transaction=False) as pipe:
            for i in range(start, start + 1000):
                pipe.rpush(sk.log(f"dlv_{i % 2000:026d}"), value)
            await pipe.execute()
    return (await used(store) - before) / ENTRIES


async def counters_cost(store: Store) -> tuple[int, int]:
    """MEMORY USAGE of an hour's counters (every minute: attempts, successes, a 503
    class, a timeout class, three latency buckets), and a day's (24 such hashes)."""
    await store.redis.flushdb()
    at = 500 * endpointstats.HOUR_MS
    stats = ["ok 3", "ok 4", "ok 5", "s503 4", "etimeout"]
    for minute in range(60):
        results = [(f"t{i}", "1", s) for i, s in enumerate(stats)]
        await store.settle(
            "ep_x", results, threshold=99, cooldown_ms=1000, cooldown_max_ms=9000,
            at_ms=at + minute * 60_000,
        )  # fmt: skip
    hour = await store.redis.memory_usage(store.keys.endpoint_stats("ep_x", "500"), samples=0)
    return int(hour), int(hour) * 24


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(data_dir=Path(tmp), appendonly=False)
        server.start()
        try:
            settings = Settings.from_env({"RELAY_REDIS_URL": server.url})
            store = Store(connect(settings), settings)
            await store.start()
            print(f"attempt-log entry of a failed attempt (503), bytes, over {ENTRIES:,} entries")
            print(f"{'body cap':>10} {'body only':>10} {'+ headers':>10} {'headers add':>12}")
            for cap in (0, 512, 4096, 16384):
                plain = await log_cost(store, cap, False)
                full = await log_cost(store, cap, True)
                print(f"{cap:>10} {plain:>10.0f} {full:>10.0f} {full - plain:>12.0f}")
            hour, day = await counters_cost(store)
            print(
                "endpoint counters, steady traffic every minute: "
                f"{hour:,} B an hour, {day:,} B a day"
            )
            await store.close()
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
