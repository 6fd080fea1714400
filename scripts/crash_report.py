"""Reporting for the crash-injection suite: what one round proves, and the table.

``analyze`` applies the duplicate rule documented in ``scripts/crash.py``: a copy the
receiver got under claim j (``x-relay-attempt``) is explained when claim j ended with
a ``lease_expired`` entry of a worker SIGKILLed before that reclaim, or with a reclaim
inside a Redis outage window; at most one copy per delivery may come from other
claims (the one whose outcome was recorded). Everything else is unexplained.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

OUTAGE_SLACK = 2.0  # seconds after restart + lease during which reclaims count as outage


def analyze(
    rnd: Any, rows: dict[int, dict[str, Any]], records: list[dict[str, Any]], drained: bool
) -> dict[str, Any]:
    """The round's report; ``rnd`` is the finished ``crash.Round``."""
    st, lease = rnd.st, rnd.cfg.lease
    copies: dict[str, list[int]] = {}
    for r in records:
        copies.setdefault(r["id"], []).append(r["attempt"])
    killed = {k["worker"]: k["at"] for k in st.kills}

    def lost_to_crash(entry: dict[str, Any]) -> str | None:
        if entry.get("error") != "lease_expired":
            return None
        at = entry["at"] / 1000
        w = entry.get("worker", "")
        if w in killed and killed[w] <= at:
            return "worker_killed"
        for o in st.outages:
            if o["killed_at"] <= at <= o["ready_at"] + lease + OUTAGE_SLACK:
                return "redis_outage"
        return None

    dup = Counter[str]()
    unexplained_detail = []
    orphans: dict[str, list[float]] = {}
    for row in rows.values():
        enders = [e for e in row["log"] if not e.get("fenced")]
        lost_claims: dict[int, str] = {}
        for j, e in enumerate(enders, 1):
            why = lost_to_crash(e)
            if why:
                lost_claims[j] = why
            if e.get("error") == "lease_expired" and e.get("worker") in killed:
                # layout v3: a succeeded delivery finished when it was last updated
                kept = row["row"]
                finished = int(kept.get("finished_at") or kept.get("updated_at") or 0) / 1000
                orphans.setdefault(e["worker"], []).append(finished)
        sent = copies.get(row["event"], [])
        if len(sent) <= 1:
            continue
        distinct = set(sent)
        normal = [j for j in distinct if j not in lost_claims]
        unexplained = (len(sent) - len(distinct)) + max(0, len(normal) - 1)
        dup["sends"] += len(sent) - 1
        dup["unexplained"] += unexplained
        for j in distinct:
            if j in lost_claims:
                dup[lost_claims[j]] += 1
        if len(normal) == 0:  # every copy came from a lost claim: one of them is not a dup
            dup[lost_claims[min(distinct)]] -= 1
        if unexplained:
            unexplained_detail.append(
                {"delivery": row["delivery"], "copies": sent, "log": row["log"]}
            )

    acked_events = {r["event"] for r in rows.values()}
    received = {e for e in acked_events if copies.get(e)}
    lost = sorted(acked_events - received)
    kills = []
    for k in st.kills:
        done = orphans.get(k["worker"], [])
        repl = st.replacements.get(k["worker"])
        booted = repl.ready_at if repl is not None and repl.ready() else None
        kills.append(
            {
                "worker": k["worker"],
                "orphaned": len(done),
                "recovered_s": round(max(done) - k["at"], 3) if done else None,
                "replacement_up_s": round(booted - k["at"], 3) if booted else None,
            }
        )

    def first_after(times: list[float], t0: float) -> float | None:
        later = [t for t in times if t > t0]
        return round(min(later) - t0, 3) if later else None

    acks = [t for _, _, t in st.acked.values()]
    outages = [
        {
            "down_s": round(o["ready_at"] - o["killed_at"], 3),
            "publish_resumed_s": first_after(acks, o["ready_at"]),
            "delivery_resumed_s": first_after([r["at"] for r in records], o["ready_at"]),
        }
        for o in st.outages
    ]
    recovered = [k["recovered_s"] for k in kills if k["recovered_s"] is not None]
    booted_all = [k["replacement_up_s"] for k in kills if k["replacement_up_s"] is not None]
    statuses = Counter(r["row"].get("status", "missing") for r in rows.values())
    attempts = Counter(int(r["row"].get("attempts") or 0) for r in rows.values())
    missing = sum(1 for r in rows.values() if not r["exists"])
    unacked = rnd.cfg.events - len(st.acked)
    med = lambda xs: round(statistics.median(xs), 3) if xs else None  # noqa: E731
    report = {
        "round": rnd.number,
        "redis_killed": rnd.kill_redis,
        "acknowledged": len(st.acked),
        "unacknowledged": unacked,
        "refused": st.refused,
        "received": len(received),
        "received_unacknowledged": len(set(copies) - acked_events),
        "lost": len(lost),
        "lost_events": lost[:50],
        "missing_in_redis": missing,
        "duplicate_sends": dup["sends"],
        "explained": dup["sends"] - dup["unexplained"],
        "explained_by_worker_kill": dup["worker_killed"],
        "explained_by_redis_outage": dup["redis_outage"],
        "unexplained": dup["unexplained"],
        "unexplained_detail": unexplained_detail[:20],
        "drained": drained,
        "statuses": dict(statuses),
        "attempts": {str(k): v for k, v in sorted(attempts.items())},
        "worker_kills": kills,
        "recovery_s": {
            "median": med(recovered),
            "max": max(recovered) if recovered else None,
            "replacement_up_median": med(booted_all),
        },
        "redis_outages": outages,
        "unexpected_exits": st.unexpected,
        "publish_errors": dict(st.publish_errors),
    }
    report["ok"] = (
        drained
        and not lost
        and not missing
        and dup["unexplained"] == 0
        and unacked == 0
        and not st.unexpected
        and (not rnd.kill_redis or len(st.outages) == 1)
    )
    return report


TOTALS = ("acknowledged", "received", "lost", "duplicate_sends", "explained", "unexplained")
HEAD = "round redis acked recv lost dups expl unexpl kills recov_med/max_s redis_down/resume_s"


def print_table(rounds: list[dict[str, Any]]) -> None:
    rows = [[*HEAD.split(), "attempts", "secs", "ok"]]
    for r in rounds:
        rec = r["recovery_s"]
        outages = r["redis_outages"]
        down = ",".join(f"{o['down_s']}/{o['delivery_resumed_s']}" for o in outages) or "-"
        counts = [r[k] for k in ("acknowledged", "received", "lost", "duplicate_sends")]
        counts += [r["explained"], r["unexplained"], len(r["worker_kills"])]
        tail = [f"{rec['median']}/{rec['max']}", down]
        tail += [" ".join(f"{k}:{v}" for k, v in r["attempts"].items())]
        tail += [str(r["seconds"]["total"]), "yes" if r["ok"] else "NO"]
        rows.append(
            [str(r["round"]), "kill" if r["redis_killed"] else "-", *map(str, counts), *tail]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
