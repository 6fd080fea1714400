"""Turn one benchmark result into the table (ratios and targets) and the PNG chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _rate(r: dict[str, Any] | None, key: str = "per_s") -> float | None:
    return None if not r else r.get(key)


def limit_runs(res: dict[str, Any]) -> list[float]:
    """Every limit measurement of the run: the standalone ones and those paired with steps."""
    runs = [_rate(res.get(k)) for k in ("limit", "limit_end")]
    runs += [v.get("limit_per_s") for v in res.values() if isinstance(v, dict)]
    return [x for x in runs if x]


def limit_rate(res: dict[str, Any]) -> float | None:
    """The ceiling for display: the median of all limit runs."""
    runs = sorted(limit_runs(res))
    if not runs:
        return None
    mid = len(runs) // 2
    return runs[mid] if len(runs) % 2 else (runs[mid - 1] + runs[mid]) / 2


def norm(res: dict[str, Any], key: str, field: str = "per_s") -> float | None:
    """A step's rate as a fraction of the limit measured right before it (else the median)."""
    r = res.get(key)
    rate = _rate(r, field)
    lim = (r or {}).get("limit_per_s") or limit_rate(res)
    return rate / lim if rate and lim else None


def cpu_capacity(cpu: dict[str, float] | None, cores: int) -> float | None:
    """What these CPU costs allow per second on this machine, whatever else runs on it: no
    single-threaded process can use more than one core, nor all of them more than the
    machine has. min(1000 / ms of each process, 1000 * cores / ms of all)."""
    if not cpu or not cpu.get("total"):
        return None
    per_proc = [1000 / v for k, v in cpu.items() if k != "total" and v > 0]
    return min([*per_proc, 1000 * cores / cpu["total"]])


def capacity(res: dict[str, Any], key: str) -> float | None:
    cpu = (res.get(key) or {}).get("cpu_ms")
    return cpu_capacity(cpu, res["meta"]["machine"]["nproc"] or 1)


