"""``make bench`` step ``slow``: realistic receivers, which take 100 ms to answer.

One relay worker with ``RELAY_WORKER_CONCURRENCY=1000`` and ``RELAY_HTTP_TIMEOUT=2s``
(short, to keep the run short; the default is 10 s), one endpoint, two runs on a fresh
deployment each:

* ``healthy``: the receiver answers every request 100 ms after it arrives;
* ``hang``: the same, and 1% of requests (drawn per delivery attempt) hang for 6 s, so
  relay's 2 s timeout fires and the attempt is retried (``RELAY_RETRY_SCHEDULE=1s,...``,
  short so that the run ends soon after; the breaker keeps its defaults).

Each run has two phases. **Throughput**: N events published with no worker (a backlog:
that saturates, whatever the publisher can do), then the worker starts; the
*sustained* rate is 98% of N over the time from the first arrival to the 98%-th
request answered 200 (the last 2% hold the hung 1%'s retries, which wait out the
timeout and the retry delay: a tail, not the sustained rate). Its ceiling is
min(1000 / 0.1 s, the CPU-bound rate of that run's own CPU cost per delivery)
(``targets.slow_ceiling``); the ratio to drain1's CPU-bound rate, the ceiling of the runs
before layout v3, is printed beside it (``targets.drain1_ceiling``).
N is half the run's N (10,000; at least 3,000): two backlogs at 100 ms a request.
``timeline`` keeps the 200s answered per second of the drain, to show stalls.
**Latency**: with the worker idle again, open-loop publishing at ``--rate`` (500/s,
the ``latency`` step's rate) for up to 10 s; per healthy request (first attempt,
answered 200) publish-to-answer (the receiver's 200, 100 ms after the arrival) and
publish-to-arrival, p50/p95/p99/max.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench import load
from bench.common import Receiver, drain_with_cpu
from bench.ratios import fx, grid
from bench.scenarios import TOKEN, Cfg, _pids, _timeout, percentiles, relay
from bench.targets import drain1_ceiling, slow_ceiling

DELAY_MS = 100
HANG_PCT = 1.0
HTTP_TIMEOUT_S = 2.0
CONCURRENCY = 1000
SUSTAINED_SHARE = 0.98
ENV = {
    "RELAY_WORKER_CONCURRENCY": str(CONCURRENCY),
    "RELAY_HTTP_TIMEOUT": f"{HTTP_TIMEOUT_S:g}s",
    "RELAY_RETRY_SCHEDULE": "1s,1s,1s,1s,1s",
}


async def _one(receiver: Receiver, cfg: Cfg, hang: bool) -> dict[str, Any]:
    n = max(3000, cfg.n // 2)
    opts = {
        "delay_ms": DELAY_MS,
        "hang_pct": HANG_PCT if hang else 0,
        "hang_s": 3 * HTTP_TIMEOUT_S,
        "record": True,
    }
    name = "slow-hang" if hang else "slow"
    async with relay(receiver, name, cfg, extra_env=ENV) as r:
        await load.publish(r.api_port, TOKEN, n, cfg.clients)
        await receiver.reset(**opts)
        r.start_workers(1)
        within = _timeout(n) + 30
        st, cpu = await drain_with_cpu(
            receiver, n, within, _pids(r, receiver), r.watch(), "ok_unique"
        )
        oks = sorted(a[1] for a in await receiver.arrivals())
        k = int(SUSTAINED_SHARE * n)
        span_k, span = oks[k - 1] - st["first"], oks[-1] - st["first"]
        drain = {
            "n": n,
            "sustained_per_s": round(k / span_k, 1) if span_k > 0 else None,
            "per_s": round(len(oks) / span, 1) if span > 0 else None,
            "seconds": round(span, 3),
            "requests": st["count"],
            "hung": st["hung"],
            "cpu_ms": cpu,
            "timeline": _timeline(oks, st["first"]),
        }
        await receiver.reset(**opts)
        seconds = min(cfg.seconds, 10.0)
        sent = await load.steady(r.api_port, TOKEN, cfg.rate, seconds)
        st = await receiver.wait_for("ok_unique", sent["events"], 90, r.watch())
        await asyncio.sleep(DELAY_MS / 1000 + 0.2)  # the last answers are stamped
        arrivals = await receiver.arrivals()
    healthy = [a for a in arrivals if a[3] == "1" and a[2] is not None]
    return {
        **drain,
        "latency_rate": cfg.rate,
        "latency_events": sent["events"],
        "latency_offered_per_s": sent["offered_per_s"],
        "latency_healthy": len(healthy),
        "latency_hung": st["hung"],
        "answered_ms": percentiles([(a[4] - a[2]) * 1000 for a in healthy]),
        "receipt_ms": percentiles([(a[1] - a[2]) * 1000 for a in healthy]),
        "publish_ms": percentiles(sent["answer_ms"]),
    }


def _timeline(times: list[float], t0: float, cap_s: int = 300) -> list[int]:
    """Arrivals per second from ``t0`` (the first ``cap_s`` seconds)."""
    out = [0] * min(cap_s, int(times[-1] - t0) + 1 if times else 0)
    for t in times:
        i = int(t - t0)
        if 0 <= i < len(out):
            out[i] += 1
    return out


async def run(receiver: Receiver, cfg: Cfg) -> dict[str, Any]:
    return {
        "delay_ms": DELAY_MS,
        "hang_pct": HANG_PCT,
        "http_timeout_s": HTTP_TIMEOUT_S,
        "concurrency": CONCURRENCY,
        "healthy": await _one(receiver, cfg, False),
        "hang": await _one(receiver, cfg, True),
    }


def lines(res: dict[str, Any]) -> list[str]:
    slow = res.get("slow")
    if not slow:
        return []
    rows = []
    for key, label in (("healthy", "every answer after 100 ms"), ("hang", "+ 1% hang past 2 s")):
        r = slow[key]
        ceiling = slow_ceiling(res, key)
        ratio = r["sustained_per_s"] / ceiling if ceiling and r["sustained_per_s"] else None
        old = drain1_ceiling(res)
        vs_drain1 = r["sustained_per_s"] / old if old and r["sustained_per_s"] else None
        a, p = r["answered_ms"], r["receipt_ms"]
        rows.append(
            [
                label,
                f"{r['sustained_per_s']:,.0f}/s",
                "-" if ceiling is None else f"{ceiling:,.0f}/s",
                fx(ratio),
                fx(vs_drain1),
                f"{r['hung']:,}",
                f"{a['p50']:.0f} / {a['p99']:.0f} / {a['max']:.0f}",
                f"{p['p50']:.0f} / {p['p99']:.0f}",
                f"{r['latency_healthy']:,}",
            ]
        )
    head = [
        "receiver",
        "sustained",
        "ceiling",
        "ratio",
        "vs drain1's",
        "hung",
        "answered p50/p99/max ms",
        "arrival p50/p99",
        "healthy",
    ]
    return [
        "realistic receivers (step slow): 1 worker, RELAY_WORKER_CONCURRENCY="
        f"{slow['concurrency']}, RELAY_HTTP_TIMEOUT={slow['http_timeout_s']:g}s; sustained"
        " rate over the first 98% of a"
        f" backlog of {slow['healthy']['n']:,}; ceiling min({slow['concurrency']}/0.1 s, the"
        " run's own CPU-bound rate) (vs drain1's: min(.., drain1's CPU-bound rate)); latency"
        " open-loop at "
        f"{slow['healthy']['latency_rate']:g}/s, healthy first attempts only:",
        *grid(head, rows),
    ]
