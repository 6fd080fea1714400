"""Turn one benchmark result into the table (ratios and targets) and the PNG chart.

``targets`` (bench/targets.py) and ``chart`` (bench/chart.py) are re-exported here; the
arithmetic lives in bench/ratios.py; each newer step prints its own block (``lines``).
"""

from __future__ import annotations

from typing import Any

from bench import convoy, memory, realistic
from bench.chart import chart
from bench.ratios import (
    capacity,
    cpu_capacity,
    div,
    fmt,
    fx,
    grid,
    limit_capacity,
    limit_rate,
    limit_runs,
    loads,
    norm,
    steals,
)
from bench.targets import targets

__all__ = ["chart", "table", "targets"]

BASELINES = (
    ("saq", "saq", "concurrency=64"),
    ("arq", "arq", "max_jobs=64"),
    ("taskiq", "taskiq", "RedisStreamBroker, max_async_tasks=64"),
    ("dramatiq", "dramatiq", "RedisBroker, 1 process x 64 threads"),
    ("streaq", "streaq", "concurrency=64"),
)


def _cpu(res: dict[str, Any], key: str) -> list[str]:
    """CPU ms per delivery (all processes metered; the sender) and the CPU-bound capacity."""
    cpu = (res.get(key) or {}).get("cpu_ms")
    if not cpu:
        return ["", "", ""]
    own = sum(v for k, v in cpu.items() if k.startswith("worker") or k == "client")
    cap = capacity(res, key)
    lim = limit_capacity(res)
    shown = f"{cap:,.0f}/s" + (f" ({cap / lim:.2f}x)" if cap and lim else "") if cap else ""
    return [f"{cpu['total']:.3f}", f"{own:.3f}", shown]


def _throughput(res: dict[str, Any]) -> list[str]:
    conc = res["meta"]["config"]["concurrency"]
    runs = limit_runs(res)
    rows: list[list[str]] = []
    if runs:
        lim_cap = limit_capacity(res)
        rows.append(
            [
                f"limit: raw aiohttp sends, c={conc} (median)",
                fmt(limit_rate(res)),
                f"{min(runs):,.0f}-{max(runs):,.0f}",
                "1.00x",
                *_cpu(res, "limit" if res.get("limit") else "limit_end")[:2],
                fmt(lim_cap) + " (1.00x)" if lim_cap else "",
            ]
        )

    def thr(label: str, key: str, field: str = "per_s") -> None:
        r = res.get(key)
        if r and r.get(field):
            n = norm(res, key, field)
            rows.append([label, fmt(r[field]), fmt(r.get("limit_per_s")), fx(n), *_cpu(res, key)])
        repeats = (r or {}).get("repeats") or []
        if len(repeats) > 1:  # the row above is the median's (bench/run.py REPEATED)
            ratios = sorted(x["vs_limit"] for x in repeats)
            shown = " ".join(fx(x) for x in ratios)
            rows.append(
                [f"  its {len(repeats)} paired runs, the median above", "", "", shown, "", "", ""]
            )

    for w in (1, 2):
        s = "s" if w > 1 else ""
        thr(f"relay {w} worker{s}, drain", f"relay_drain_{w}")
        thr(f"relay {w} worker{s}, publish->receipt", f"relay_e2e_{w}", "e2e_per_s")
    thr("relay 1 worker, drain, on asyncio", "relay_drain_1_asyncio")
    for w in (1, 2):  # the raw client on uvloop, run right before drain1 and drain2
        r = res.get(f"relay_drain_{w}") or {}
        if r.get("limit_uvloop_per_s"):
            cpu = r["limit_uvloop_cpu_ms"]
            cap = cpu_capacity(cpu, res["meta"]["machine"]["nproc"] or 1)
            lim = r.get("limit_per_s") or limit_rate(res)
            rows.append(
                [
                    f"limit on uvloop, before drain{w}",
                    fmt(r["limit_uvloop_per_s"]),
                    fmt(lim),
                    fx(div(r["limit_uvloop_per_s"], lim)),
                    f"{cpu['total']:.3f}",
                    f"{cpu['client']:.3f}",
                    fmt(cap),
                ]
            )
    for key, label, _ in BASELINES:
        thr(f"{label} 1 worker process, drain", key)
    head = ["throughput (deliveries/s)", "rate", "limit then", "vs limit"]
    return grid([*head, "CPU ms/dlv", "sender CPU", "CPU model"], rows)


