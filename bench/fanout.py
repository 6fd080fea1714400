"""``make bench`` step ``fanout``: ingest to 10 endpoints per event, and the memory that
each additional endpoint of an event costs while its deliveries are pending.

Two fresh deployments, no worker in either: E events published to a relay with one
endpoint, then E events to one with 10 (every event goes to every endpoint). The
ingest figure is the 10-endpoint publish. Memory per event is each run's ``used_memory``
delta over E; one more endpoint of an event costs ``(m10 - m1) / 9`` (the target's
figure; the same from the sum of ``MEMORY USAGE`` of the keys is given beside it). Both
runs' breakdowns per key pattern are kept in the JSON.
"""

from __future__ import annotations

from typing import Any

from bench import memory
from bench.common import Receiver, RedisMeter
from bench.scenarios import Cfg, _publish, relay


async def _pending(receiver: Receiver, cfg: Cfg, endpoints: int, events: int) -> dict[str, Any]:
    async with relay(receiver, f"fanout{endpoints}", cfg, endpoints=endpoints) as r:
        meter = RedisMeter(r.redis.url)
        try:
            before = meter.snapshot()["used_memory"]
            m0 = await memory.scan(r.redis.url)
            pub = await _publish(r, receiver, cfg, events)
            after = meter.snapshot()["used_memory"]
            m1 = await memory.scan(r.redis.url)
        finally:
            meter.close()
    if pub["deliveries"] != events * endpoints:
        raise RuntimeError(f"fan-out: {pub['deliveries']} deliveries for {events} events")
    rows = memory.breakdown(m0, m1, events)
    pub["memory_per_event_bytes"] = round((after - before) / events)
    pub["memory_usage_per_event_bytes"] = round(sum(r["bytes"] for r in rows) / events)
    pub["memory_breakdown_per_event"] = rows
    return pub


async def run(receiver: Receiver, cfg: Cfg, fanout: int = 10) -> dict[str, Any]:
    events = max(2000, cfg.n // 4)  # not fewer: a fixed cost (a dict resize) would weigh
    one = await _pending(receiver, cfg, 1, events)
    pub = await _pending(receiver, cfg, fanout, events)
    m1, mk = one["memory_per_event_bytes"], pub["memory_per_event_bytes"]
    return {
        **pub,
        "deliveries_per_s": round(pub["deliveries"] / pub["seconds"], 1),
        "fanout": fanout,
        "memory_per_event_1_endpoint_bytes": m1,
        "memory_breakdown_per_event_1_endpoint": one["memory_breakdown_per_event"],
        "memory_per_extra_endpoint_bytes": round((mk - m1) / (fanout - 1)),
        "memory_usage_per_extra_endpoint_bytes": round(
            (pub["memory_usage_per_event_bytes"] - one["memory_usage_per_event_bytes"])
            / (fanout - 1)
        ),
    }
