"""The arithmetic of the report: rates against the limit, the CPU model, formatting."""

from __future__ import annotations

from typing import Any


def rate(r: dict[str, Any] | None, key: str = "per_s") -> float | None:
    return None if not r else r.get(key)


def limit_runs(res: dict[str, Any]) -> list[float]:
    """Every limit measurement of the run: the standalone ones and those paired with steps."""
    runs = [rate(res.get(k)) for k in ("limit", "limit_end")]
    for v in res.values():
        if isinstance(v, dict):  # a repeated step's runs each had their own
            runs += [x.get("limit_per_s") for x in v.get("repeats") or [v]]
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
    value = rate(r, field)
    lim = (r or {}).get("limit_per_s") or limit_rate(res)
    return value / lim if value and lim else None


def uvloop_limit(res: dict[str, Any], key: str) -> tuple[float | None, float | None]:
    """A step's rate over the raw client's on uvloop measured right before it, and the
    CPU model's ratio likewise (None, None when the step has no such run)."""
    r = res.get(key) or {}
    lim = r.get("limit_uvloop_per_s")
    if not lim:
        return None, None
    cores = res["meta"]["machine"]["nproc"] or 1
    cap = cpu_capacity(r.get("limit_uvloop_cpu_ms"), cores)
    return div(rate(r), lim), div(capacity(res, key), cap)


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


def fx(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def div(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def fmt(x: float | None, unit: str = "/s") -> str:
    return "-" if x is None else f"{x:,.0f}{unit}"


def loads(res: dict[str, Any]) -> list[float]:
    """The 1-minute load average before each step."""
    return [
        v["loadavg_1m_before"]
        for v in res.values()
        if isinstance(v, dict) and v.get("loadavg_1m_before") is not None
    ]


def steals(res: dict[str, Any]) -> list[float]:
    """The share of CPU time the hypervisor took (steal) during each step."""
    return [
        v["steal_share"]
        for v in res.values()
        if isinstance(v, dict) and v.get("steal_share") is not None
    ]


def grid(head: list[str], rows: list[list[str]]) -> list[str]:
    """A plain-text table: first column left-aligned, the others right-aligned."""
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
