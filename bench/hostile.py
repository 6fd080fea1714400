"""Hostile tenants: what one app's filters and schemas do to another app (``make bench``).

For each hostile filter or schema of the adversarial run, a fresh ``relay api`` process on
a private ``redis-server``: app H (an app key with publish and manage) sets it and
publishes ``--rounds`` times in a row (for 5 s at least), while app B publishes through
a filter of its own and ``/healthz`` is polled, each every 20 ms (B's key stays under
the API's rate limit).
Prints, per attack, H's answer and its time, B's publish latency and ``/healthz``'s
(p50, p99, max) during the attack, and the API process's peak RSS growth over the
attack (``VmHWM`` minus ``VmRSS`` before it); a filter refused at write is said so.
The first attack is none (H's filter is ordinary), for comparison. Writes
``bench/results/hostile.json``.

    python bench/hostile.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import private_redis
from tests.helpers.hostile import (
    MEMORY_FILTER,
    MEMORY_PAYLOAD,
    SLOW_FILTER,
    SLOW_SCHEMA,
    SLOW_SCHEMA_PAYLOAD,
    regex_filter,
    start_api,
    status_bytes,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "hostile.json"
ADMIN = "bench-admin"
PAUSE = 0.02  # between B's publishes, and between polls of /healthz (and H's)
MIN_SECONDS = 5.0  # an attack lasts this long at least (H publishes again)
# name -> (H's filter, H's event type, H's payload, the catalog schema of that type)
ATTACKS: dict[str, tuple[str | None, str, Any, Any]] = {
    "none (H publishes through an ordinary filter)": (
        "payload.n > 0",
        "order.paid",
        {"n": 1},
        None,
    ),
    "regex filter, 100 zeros (262 chars)": (regex_filter(100), "order.paid", {"n": 1}, None),
    "regex filter, 880 zeros (1,822 chars)": (regex_filter(880), "order.paid", {"n": 1}, None),
    "slow regex filter within the write checks": (SLOW_FILTER, "order.paid", {"n": 1}, None),
    "memory filter, 27.8 KB payload": (MEMORY_FILTER, "bulk.load", MEMORY_PAYLOAD, None),
    "anyOf schema, 229 KB payload": (None, "bulk.import", SLOW_SCHEMA_PAYLOAD, SLOW_SCHEMA),
}


def quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


async def call(s: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[int, Any]:
    async with s.request(method, url, **kw) as r:
        return r.status, await r.json()


async def attack(redis_url: str, name: str, rounds: int) -> dict[str, Any]:
    text, event_type, payload, schema = ATTACKS[name]
    log = Path(tempfile.mkdtemp(prefix="relay-hostile-")) / "api.log"
    proc, url = await start_api(redis_url, ADMIN, log, prefix="bh", log_level="error")
    timeout = aiohttp.ClientTimeout(total=600)
    admin = aiohttp.ClientSession(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=timeout)
    sessions = [admin]
    try:
        keys = {}
        for app in ("H", "B"):
            body = {"app": app, "scopes": ["publish", "manage"]}
            status, made = await call(admin, "POST", url + "/v1/api-keys", json=body)
            assert status == 201, made
            keys[app] = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {made['token']}"}, timeout=timeout
            )
            sessions.append(keys[app])
        h, b = keys["H"], keys["B"]
        hook = {"url": "http://127.0.0.1:9/hook"}
        for session, t in ((h, text), (h, None), (b, "payload.n >= 0")):
            status, made = await call(
                session, "POST", url + "/v1/endpoints", json={**hook, "filter": t}
            )
            if status == 422 and t == text:
                return {"attack": name, "refused_at_write": made["message"]}
            assert status == 201, made
        if schema is not None:
            body = {"name": event_type, "schema": schema}
            status, made = await call(admin, "POST", url + "/v1/event-types", json=body)
            assert status == 201, made
        for n in range(20):  # warm: connections, the sandbox's children
            await call(b, "POST", url + "/v1/events", json={"type": "t.x", "payload": {"n": n}})
        before = status_bytes(proc.pid, "VmRSS")
        running = True
        h_runs: list[tuple[int, str, float]] = []
        b_times: list[float] = []
        health_times: list[float] = []

        async def hostile() -> None:
            nonlocal running
            began = time.monotonic()
            try:
                while len(h_runs) < rounds or time.monotonic() - began < MIN_SECONDS:
                    started = time.monotonic()
                    status, answer = await call(
                        h, "POST", url + "/v1/events", json={"type": event_type, "payload": payload}
                    )
                    outcome = (
                        answer.get("error")
                        or "; ".join(f["reason"] for f in answer.get("filtered", []))
                        or "delivered"
                    )
                    h_runs.append((status, outcome, time.monotonic() - started))
                    await asyncio.sleep(PAUSE)
            finally:
                running = False

        async def victim() -> None:
            n = 0
            while running:
                n += 1
                started = time.monotonic()
                event = {"type": "order.paid", "payload": {"n": n}}
                status, _ = await call(b, "POST", url + "/v1/events", json=event)
                assert status == 201, status
                b_times.append(time.monotonic() - started)
                await asyncio.sleep(PAUSE)

        async def health() -> None:
            async with aiohttp.ClientSession(timeout=timeout) as s:
                while running:
                    started = time.monotonic()
                    assert (await call(s, "GET", url + "/healthz"))[0] == 200
                    health_times.append(time.monotonic() - started)
                    await asyncio.sleep(PAUSE)

        await asyncio.gather(hostile(), victim(), health())
        grown = status_bytes(proc.pid, "VmHWM") - before
        return {
            "attack": name,
            "h_status": sorted({s for s, _, _ in h_runs}),
            "h_outcome": h_runs[0][1],
            "h_seconds_max": round(max(t for _, _, t in h_runs), 2),
            "b_publish": quantiles(b_times),
            "healthz": quantiles(health_times),
            "rss_growth_mib": round(grown / 2**20, 1),
        }
    finally:
        for s in sessions:
            await s.close()
        proc.terminate()
        await proc.wait()


def show(row: dict[str, Any]) -> None:
    print(f"- {row['attack']}")
    if "refused_at_write" in row:
        print(f"    refused at write (422): {row['refused_at_write']}")
        return
    b, hz = row["b_publish"], row["healthz"]
    print(f"    H: {row['h_status']} in at most {row['h_seconds_max']} s: {row['h_outcome']}")
    print(
        f"    B publish ms  p50 {b['p50_ms']:>7}  p99 {b['p99_ms']:>7}  max {b['max_ms']:>7}"
        f"  (n={b['n']})"
    )
    print(
        f"    /healthz ms   p50 {hz['p50_ms']:>7}  p99 {hz['p99_ms']:>7}  max {hz['max_ms']:>7}"
        f"  (n={hz['n']})"
    )
    print(f"    API peak RSS growth {row['rss_growth_mib']} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="H's publishes per attack")
    args = parser.parse_args()
    rows = []
    with private_redis() as url:
        for name in ATTACKS:
            rows.append(asyncio.run(attack(url, name, args.rounds)))
            show(rows[-1])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"rounds": args.rounds, "attacks": rows}, indent=2))


if __name__ == "__main__":
    main()
