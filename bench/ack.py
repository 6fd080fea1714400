"""Publish latency with and without replica-acknowledged writes (``RELAY_ACK_REPLICAS``).

A private primary and one replica on loopback (``--replicaof``); ``Store.publish`` (the
script the API's ``POST /v1/events`` runs, one delivery per event) called one at a time,
``--events`` times with ``RELAY_ACK_REPLICAS=0`` and again with ``1`` (the script and
``WAIT 1`` in one pipeline). Prints p50/p90/p99/max in ms and writes
``bench/results/ack.json``. Part of ``make bench``, not of ``make test``.

    python bench/ack.py [--events 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from relay.domain import ids
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer
from relay.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "ack.json"


def percentiles(values: list[float]) -> dict[str, float]:
    s = sorted(values)

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))], 3)

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": round(s[-1], 3)}


async def run(url: str, replicas: int, events: int) -> dict[str, Any]:
    settings = Settings(redis_url=url, key_prefix=f"bench{replicas}", ack_replicas=replicas)
    store = Store(connect(settings), settings)
    await store.start()
    took: list[float] = []
    try:
        for n in range(events + 200):  # the first 200 warm up
            started = time.perf_counter()
            await store.publish(
                shard=0,
                event_id=ids.new_id("evt"),
                event_type="bench.ack",
                app="default",
                body=b'{"n": %d}' % n,
                created_ms=int(time.time() * 1000),
                deliveries=[(ids.new_id("dlv"), "ep_bench")],
                idempotency=(f"k{n}", b"{}"),
            )
            if n >= 200:
                took.append((time.perf_counter() - started) * 1000)
    finally:
        await store.close()
    return {"ack_replicas": replicas, "events": events, "ms": percentiles(took)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=3000)
    events = parser.parse_args().events
    with tempfile.TemporaryDirectory() as tmp:
        primary = RedisServer(data_dir=Path(tmp) / "p", appendonly=True, appendfsync="everysec")
        primary.start()
        replica = RedisServer(
            data_dir=Path(tmp) / "r",
            appendonly=True,
            appendfsync="everysec",
            extra_args=("--replicaof", "127.0.0.1", str(primary.port)),
        )
        replica.start()
        try:
            probe = redis.Redis(port=replica.port or 0, decode_responses=True)
            deadline = time.monotonic() + 30
            while probe.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise SystemExit("replica never came up")
                time.sleep(0.1)
            rows = [asyncio.run(run(primary.url, r, events)) for r in (0, 1)]
        finally:
            replica.stop()
            primary.stop()
    print(f"{'ack_replicas':>12} {'p50_ms':>8} {'p90_ms':>8} {'p99_ms':>8} {'max_ms':>8}")
    for row in rows:
        ms = row["ms"]
        print(
            f"{row['ack_replicas']:>12} {ms['p50']:>8} {ms['p90']:>8} {ms['p99']:>8} {ms['max']:>8}"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"loopback_replica": True, "runs": rows}, indent=2) + "\n")
    print(f"written {RESULTS}")


if __name__ == "__main__":
    main()
