"""``make bench`` step ``convoy``: the latency table in the shape of Convoy's issue #2795.

Delivery latency p95/p99 (publish time stamped in the payload to the receiver's arrival,
same clock) and publish latency p95 (the API request, sent to answered) at 50 and 200
events/s, open-loop (each publish starts on schedule, not after the previous answer),
one endpoint per event, the instant receiver, one worker; then the same two rates with
relay's Redis 2 ms of round trip away (``bench/delay_proxy.py``, 1 ms each way, as
``rtt2``: the API's and the worker's Redis both). Each rate runs ``--seconds`` (20 s;
``--quick`` 5 s) after a 1 s warm-up at 50/s that is not counted (first connections).
"""

from __future__ import annotations

from typing import Any

from bench import load
from bench.common import Receiver, RedisMeter
from bench.ratios import grid
from bench.scenarios import TOKEN, Cfg, percentiles, relay

RATES = (50, 200)
RTTS_MS = (0.0, 2.0)


async def _measure(r: Any, receiver: Receiver, rate: float, seconds: float) -> dict[str, Any]:
    await receiver.reset(record=True)
    sent = await load.steady(r.api_port, TOKEN, rate, seconds)
    await receiver.wait_for("unique_ids", sent["events"], 60, r.watch())
    arrivals = await receiver.arrivals()
    lat = [(a[1] - a[2]) * 1000 for a in arrivals if a[2] is not None]
    return {
        "events": sent["events"],
        "offered_per_s": sent["offered_per_s"],
        "delivery_ms": percentiles(lat),
        "publish_ms": percentiles(sent["answer_ms"]),
    }


async def run(receiver: Receiver, cfg: Cfg) -> dict[str, Any]:
    rows = []
    for rtt in RTTS_MS:
        name = f"convoy-rtt{rtt:g}"
        async with relay(receiver, name, cfg, redis_delay_ms=rtt / 2) as r:
            meter = RedisMeter(r.redis.url)
            try:
                r.start_workers(1)
                await r.wait_subscribed(meter, 1)
            finally:
                meter.close()
            await _measure(r, receiver, 50, 1.0)  # warm-up, not counted
            for rate in RATES:
                got = await _measure(r, receiver, rate, cfg.seconds)
                rows.append({"rate": rate, "redis_rtt_added_ms": rtt, **got})
    return {"seconds": cfg.seconds, "rows": rows}


def lines(res: dict[str, Any]) -> list[str]:
    c = res.get("convoy")
    if not c:
        return []
    rows = [
        [
            f"{r['rate']}/s",
            f"+{r['redis_rtt_added_ms']:g} ms",
            f"{r['delivery_ms']['p95']:.1f}",
            f"{r['delivery_ms']['p99']:.1f}",
            f"{r['publish_ms']['p95']:.1f}",
            f"{r['delivery_ms']['max']:.1f}",
            f"{r['events']:,}",
        ]
        for r in c["rows"]
    ]
    head = [
        "rate",
        "Redis RTT",
        "delivery p95 ms",
        "delivery p99 ms",
        "publish p95 ms",
        "delivery max",
        "events",
    ]
    return [
        f"latency (Convoy #2795's shape, step convoy): open-loop, 1 endpoint per event, instant"
        f" receiver, 1 worker, {c['seconds']:g} s per row; delivery = publish to receipt,"
        " publish = the API request:",
        *grid(head, rows),
    ]
