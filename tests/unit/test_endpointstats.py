"""The per-endpoint, per-minute counters: what one attempt adds, and what a window reads."""

from __future__ import annotations

from relay.domain import endpointstats as es

HOUR = es.HOUR_MS


def test_what_an_attempt_adds() -> None:
    assert es.stat_of(True, 200, "", 3.0) == "ok 0"
    assert es.stat_of(True, 204, "", 42.0) == "ok 3"
    assert es.stat_of(False, 503, "http_status", 20000.0) == f"s503 {len(es.LATENCY_BOUNDS_MS)}"
    assert es.stat_of(False, None, "timeout", 10000.0) == "etimeout"
    assert es.stat_of(True, None, "", 3.0) == "ok 0"  # a broker's acknowledgement: no status
    adds = es.increments(["ok 0", "ok 3", "s503 3", "etimeout", ""])
    assert adds == {"n": 4, "ok": 2, "l0": 1, "l3": 2, "s503": 1, "etimeout": 1}


def test_percentiles_interpolate_inside_a_bucket() -> None:
    buckets = [0] * (len(es.LATENCY_BOUNDS_MS) + 1)
    assert es.percentile(buckets, 0.5) is None
    buckets[3] = 100  # 25..50 ms
    assert es.percentile(buckets, 0.5) == 37.5
    assert es.percentile(buckets, 0.99) == 49.8
    buckets[-1] = 100  # slower than the last bound: its lower bound
    assert es.percentile(buckets, 0.99) == float(es.LATENCY_BOUNDS_MS[-1])


def test_a_window_sums_its_minutes_and_leaves_the_rest_out() -> None:
    now = 500 * HOUR + 30 * 60_000 + 5_000  # 00:30:05 of hour 500
    assert es.hours_of_window("1h", now) == [499, 500]
    assert es.hours_of_window("24h", now) == list(range(476, 501))
    hashes = {
        499: {"30:n": "9", "30:ok": "9", "31:n": "2", "31:ok": "1", "31:s500": "1", "31:l2": "2"},
        500: {"30:n": "4", "30:s503": "3", "30:etimeout": "1", "30:ok": "0", "30:l9": "3"},
    }
    out = es.summarize("1h", now, hashes)
    assert (out["attempts"], out["successes"], out["failures"]) == (6, 1, 5)
    assert out["success_rate"] == round(1 / 6, 4)
    assert len(out["series"]) == 60 and out["step_seconds"] == 60
    assert out["series"][0] == {
        "at": 499 * HOUR + 31 * 60_000,
        "attempts": 2,
        "successes": 1,
        "failures": 1,
    }
    assert (
        out["series"][-1]["attempts"] == 4 and out["series"][-1]["at"] == 500 * HOUR + 30 * 60_000
    )
    assert out["failures_by"] == [
        {"status_code": 503, "error": None, "count": 3},
        {"status_code": None, "error": "timeout", "count": 1},
        {"status_code": 500, "error": None, "count": 1},
    ]
    assert [b["count"] for b in out["latency_ms"]["buckets"]][2] == 2
    day = es.summarize("24h", now, hashes)
    assert day["attempts"] == 15 and len(day["series"]) == 144 and day["step_seconds"] == 600
