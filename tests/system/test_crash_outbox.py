"""A short outbox round of the crash-injection suite (``scripts/crash_outbox.py``).

Real processes: redis-server, a private PostgreSQL, 3 ``relay outbox`` connectors and 2
``relay worker`` processes SIGKILLed at random (and some connectors exiting through the
test hook right after Redis acknowledged an event, before its row is removed), while a
writer commits and rolls back outbox transactions. Every committed row must become
exactly one event and be received; no rolled-back row may.

Fails with the connector's Idempotency-Key removed: the round reports duplicate events
(rows published again after a connector died in that window).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.helpers.pg import pg_bindir

ROOT = Path(__file__).resolve().parents[2]


def test_outbox_crash_round_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    if pg_bindir() is None:
        pytest.fail("no PostgreSQL binaries (initdb, postgres)", pytrace=False)
    report = tmp_path / "outbox.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "crash_outbox.py"), "--rows", "800"]
    cmd += ["--kill-every", "0.1", "0.3", "--seed", "20261201", "--json", str(report)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert report.exists(), done.stdout + done.stderr
    r = orjson.loads(report.read_bytes())
    assert r["drained"], r
    assert r["lost"] == 0 and r["duplicate_events"] == 0 and r["rolled_back_published"] == 0, r
    assert r["events_created"] == r["committed_rows"] == r["deliveries_received"], r
    assert r["rolled_back_rows"] > 0, r
    assert r["connector_kills"] + r["worker_kills"] + r["hook_exits"] >= 2, r
    assert r["unexpected_exits"] == [], r
    assert r["ok"] and done.returncode == 0, done.stdout + done.stderr
