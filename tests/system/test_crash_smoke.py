"""A short run of the crash-injection suite (``scripts/crash.py``, ``make crash``).

One round, 300 events, real processes throughout: redis-server (append-only file,
fsync always), the API, a recording receiver and 4 workers; at least one worker is
SIGKILLed mid-run and redis-server is SIGKILLed once and restarted on its data. Every
acknowledged event must reach the receiver, and every duplicate must be explained by a
crash (the rule is in the script's docstring).

The suite fails with the claim's ``ZREM`` moved out of claim.lua into a second round
trip (so two workers can claim one delivery): the round reports unexplained duplicates.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.realredis

ROOT = Path(__file__).resolve().parents[2]


def test_crash_round_loses_nothing_and_explains_every_duplicate(tmp_path: Path) -> None:
    report = tmp_path / "crash.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "crash.py"), "--rounds", "1"]
    cmd += ["--events", "300", "--workers", "4", "--redis-kill-rounds", "1"]
    cmd += ["--min-kills", "1", "--json", str(report), "--seed", "20261130"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert report.exists(), done.stdout + done.stderr
    data = orjson.loads(report.read_bytes())
    (r,) = data["rounds"]
    summary = {k: v for k, v in r.items() if k not in ("unexplained_detail", "worker_kills")}

    assert r["drained"], summary
    assert r["acknowledged"] == 300, summary
    assert r["lost"] == 0, summary
    assert r["missing_in_redis"] == 0, summary
    assert r["received"] == 300, summary
    assert r["unexplained"] == 0, r["unexplained_detail"]
    assert r["explained"] == r["duplicate_sends"]
    assert len(r["worker_kills"]) >= 1
    assert r["redis_killed"] and len(r["redis_outages"]) == 1
    assert r["unexpected_exits"] == [], summary
    assert data["ok"] is True
    assert done.returncode == 0, done.stdout + done.stderr
