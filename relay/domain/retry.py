"""Retry policy: duration/schedule parsing, jitter, Retry-After and outcome decisions."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Literal

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)", re.ASCII)


def parse_duration(text: str) -> float:
    """Parse ``500ms``, ``5s``, ``5m``, ``2h``, ``7d`` or a bare number of seconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"invalid duration {text!r}: expected e.g. 500ms, 5s, 5m, 2h, 7d or 10")
    number, unit = m.groups()
    if unit and unit not in _UNITS:
        raise ValueError(f"invalid duration {text!r}: unknown unit {unit!r} (ms, s, m, h, d)")
    return float(number) * _UNITS[unit or "s"]


def parse_schedule(text: str) -> tuple[float, ...]:
    """Parse a comma-separated list of durations (at least one) into seconds."""
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise ValueError("retry schedule must contain at least one duration")
    if not all(parts):
        raise ValueError(f"retry schedule has an empty entry: {text!r}")
    return tuple(parse_duration(p) for p in parts)


def jittered(delay: float, jitter: float, rand: Callable[[], float] = random.random) -> float:
    """Return ``delay`` scaled by a random factor in ``[1 - jitter, 1 + jitter]``."""
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be in [0, 1], got {jitter}")
    return delay * (1.0 - jitter + 2.0 * jitter * rand())


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date).

    Returns None when absent or unparseable; never negative.
    """
    if value is None or not (value := value.strip()):
        return None
    if value.isascii() and value.isdigit():
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True)
class Decision:
    """What to do after an attempt."""

    outcome: Literal["succeeded", "retry", "dead"]
    delay: float  # seconds until next attempt, 0 unless retry


def max_attempts_for(schedule: Sequence[float]) -> int:
    """Total attempts allowed: the first one plus one per schedule entry."""
    return len(schedule) + 1


def decide(
    *,
    status: int | None,
    attempts: int,
    max_attempts: int,
    schedule: Sequence[float],
    jitter: float,
    retry_after: float | None = None,
    retry_after_cap: float = 3600.0,
    rand: Callable[[], float] = random.random,
) -> Decision:
    """Classify a finished attempt.

    ``status`` None means a transport error; ``attempts`` counts attempts made so far
    including the one that just finished.
    """
    if status is not None and 200 <= status < 300:
        return Decision("succeeded", 0.0)
    if status == 410 or attempts >= max_attempts:
        return Decision("dead", 0.0)
    if not schedule:
        raise ValueError("retry schedule must not be empty")
    delay = jittered(schedule[min(max(attempts, 1) - 1, len(schedule) - 1)], jitter, rand)
    if status in (429, 503) and retry_after is not None:
        delay = max(delay, min(retry_after, retry_after_cap))
    return Decision("retry", delay)
