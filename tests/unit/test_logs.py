"""relay.logs' own timestamp processor: the text structlog's ISO/UTC TimeStamper writes,
from a second formatted once (a worker writes a line per delivery attempt)."""

from __future__ import annotations

import datetime
import re

import pytest
import structlog

from relay import logs

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z")


@pytest.mark.parametrize(
    "now",
    [1_764_617_004.669336, 1_764_617_005.0, 1_764_617_005.000002, 1_764_617_059.999999],
)
def test_timestamp_reads_as_structlogs_iso_utc(monkeypatch: pytest.MonkeyPatch, now: float) -> None:
    monkeypatch.setattr(logs.time, "time", lambda: now)
    ours = logs.add_timestamp(None, "info", {})["timestamp"]
    expected = datetime.datetime.fromtimestamp(now, datetime.UTC)
    assert ISO_UTC.fullmatch(ours), ours
    got = datetime.datetime.fromisoformat(ours.replace("Z", "+00:00"))
    assert abs((got - expected).total_seconds()) <= 1e-6
    # the same text as structlog's, up to the rounding of the last microsecond
    monkeypatch.setattr(structlog.processors.datetime, "datetime", _Frozen(expected))
    theirs = structlog.processors.TimeStamper(fmt="iso", utc=True)(None, "info", {})
    assert ours[:19] == theirs["timestamp"][:19]
    assert ("." in ours) == ("." in theirs["timestamp"])


def test_timestamp_follows_the_clock_across_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    stamps = []
    for now in (100.5, 100.75, 101.25, 99.5):
        monkeypatch.setattr(logs.time, "time", lambda now=now: now)
        stamps.append(logs.add_timestamp(None, "info", {})["timestamp"])
    assert stamps == [
        "1970-01-01T00:01:40.500000Z",
        "1970-01-01T00:01:40.750000Z",
        "1970-01-01T00:01:41.250000Z",
        "1970-01-01T00:01:39.500000Z",
    ]


class _Frozen:
    """Stands in for datetime.datetime inside structlog: ``now`` is fixed."""

    def __init__(self, at: datetime.datetime) -> None:
        self.at = at

    def now(self, tz: datetime.tzinfo | None = None) -> datetime.datetime:
        return self.at
