"""Tests for relay.domain.retry."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from relay.domain.retry import (
    Decision,
    decide,
    jittered,
    max_attempts_for,
    parse_duration,
    parse_retry_after,
    parse_schedule,
)

SCHEDULE = (5.0, 60.0, 600.0)
MAX = max_attempts_for(SCHEDULE)


def _decide(
    status: int | None,
    attempts: int,
    *,
    retry_after: float | None = None,
    retry_after_cap: float = 3600.0,
) -> Decision:
    return decide(
        status=status,
        attempts=attempts,
        max_attempts=MAX,
        schedule=SCHEDULE,
        jitter=0.0,
        retry_after=retry_after,
        retry_after_cap=retry_after_cap,
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("5s", 5.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("7d", 604800.0),
        ("10", 10.0),
        ("0.5", 0.5),
        (" 1.5h ", 5400.0),
        ("0", 0.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", " ", "-5s", "-1", "5x", "5 sec", "s", "1e3", "inf", "nan", "5M", "²"]
)
def test_parse_duration_invalid(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_parse_schedule() -> None:
    assert parse_schedule("5s, 1m ,10m,  2h") == (5.0, 60.0, 600.0, 7200.0)
    assert parse_schedule("30") == (30.0,)


@pytest.mark.parametrize("text", ["", " ", ",", "5s,", "5s,,1m", "5s, bogus"])
def test_parse_schedule_invalid(text: str) -> None:
    with pytest.raises(ValueError):
        parse_schedule(text)


def test_jitter_bounds() -> None:
    assert jittered(100.0, 0.2, lambda: 0.0) == pytest.approx(80.0)
    assert jittered(100.0, 0.2, lambda: 1.0) == pytest.approx(120.0)
    assert jittered(100.0, 0.2, lambda: 0.5) == pytest.approx(100.0)
    assert jittered(100.0, 0.0, lambda: 1.0) == pytest.approx(100.0)
    assert jittered(100.0, 1.0, lambda: 0.0) == pytest.approx(0.0)
    for _ in range(200):
        assert 80.0 <= jittered(100.0, 0.2) <= 120.0


@pytest.mark.parametrize("jitter", [-0.1, 1.1])
def test_jitter_out_of_range(jitter: float) -> None:
    with pytest.raises(ValueError):
        jittered(1.0, jitter)


def test_parse_retry_after_seconds() -> None:
    assert parse_retry_after("120", now=0.0) == 120.0
    assert parse_retry_after(" 0 ", now=0.0) == 0.0


@pytest.mark.parametrize("value", [None, "", "  ", "soon", "-5", "1.5", "²"])
def test_parse_retry_after_unparseable(value: str | None) -> None:
    assert parse_retry_after(value, now=0.0) is None


def test_parse_retry_after_http_date() -> None:
    when = datetime(2026, 11, 30, 7, 53, 39, tzinfo=UTC)
    header = format_datetime(when, usegmt=True)
    assert header == "Mon, 30 Nov 2026 07:53:39 GMT"
    assert parse_retry_after(header, now=when.timestamp() - 90) == pytest.approx(90.0)
    assert parse_retry_after(header, now=when.timestamp() + 90) == 0.0  # past: never negative


def test_max_attempts_for() -> None:
    assert max_attempts_for(SCHEDULE) == 4
    assert max_attempts_for([1.0]) == 2


@pytest.mark.parametrize("status", [200, 201, 204, 299])
def test_2xx_succeeds(status: int) -> None:
    assert _decide(status, 1) == Decision("succeeded", 0.0)
    assert _decide(status, MAX) == Decision("succeeded", 0.0)


@pytest.mark.parametrize("attempts", [1, 2, MAX])
def test_410_is_dead_at_once(attempts: int) -> None:
    assert _decide(410, attempts) == Decision("dead", 0.0)


@pytest.mark.parametrize("status", [None, 500, 404, 301, 302, 199, 429, 503])
def test_failures_retry_with_schedule(status: int | None) -> None:
    assert _decide(status, 1) == Decision("retry", 5.0)
    assert _decide(status, 2) == Decision("retry", 60.0)
    assert _decide(status, 3) == Decision("retry", 600.0)


@pytest.mark.parametrize("status", [None, 500, 302, 429])
def test_exhausted_is_dead(status: int | None) -> None:
    assert _decide(status, MAX) == Decision("dead", 0.0)
    assert _decide(status, MAX + 1) == Decision("dead", 0.0)


def test_delay_clamps_to_last_schedule_entry() -> None:
    d = decide(status=500, attempts=7, max_attempts=10, schedule=SCHEDULE, jitter=0.0)
    assert d == Decision("retry", 600.0)


def test_decide_applies_jitter() -> None:
    lo = decide(
        status=500, attempts=1, max_attempts=MAX, schedule=SCHEDULE, jitter=0.5, rand=lambda: 0.0
    )
    hi = decide(
        status=500, attempts=1, max_attempts=MAX, schedule=SCHEDULE, jitter=0.5, rand=lambda: 1.0
    )
    assert lo.delay == pytest.approx(2.5)
    assert hi.delay == pytest.approx(7.5)


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_longer_wins_but_capped(status: int) -> None:
    assert _decide(status, 1, retry_after=120.0) == Decision("retry", 120.0)
    assert _decide(status, 1, retry_after=10_000.0) == Decision("retry", 3600.0)
    assert _decide(status, 1, retry_after=10_000.0, retry_after_cap=900.0) == Decision(
        "retry", 900.0
    )


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_shorter_does_not_shorten(status: int) -> None:
    assert _decide(status, 2, retry_after=1.0) == Decision("retry", 60.0)


@pytest.mark.parametrize("status", [500, 502, None])
def test_retry_after_ignored_for_other_statuses(status: int | None) -> None:
    assert _decide(status, 1, retry_after=120.0) == Decision("retry", 5.0)


def test_retry_after_does_not_revive_exhausted() -> None:
    assert _decide(429, MAX, retry_after=30.0) == Decision("dead", 0.0)
