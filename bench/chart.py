"""The PNG chart of one benchmark result (``latest.png``): throughput as multiples of the
limit, and the latency percentiles. Needs matplotlib (the ``bench`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.ratios import capacity, div, limit_capacity, limit_rate, loads, norm
from bench.targets import DRAIN1_GOAL


def chart(res: dict[str, Any], path: Path) -> bool:
    """Throughput (measured, and the CPU model) as multiples of the limit, with the 1-worker
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
        ("relay_drain_1_asyncio", "per_s", "relay 1 worker, asyncio", "#17becf"),
        ("saq", "per_s", "saq 1 worker", "#ff7f0e"),
        ("arq", "per_s", "arq 1 worker", "#d62728"),
        ("taskiq", "per_s", "taskiq 1 worker", "#9467bd"),
        ("dramatiq", "per_s", "dramatiq 1 process", "#8c564b"),
        ("streaq", "per_s", "streaq 1 worker", "#e377c2"),
    )
    rows = []  # label, measured x limit, per second, CPU model x limit, colour
    for key, field, label, color in spec:
        if key == "limit":
            if lim:
                rows.append((label, 1.0, lim, 1.0 if lim_cap else None, color))
            continue
        n = norm(res, key, field)
        if n:
            model = div(capacity(res, key), lim_cap)
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
    ax1.axvline(DRAIN1_GOAL, color="#2ca02c", linestyle="--", linewidth=1, label="1-worker target")
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
    ls = loads(res)
    load = f"  ·  load avg {min(ls):.1f}-{max(ls):.1f}" if ls else ""
    fig.suptitle(
        f"relay benchmark  ·  {m['nproc']} CPUs, {m['cpu']}  ·  Python {m['python']}"
        f"  ·  Redis {m['redis']}  ·  {res['meta']['started']}{load}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