def _versus(res: dict[str, Any]) -> list[str]:
    """relay's 1-worker drain as a multiple of each baseline's (limit-normalised rates)."""
    d1 = norm(res, "relay_drain_1")
    c_d1 = capacity(res, "relay_drain_1")
    goals = {"saq": ">= 3x", "arq": ">= 4x"}
    rows = []
    for key, label, how in BASELINES:
        b = norm(res, key)
        if not b:
            continue
        rows.append(
            [
                f"{label} ({how})",
                fx(b),
                fx(div(d1, b)),
                fx(div(c_d1, capacity(res, key))),
                goals.get(key, "(none)"),
            ]
        )
    if not rows:
        return []
    head = ["baseline, 1 worker process", "vs limit", "relay is", "CPU model", "target"]
    return ["", *grid(head, rows)]


def _redis(res: dict[str, Any]) -> list[str]:
    spec = [
        ("relay_drain_1", "relay 1 worker, drain"),
        ("relay_drain_2", "relay 2 workers, drain"),
        ("relay_drain_1_asyncio", "relay 1 worker, drain, asyncio"),
        *((k, label) for k, label, _ in BASELINES),
    ]
    rows = []
    for key, label in spec:
        c = (res.get(key) or {}).get("redis")
        if not c:
            continue
        rows.append(
            [
                label,
                f"{c['commands_per_unit']:.1f}",
                f"{c['round_trips_per_unit']:.2f}",
                f"{c['script_calls_per_unit']:.2f}",
                f"{c['redis_cpu_ms_per_unit']:.4f}" if "redis_cpu_ms_per_unit" in c else "-",
                f"{c['command_usec_ms_per_unit']:.4f}" if "command_usec_ms_per_unit" in c else "-",
                f"{c['script_usec_ms_per_unit']:.4f}" if "script_usec_ms_per_unit" in c else "-",
            ]
        )
    if not rows:
        return []
    head = ["Redis per delivery (drain)", "commands", "round trips", "scripts", "CPU ms"]
    return ["", *grid([*head, "cmd usec ms", "of it scripts"], rows)]


