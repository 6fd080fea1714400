"""Per-endpoint, per-minute counters of attempts: what a worker counts, and what a reader
derives from them (success rate, attempts per minute, latency percentiles, failures by
status or error).

Counters live in one Redis hash per endpoint and hour (``Keys.endpoint_stats``), under the
endpoint's hash tag, incremented by ``settle.lua`` with the breaker's own update (no
extra round trip). A field is ``<minute of the hour>:<name>``; names:

* ``n``: attempts with a verdict on the endpoint (a request was made), ``ok``: the 2xx
  among them, and a broker destination's acknowledged publishes;
* ``s<code>``: the attempts answered with that status that were not a success, ``e<error>``:
  those that had no answer (``timeout``, ``connection``, ``tls``, ...);
* ``l<i>``: answered attempts whose duration fell in latency bucket ``i``
  (:data:`LATENCY_BOUNDS_MS`; the last, one past them, is everything slower).

Only fields with a count are written, so a quiet minute costs nothing; a hash expires
:data:`RETAIN_MS` after its last write, which bounds an endpoint's counters to about a
day of hours. All times are the worker's clock when the batch was settled.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

LATENCY_BOUNDS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
HOUR_MS = 3_600_000
MINUTE_MS = 60_000
RETAIN_MS = 25 * HOUR_MS  # the longest window (24 h) and the hour it starts in
WINDOWS = {"1h": (HOUR_MS, MINUTE_MS), "24h": (24 * HOUR_MS, 10 * MINUTE_MS)}  # span, step


def stat_of(succeeded: bool, status: int | None, error: str, duration_ms: float) -> str:
    """What one attempt adds to the counters: ``"<class> <latency bucket>"`` for an
    answer (class ``ok`` when it ``succeeded``: a 2xx, or a broker's acknowledgement,
    which has no status; else ``s<code>``), ``"e<error>"`` for an attempt that had none."""
    if succeeded:
        kind = "ok"
    elif status is None:
        return f"e{error or 'error'}"
    else:
        kind = f"s{status}"
    return f"{kind} {bisect.bisect_left(LATENCY_BOUNDS_MS, duration_ms)}"


def increments(stats: Iterable[str]) -> dict[str, int]:
    """The counter increments of a batch of :func:`stat_of` values (empty ones skipped)."""
    out: Counter[str] = Counter()
    for stat in stats:
        if not stat:
            continue
        kind, _, bucket = stat.partition(" ")
        out["n"] += 1
        out[kind] += 1
        if bucket:
            out[f"l{bucket}"] += 1
    return dict(out)


def hour_of(at_ms: int) -> int:
    return at_ms // HOUR_MS


def minute_in_hour(at_ms: int) -> int:
    return (at_ms % HOUR_MS) // MINUTE_MS


def window_start(window: str, now_ms: int) -> int:
    """When a window's first step starts: its last step is the one holding ``now_ms``."""
    span, step = WINDOWS[window]
    return (now_ms // step) * step - span + step


def hours_of_window(window: str, now_ms: int) -> list[int]:
    """The hours whose hashes a window ending at ``now_ms`` reads, oldest first."""
    return list(range(hour_of(window_start(window, now_ms)), hour_of(now_ms) + 1))


def percentile(buckets: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a latency histogram, interpolated linearly inside its
    bucket; the open last bucket answers its lower bound. None for an empty one."""
    total = sum(buckets)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(buckets):
        if count and seen + count >= rank:
            low = LATENCY_BOUNDS_MS[i - 1] if i > 0 else 0
            if i >= len(LATENCY_BOUNDS_MS):
                return float(low)
            high = LATENCY_BOUNDS_MS[i]
            return round(low + (high - low) * (rank - seen) / count, 1)
        seen += count
    return float(LATENCY_BOUNDS_MS[-1])


def summarize(window: str, now_ms: int, hashes: Mapping[int, Mapping[str, str]]) -> dict[str, Any]:
    """The window's figures from the hashes of its hours (``{hour: fields}``): totals,
    success rate, a series of every step (zeros included, oldest first, the last still
    running), latency percentiles and histogram, failures by status or error."""
    span, step = WINDOWS[window]
    first = window_start(window, now_ms)
    steps = span // step
    series = [{"at": first + i * step, "attempts": 0, "successes": 0} for i in range(steps)]
    latency = [0] * (len(LATENCY_BOUNDS_MS) + 1)
    failures: Counter[str] = Counter()
    for hour, fields in hashes.items():
        for field, raw in fields.items():
            minute, _, name = field.partition(":")
            at = hour * HOUR_MS + int(minute) * MINUTE_MS
            if not first <= at < first + span:
                continue
            count = int(raw)
            point = series[(at - first) // step]
            if name == "n":
                point["attempts"] += count
            elif name == "ok":
                point["successes"] += count
            elif name.startswith("l"):
                latency[min(int(name[1:]), len(latency) - 1)] += count
            else:
                failures[name] += count
    attempts = sum(p["attempts"] for p in series)
    successes = sum(p["successes"] for p in series)
    for p in series:
        p["failures"] = p["attempts"] - p["successes"]
    return {
        "window": window,
        "step_seconds": step // 1000,
        "from": first,
        "until": first + span,
        "attempts": attempts,
        "successes": successes,
        "failures": attempts - successes,
        "success_rate": round(successes / attempts, 4) if attempts else None,
        "latency_ms": {
            "p50": percentile(latency, 0.5),
            "p90": percentile(latency, 0.9),
            "p99": percentile(latency, 0.99),
            "buckets": [
                {"le": LATENCY_BOUNDS_MS[i] if i < len(LATENCY_BOUNDS_MS) else None, "count": c}
                for i, c in enumerate(latency)
            ],
        },
        "series": series,
        "failures_by": [
            {
                "status_code": int(name[1:]) if name.startswith("s") else None,
                "error": name[1:] if name.startswith("e") else None,
                "count": count,
            }
            for name, count in sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
    }