def limit_capacity(res: dict[str, Any]) -> float | None:
    caps = [c for c in (capacity(res, "limit"), capacity(res, "limit_end")) if c]
    return sum(caps) / len(caps) if caps else None


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _fmt(x: float | None, unit: str = "/s") -> str:
    return "-" if x is None else f"{x:,.0f}{unit}"


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each met or missed (or not run). Throughput ratios compare
    limit-normalised rates, so drift between steps cancels out; ``model`` is the same
    ratio from CPU cost per delivery (see ``cpu_capacity``), which load elsewhere on a
    shared machine disturbs far less."""
    d1 = norm(res, "relay_drain_1")
    e1 = norm(res, "relay_e2e_1", "e2e_per_s")
    saq, arq = norm(res, "saq"), norm(res, "arq")
    lim_cap = limit_capacity(res)
    c_d1, c_e1 = capacity(res, "relay_drain_1"), capacity(res, "relay_e2e_1")
    c_saq, c_arq = capacity(res, "saq"), capacity(res, "arq")
    lat = res.get("latency")
    d1r = res.get("relay_drain_1") or {}
    cost, ingest = d1r.get("redis"), d1r.get("ingest")
    cores = res["meta"]["machine"]["nproc"] or 1

    def t(
        name: str,
        value: float | None,
        goal: float,
        higher: bool,
        show: str,
        model: float | None = None,
        model_show: str = "",
    ) -> dict[str, Any]:
        def ok(v: float | None) -> bool | None:
            return None if v is None else (v >= goal if higher else v <= goal)

        return {
            "target": name,
            "value": value,
            "goal": goal,
            "met": ok(value),
            "shown": show,
            "model": model,
            "model_met": ok(model),
            "model_shown": model_show,
        }

    def ratio(
        name: str, a: float | None, goal: float, ca: float | None, cb: float | None
    ) -> dict[str, Any]:
        model = _div(ca, cb)
        return t(name, a, goal, True, _x(a), model, _x(model))

    out = [
        ratio("relay 1 worker drain >= 0.5 x limit", d1, 0.5, c_d1, lim_cap),
        ratio("relay 1 worker e2e >= 0.5 x limit", e1, 0.5, c_e1, lim_cap),
        ratio("relay 1 worker >= 2 x saq (drain)", _div(d1, saq), 2.0, c_d1, c_saq),
        ratio("relay 1 worker >= 3 x arq (drain)", _div(d1, arq), 3.0, c_d1, c_arq),
    ]
    p99 = lat["receipt_ms"]["p99"] if lat else None
    rate = int(lat["rate"]) if lat else 500
    shown = "-" if p99 is None else f"{p99:.1f} ms"
    out.append(t(f"p99 publish-to-receipt <= 25 ms at {rate}/s", p99, 25.0, False, shown))
    rt = cost["round_trips_per_unit"] if cost else None
    shown = "-" if rt is None else f"{rt:.2f}"
    out.append(t("<= 3 Redis round trips per delivery (drain)", rt, 3.0, False, shown))
    ing = ingest["per_s"] if ingest else None
    c_ing = cpu_capacity(ingest.get("cpu_ms"), cores) if ingest else None
    out.append(
        t(
            "ingest >= 4,000 events/s per API process",
            ing,
            4000.0,
            True,
            _fmt(ing),
            c_ing,
            _fmt(c_ing),
        )
    )
    return out


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


def table(res: dict[str, Any]) -> str:
    conc = res["meta"]["config"]["concurrency"]
    saq, arq = norm(res, "saq"), norm(res, "arq")
    runs = limit_runs(res)
    rows: list[list[str]] = []
    if runs:
        rows.append(
            [
                f"limit: raw aiohttp sends, c={conc} (median)",
                _fmt(limit_rate(res)),
                f"{min(runs):,.0f}-{max(runs):,.0f}",
                "1.00x",
                "",
                "",
                *_cpu(res, "limit" if res.get("limit") else "limit_end")[:2],
                _fmt(limit_capacity(res)) + " (1.00x)" if limit_capacity(res) else "",
            ]
        )

    def thr(label: str, key: str, field: str = "per_s", vs_queues: bool = False) -> None:
        r = res.get(key)
        if not r or not r.get(field):
            return
        n = norm(res, key, field)
        rows.append(
            [
                label,
                _fmt(r[field]),
                _fmt(r.get("limit_per_s")),
                _x(n),
                _x(_div(n, saq)) if vs_queues else "",
                _x(_div(n, arq)) if vs_queues else "",
                *_cpu(res, key),
            ]
        )

    for w in (1, 2):
        s = "s" if w > 1 else ""
        thr(f"relay {w} worker{s}, drain", f"relay_drain_{w}", vs_queues=True)
        thr(f"relay {w} worker{s}, publish->receipt", f"relay_e2e_{w}", "e2e_per_s", True)
    thr("saq 1 worker, drain", "saq")
    thr("arq 1 worker, drain", "arq")
    head = ["throughput (deliveries/s)", "rate", "limit then", "vs limit", "vs saq", "vs arq"]
    lines = _grid([*head, "CPU ms/dlv", "sender CPU", "CPU model"], rows)

    more: list[list[str]] = []
    d1 = res.get("relay_drain_1")
    if d1:
        ing = d1["ingest"]
        more.append(
            [
                "ingest, 1 endpoint",
                f"{_fmt(ing['per_s'])} events",
                f"{ing['clients']} clients, 1 API process; API CPU "
                f"{ing['cpu_ms']['api']:.3f} ms/event",
            ]
        )
    fo = res.get("fanout")
    if fo:
        more.append(
            [
                f"ingest, {fo['fanout']} endpoints/event",
                f"{_fmt(fo['per_s'])} events",
                f"{_fmt(fo['deliveries_per_s'])} deliveries; API CPU "
                f"{fo['cpu_ms']['api']:.3f} ms/event",
            ]
        )
    e1 = res.get("relay_e2e_1")
    if e1:
        more.append(["ingest while 1 worker delivers", f"{_fmt(e1['publish_per_s'])} events", ""])
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
    for key, label in (("relay_drain_1", "relay"), ("saq", "saq"), ("arq", "arq")):
        c = (res.get(key) or {}).get("redis")
        if c:
            more.append(
                [
                    f"{label}: Redis per delivery",
                    f"{c['commands_per_unit']:.1f} commands",
                    f"{c['round_trips_per_unit']:.2f} round trips, "
                    f"{c['script_calls_per_unit']:.2f} script calls",
                ]
            )
    if d1:
        more.append(
            [
                "relay: memory per delivery",
                f"{d1['memory_pending_bytes']:,} B pending",
                f"{d1['memory_succeeded_bytes']:,} B retained succeeded (1 KiB payload)",
            ]
        )
    far = res.get("relay_drain_1_rtt2")
    if far:
        near = (d1 or {}).get("per_s")
        more.append(
            [
                "1 worker drain, Redis +2 ms RTT",
                f"{_fmt(far['per_s'])} deliveries",
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
                f"{_fmt(rt['attempts_per_s'])} attempts",
                f"{c['commands_per_unit']:.1f} commands, {c['round_trips_per_unit']:.2f} "
                f"round trips per attempt; {rt['succeeded']:,} ok, {rt['dead']:,} dead",
            ]
        )
    if more:
        lines += ["", *_grid(["other figures", "value", "detail"], more)]

    status = {True: "met", False: "MISSED", None: "-"}
    trows = [
        [
            t["target"],
            t["shown"],
            status[t["met"]] if t["value"] is not None else "not run",
            t.get("model_shown") or "",
            status[t.get("model_met")] if t.get("model_shown") else "",
        ]
        for t in res["targets"]
    ]
    lines += ["", *_grid(["target", "measured", "status", "CPU model", "status"], trows)]
    m = res["meta"]["machine"]
    loads = [
        v["loadavg_1m_before"]
        for v in res.values()
        if isinstance(v, dict) and v.get("loadavg_1m_before") is not None
    ]
    lines += [
        "",
        "vs limit: against the limit run made right before the step; vs saq/arq: "
        "ratio of those normalised rates.",
        "CPU ms/dlv: CPU time of every process metered (sender(s), Redis, receiver; plus API and"
        " publisher for publish->receipt) per delivery, from the first arrival on; sender CPU:"
        " the worker process(es), or the raw client; CPU model: the rate those CPU costs allow"
        " here, min(1000/ms of any one process, 1000 x cores/ms of all), and its ratio to the"
        " limit's.",
        f"machine: {m['nproc']} CPUs, {m['cpu']}; Python {m['python']}; "
        f"Redis {m['redis']}; N={res['meta']['config']['n']:,}; "
        f"run took {res['meta']['runtime_s']:.0f}s"
        + (f"; 1-min load average {min(loads):.1f}-{max(loads):.1f}" if loads else ""),
    ]
    return "\n".join(lines)


def _grid(head: list[str], rows: list[list[str]]) -> list[str]:
    cells = [head, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    out = []
    for j, r in enumerate(cells):
        out.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def chart(res: dict[str, Any], path: Path) -> bool:
    """Throughput (measured, and the CPU model) as multiples of the limit, with the 0.5 x
    target; latency percentiles with the 25 ms p99 target. False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    lim, lim_cap = limit_rate(res), limit_capacity(res)
    spec = (
        ("limit", "per_s", "limit (raw aiohttp)", "#888888"),
        ("relay_drain_1", "per_s", "relay 1 worker", "#1f77b4"),
        ("relay_e2e_1", "e2e_per_s", "relay 1 worker, e2e", "#6baed6"),
        ("relay_drain_2", "per_s", "relay 2 workers", "#1f77b4"),
        ("relay_e2e_2", "e2e_per_s", "relay 2 workers, e2e", "#6baed6"),
        ("saq", "per_s", "saq 1 worker", "#ff7f0e"),
        ("arq", "per_s", "arq 1 worker", "#d62728"),
    )
    rows = []  # label, measured x limit, per second, CPU model x limit, colour
    for key, field, label, color in spec:
        if key == "limit":
            if lim:
                rows.append((label, 1.0, lim, 1.0 if lim_cap else None, color))
            continue
        n = norm(res, key, field)
        if n:
            model = _div(capacity(res, key), lim_cap)
            rows.append((label, n, res[key][field], model, color))
    rows.reverse()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13.5, 5.6), gridspec_kw={"width_ratios": [3, 2]})
    ys = list(range(len(rows)))
    h = 0.38
    ax1.barh(
        [y + h / 2 for y in ys],
        [r[1] for r in rows],
        height=h,
        color=[r[4] for r in rows],
        label="measured (vs the limit run just before)",
    )
    ax1.barh(
        [y - h / 2 for y in ys],
        [r[3] or 0 for r in rows],
        height=h,
        color=[r[4] for r in rows],
        alpha=0.35,
        hatch="//",
        edgecolor="#444444",
        linewidth=0,
        label="CPU model (from CPU ms per delivery)",
    )
    for y, (_, x, per_s, model, _) in zip(ys, rows, strict=True):
        ax1.text(x, y + h / 2, f" {x:.2f}x  ({per_s:,.0f}/s)", va="center", fontsize=8.5)
        if model:
            ax1.text(model, y - h / 2, f" {model:.2f}x", va="center", fontsize=8, color="#444444")
    ax1.set_yticks(ys, [r[0] for r in rows])
    ax1.axvline(0.5, color="#2ca02c", linestyle="--", linewidth=1, label="target 0.5x limit")
    top = max([r[1] for r in rows] + [r[3] or 0 for r in rows] + [1.0])
    ax1.set_xlim(0, top * 1.4)
    from matplotlib.patches import Patch

    handles = [
        Patch(color="#777777", label="measured (vs the limit run just before)"),
        Patch(facecolor="#cccccc", hatch="//", edgecolor="#444444", label="CPU model"),
        ax1.get_lines()[0],
    ]
    ax1.legend(handles=handles, loc="lower right", fontsize=8)
    ax1.set_xlabel(
        "throughput as a multiple of the raw-client limit\n"
        "(drain: first to last arrival; e2e: first publish to last arrival)"
    )
    cfg = res["meta"]["config"]
    ax1.set_title(f"Throughput, N={cfg['n']:,} deliveries, concurrency {cfg['concurrency']}")
    lat = res.get("latency")
    if lat:
        r = lat["receipt_ms"]
        names = ["p50", "p95", "p99", "max"]
        vals = [r[k] for k in names]
        ax2.bar(names, vals, color=["#1f77b4", "#1f77b4", "#1f77b4", "#9ecae1"])
        for x, v in enumerate(vals):
            ax2.text(x, v, f"{v:.1f}", ha="center", va="bottom", fontsize=9)
        ax2.axhline(25, color="#2ca02c", linestyle="--", linewidth=1, label="p99 target 25 ms")
        ax2.legend(loc="upper left", fontsize=8)
        ax2.set_ylim(0, max([*vals, 25]) * 1.2)
        ax2.set_ylabel("ms")
        ax2.set_title(f"relay publish-to-receipt latency at {lat['offered_per_s']:,.0f} events/s")
    else:
        ax2.set_axis_off()
    m = res["meta"]["machine"]
    loads = [
        v["loadavg_1m_before"]
        for v in res.values()
        if isinstance(v, dict) and v.get("loadavg_1m_before") is not None
    ]
    load = f"  ·  load avg {min(loads):.1f}-{max(loads):.1f}" if loads else ""
    fig.suptitle(
        f"relay benchmark  ·  {m['nproc']} CPUs, {m['cpu']}  ·  Python {m['python']}"
        f"  ·  Redis {m['redis']}  ·  {res['meta']['started']}{load}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