def _other(res: dict[str, Any]) -> list[str]:
    more: list[list[str]] = []
    d1 = res.get("relay_drain_1")
    if d1:
        ing = d1["ingest"]
        more.append(
            [
                "ingest, 1 endpoint",
                f"{fmt(ing['per_s'])} events",
                f"{ing['clients']} clients, 1 API process; API CPU "
                f"{ing['cpu_ms']['api']:.3f} ms/event",
            ]
        )
    fo = res.get("fanout")
    if fo:
        more.append(
            [
                f"ingest, {fo['fanout']} endpoints/event",
                f"{fmt(fo['per_s'])} events",
                f"{fmt(fo['deliveries_per_s'])} deliveries; API CPU "
                f"{fo['cpu_ms']['api']:.3f} ms/event",
            ]
        )
        if "memory_per_extra_endpoint_bytes" in fo:
            more.append(
                [
                    "fan-out: memory per extra endpoint",
                    f"{fo['memory_per_extra_endpoint_bytes']:,} B pending",
                    f"per event pending: {fo['memory_per_event_1_endpoint_bytes']:,} B to 1 "
                    f"endpoint, {fo['memory_per_event_bytes']:,} B to {fo['fanout']} (used_memory);"
                    f" {fo['memory_usage_per_extra_endpoint_bytes']:,} B by MEMORY USAGE",
                ]
            )
    e1 = res.get("relay_e2e_1")
    if e1:
        more.append(["ingest while 1 worker delivers", f"{fmt(e1['publish_per_s'])} events", ""])
    lat = res.get("latency")
    if lat:
        r = lat["receipt_ms"]
        more.append(
            [
                f"latency @ {lat['offered_per_s']:,.0f}/s, 1 worker",
                f"p50 {r['p50']:.1f} / p95 {r['p95']:.1f} / p99 {r['p99']:.1f} ms",
                f"max {r['max']:.1f} ms; {lat['events']:,} events; publish answered "
                f"p50 {lat['publish_answer_ms']['p50']:.1f} / p99 "
                f"{lat['publish_answer_ms']['p99']:.1f} ms",
            ]
        )
    kind = res.get("meta", {}).get("config", {}).get("payload", "order")
    for step, what in (("relay_drain_1", kind), ("relay_drain_1_random", "random")):
        got = res.get(step)
        if got:
            more.append(
                [
                    f"relay: memory per delivery ({what})",
                    f"{got['memory_pending_bytes']:,} B pending",
                    f"{got['memory_succeeded_bytes']:,} B retained succeeded (1 KiB, {what})",
                ]
            )
    aio = res.get("relay_drain_1_asyncio")
    if aio and d1:
        model = div(capacity(res, "relay_drain_1"), capacity(res, "relay_drain_1_asyncio"))
        more.append(
            [
                "1 worker drain, uvloop vs asyncio",
                fx(div(norm(res, "relay_drain_1"), norm(res, "relay_drain_1_asyncio"))),
                f"{fmt(d1['per_s'])} on uvloop, {fmt(aio['per_s'])} on asyncio (each vs its own "
                f"limit run); CPU model {fx(model)}",
            ]
        )
    far = res.get("relay_drain_1_rtt2")
    if far:
        near = (d1 or {}).get("per_s")
        more.append(
            [
                "1 worker drain, Redis +2 ms RTT",
                f"{fmt(far['per_s'])} deliveries",
                "through a loopback delay proxy (1 ms each way)"
                + (f"; {far['per_s'] / near:.2f}x of the same drain at 0 ms" if near else ""),
            ]
        )
    rt = res.get("retry")
    if rt:
        c = rt["redis"]
        more.append(
            [
                "retry path (50% fail, 100ms)",
                f"{fmt(rt['attempts_per_s'])} attempts",
                f"{c['commands_per_unit']:.1f} commands, {c['round_trips_per_unit']:.2f} "
                f"round trips per attempt; {rt['succeeded']:,} ok, {rt['dead']:,} dead",
            ]
        )
    return ["", *grid(["other figures", "value", "detail"], more)] if more else []


def _targets(res: dict[str, Any]) -> list[str]:
    status = {True: "met", False: "MISSED", None: "-"}
    trows = [
        [
            t["target"],
            t["shown"],
            t["goal_shown"],
            status[t["met"]] if t["value"] is not None else "not run",
            t.get("model_shown") or "",
            status[t.get("model_met")] if t.get("model_shown") else "",
        ]
        for t in res["targets"]
    ]
    head = ["figure", "measured", "target", "status", "CPU model", "status"]
    return ["", *grid(head, trows)]


def table(res: dict[str, Any]) -> str:
    lines = _throughput(res) + _versus(res) + _redis(res) + _other(res)
    for block in (memory.lines(res), convoy.lines(res), realistic.lines(res)):
        if block:
            lines += ["", *block]
    lines += _targets(res)
    m = res["meta"]["machine"]
    ls, st = loads(res), steals(res)
    lines += [
        "",
        "vs limit: against the limit run made right before the step; relay is: relay's 1-worker"
        " drain over the baseline's, both so normalised.",
        "CPU ms/dlv: CPU time of every process metered (sender(s), Redis, receiver; plus API and"
        " publisher for publish->receipt) per delivery, from the first arrival on; sender CPU:"
        " the worker process(es), or the raw client; CPU model: the rate those CPU costs allow"
        " here, min(1000/ms of any one process, 1000 x cores/ms of all), and its ratio to the"
        " limit's.",
        "Redis CPU ms: INFO cpu (user + system of redis-server) over the drain, per delivery; cmd"
        " usec ms: the sum of INFO commandstats usec (commands inside scripts count twice: on"
        " their own line and within the script's).",
        f"machine: {m['nproc']} CPUs, {m['cpu']}; Python {m['python']}; "
        f"Redis {m['redis']}; N={res['meta']['config']['n']:,}; "
        f"run took {res['meta']['runtime_s']:.0f}s"
        + (f"; 1-min load average {min(ls):.1f}-{max(ls):.1f}" if ls else "")
        + (f"; CPU stolen by the hypervisor {min(st):.0%}-{max(st):.0%}" if st else ""),
    ]
    return "\n".join(lines)
