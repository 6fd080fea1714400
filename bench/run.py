"""``make bench``: relay against the raw-client limit, arq and saq, on this machine, now.

Every figure is a ratio against baselines run in the same invocation on the same local
receiver, because absolute numbers on a shared machine drift. Each system gets its own
fresh ``redis-server`` (append-only file off for every run alike: this measures the
queue, not the disk). Everything stays on 127.0.0.1.

    python bench/run.py                 # the full run (N=20,000; a few minutes)
    python bench/run.py --quick         # N=3,000, 5 s of latency: a fast check
    python bench/run.py --only limit,drain1,saq

Writes ``bench/results/<timestamp>.json``, ``latest.json``, ``latest.txt`` (the table)
and ``latest.png`` (a ``--quick`` run writes ``latest-quick.*`` instead). arq and saq run
in their own virtualenv, ``bench/.venv``, made here on first use from
``bench/requirements-baselines.txt`` (arq pins redis<6, which relay's redis==8.1 rules
out of the main one).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import convoy, fanout, ordered, payloads, queues, realistic, report, scenarios
from bench.common import RESULTS, Procs, Receiver, machine
from bench.scenarios import Cfg

STEPS = (
    "limit",
    "e2e1",
    "e2e2",
    "drain1",
    "random",
    "drain2",
    "asyncio",
    "saq",
    "arq",
    "taskiq",
    "dramatiq",
    "streaq",
    "fanout",
    "latency",
    "convoy",
    "slow",
    "retry",
    "rtt2",
    "ordered",
    "limit_end",
)
# Throughput steps get a limit run of their own right before them: on a shared machine
# the load from elsewhere drifts within minutes, and each ratio should see the same load.
PAIRED = (
    *("e2e1", "e2e2", "drain1", "drain2", "asyncio"),
    *("saq", "arq", "taskiq", "dramatiq", "streaq"),
)
# ... and these a run of the raw client on uvloop too: relay's processes run on uvloop
# (RELAY_EVENT_LOOP's default), and the same client on the same loop is the fair ceiling.
PAIRED_UVLOOP = ("drain1", "drain2")
# ... and these, whose ratios are targets, run ``--repeat`` times (3), each time with its
# own limit run(s) right before it; the run whose ratio is the median is reported, with
# every run's ratio beside it: on a shared VM one pair reads up to 0.1x apart from the
# next, minutes later, with the same code (docs/performance.md).
REPEATED = ("drain1", "drain2")


def loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs (/proc/stat): what the hypervisor took from this
    VM while a step ran; a figure read while a neighbour takes a third is not an idle one."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    return f[7], sum(f)


async def measure(
    receiver: Receiver,
    cfg: Cfg,
    step: str,
    fn: Callable[[], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """One run of a step, with its own limit run(s) right before it when it is paired."""
    load_before = loadavg()
    ticks_before = cpu_ticks()
    paired = (await scenarios.limit(receiver, cfg))["per_s"] if step in PAIRED else None
    uv = None
    if step in PAIRED_UVLOOP and not cfg.event_loop:
        uv = await scenarios.limit_uvloop(receiver, cfg)
    r = await fn()
    r["loadavg_1m_before"] = load_before
    ticks_after = cpu_ticks()
    if ticks_before and ticks_after and ticks_after[1] > ticks_before[1]:
        steal = ticks_after[0] - ticks_before[0]
        r["steal_share"] = round(steal / (ticks_after[1] - ticks_before[1]), 3)
    if paired is not None:
        r["limit_per_s"] = paired
    if uv is not None:
        r["limit_uvloop_per_s"] = uv["per_s"]
        r["limit_uvloop_cpu_ms"] = uv["cpu_ms"]
    return r


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Of a repeated step's runs, the one whose rate over its own limit is the median (the
    report's figure), with every run's ratio under ``repeats``; a single run as it is."""
    if len(runs) == 1:
        return runs[0]

    def ratio(r: dict[str, Any]) -> float:
        return r["per_s"] / r["limit_per_s"] if r.get("limit_per_s") else r["per_s"]

    chosen = dict(sorted(runs, key=ratio)[len(runs) // 2])
    chosen["repeats"] = [
        {
            "per_s": r["per_s"],
            "limit_per_s": r.get("limit_per_s"),
            "vs_limit": round(ratio(r), 3),
            "limit_uvloop_per_s": r.get("limit_uvloop_per_s"),
        }
        for r in runs
    ]
    return chosen


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cfg = Cfg(args.n, args.concurrency, args.clients, args.rate, args.seconds, args.event_loop)
    wanted = set(args.only.split(",")) if args.only else set(STEPS)
    unknown = wanted - set(STEPS)
    if unknown:
        raise SystemExit(f"unknown steps {sorted(unknown)}; choose from {', '.join(STEPS)}")
    for system in queues.SYSTEMS:
        if system in wanted:
            queues.ensure(system)
    n = cfg.n
    res: dict[str, Any] = {}
    errors: dict[str, str] = {}
    t0 = time.monotonic()
    procs = Procs()
    receiver = Receiver(procs)
    on_asyncio = dataclasses.replace(cfg, event_loop="asyncio")
    steps: dict[str, tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = {
        "limit": ("limit", lambda: scenarios.limit(receiver, cfg)),
        "e2e1": ("relay_e2e_1", lambda: scenarios.relay_e2e(receiver, cfg, 1)),
        "e2e2": ("relay_e2e_2", lambda: scenarios.relay_e2e(receiver, cfg, 2)),
        # drain1 also scans memory per structure, pending and retained (bench/memory.py)
        "drain1": ("relay_drain_1", lambda: scenarios.relay_drain(receiver, cfg, 1, 0.0, True)),
        # drain1's memory figures again with payloads deflate barely shrinks (random bytes)
        "random": ("relay_drain_1_random", lambda: scenarios.relay_drain_random(receiver, cfg)),
        "drain2": ("relay_drain_2", lambda: scenarios.relay_drain(receiver, cfg, 2)),
        # drain1 with relay's processes on asyncio's own loop (RELAY_EVENT_LOOP=asyncio)
        "asyncio": (
            "relay_drain_1_asyncio",
            lambda: scenarios.relay_drain(receiver, on_asyncio, 1),
        ),
        **{
            system: (system, lambda s=system: queues.baseline(receiver, n, cfg.concurrency, s))
            for system in queues.SYSTEMS
        },
        "fanout": ("fanout", lambda: fanout.run(receiver, cfg)),
        "latency": ("latency", lambda: scenarios.relay_latency(receiver, cfg)),
        # Convoy #2795's table: 50/s and 200/s open-loop, Redis at +0 and +2 ms RTT
        "convoy": ("convoy", lambda: convoy.run(receiver, cfg)),
        # realistic receivers: 100 ms answers, then also 1% hanging past the HTTP timeout
        "slow": ("slow", lambda: realistic.run(receiver, cfg)),
        "retry": ("retry", lambda: scenarios.relay_retry(receiver, cfg)),
        # relay's Redis 2 ms of round trip away (bench/delay_proxy.py, 1 ms each way)
        "rtt2": ("relay_drain_1_rtt2", lambda: scenarios.relay_drain(receiver, cfg, 1, 1.0)),
        # issue 14: ordered lanes (1,000, 10, 1 keys) against unordered, same run
        "ordered": ("ordered", lambda: ordered.run(receiver, cfg)),
        "limit_end": ("limit_end", lambda: scenarios.limit(receiver, cfg)),
    }
    try:
        await receiver.start()
        for step in STEPS:
            if step not in wanted:
                continue
            key, fn = steps[step]
            started = time.monotonic()
            runs: list[dict[str, Any]] = []
            for _ in range(args.repeat if step in REPEATED else 1):
                try:
                    runs.append(await measure(receiver, cfg, step, fn))
                except Exception as exc:
                    errors[key] = f"{type(exc).__name__}: {exc}"
                    traceback.print_exc()
                    break
            if runs:
                res[key] = median_run(runs)
            took = time.monotonic() - started
            print(
                f"bench: {key:14s} {took:6.1f}s  {_brief(res.get(key), errors.get(key))}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        await receiver.close()
        procs.close()
    res["meta"] = {
        "started": args.started,
        "runtime_s": round(time.monotonic() - t0, 1),
        "machine": machine(),
        "config": {
            "n": cfg.n,
            "concurrency": cfg.concurrency,
            "publish_clients": cfg.clients,
            "latency_rate": cfg.rate,
            "latency_seconds": cfg.seconds,
            "payload_bytes": 1024,
            "payload": payloads.KIND,
            "quick": args.quick,
            "repeat": args.repeat,
            "event_loop": cfg.event_loop or "uvloop",  # but the asyncio step's
            "redis_appendonly": "no",
            "command": "make bench" + (" (--quick)" if args.quick else ""),
        },
        "errors": errors,
    }
    res["targets"] = report.targets(res)
    return res


def _brief(r: dict[str, Any] | None, error: str | None) -> str:
    if error:
        return "FAILED " + error[:200]
    if not r:
        return ""
    for key in ("e2e_per_s", "per_s", "attempts_per_s"):
        if r.get(key):
            return f"{r[key]:,.0f}/s"
    if "receipt_ms" in r:
        return "p99 {p99} ms".format(**r["receipt_ms"])
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description="relay benchmark (see bench/run.py)")
    parser.add_argument("--n", type=int, help="deliveries per throughput run (20,000)")
    parser.add_argument("--quick", action="store_true", help="N=3,000 and 5 s of latency")
    parser.add_argument("--concurrency", type=int, default=64, help="sends in flight (64)")
    parser.add_argument("--clients", type=int, default=32, help="publishing connections (32)")
    parser.add_argument("--rate", type=float, default=500, help="latency load, events/s (500)")
    parser.add_argument("--seconds", type=float, help="latency run length (20; quick 5)")
    parser.add_argument(
        "--repeat", type=int, help="runs of drain1 and drain2, each paired (3; quick 1)"
    )
    parser.add_argument("--only", help=f"comma-separated steps: {','.join(STEPS)}")
    parser.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default="",
        help="RELAY_EVENT_LOOP of every relay step's api and workers (default: relay's, uvloop)",
    )
    args = parser.parse_args()
    args.n = args.n or (3000 if args.quick else 20000)
    args.repeat = max(1, args.repeat or (1 if args.quick else 3))
    args.seconds = args.seconds or (5.0 if args.quick else 20.0)
    now = datetime.now(UTC)
    args.started = now.strftime("%Y-%m-%d %H:%M UTC")

    res = asyncio.run(run(args))
    text = "\n".join([report.table(res), *ordered.lines(res)])
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = now.strftime("%Y%m%dT%H%M%SZ") + ("-quick" if args.quick else "")
    latest = "latest-quick" if args.quick else "latest"
    blob = orjson.dumps(res, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    for name in (f"{stamp}.json", f"{latest}.json"):
        (RESULTS / name).write_bytes(blob)
    (RESULTS / f"{latest}.txt").write_text(text + "\n")
    png = RESULTS / f"{latest}.png"
    drawn = report.chart(res, png)
    print(
        f"\nresults: {RESULTS / (stamp + '.json')}, {RESULTS / (latest + '.json')}"
        + (f", {png}" if drawn else " (no chart: matplotlib is not installed)")
    )
    if res["meta"]["errors"]:
        print(f"errors: {res['meta']['errors']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
