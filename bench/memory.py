"""Memory per structure: every key's ``MEMORY USAGE key SAMPLES 0``, summed per key pattern.

A key's pattern is the key with each id-like segment replaced by ``*`` (a lowercase
prefix, ``_``, then 16 or more characters of upper-case base32: ``evt_…``, ``dlv_…``,
``ep_…``), so ``relay:v1:{s0}:dlv:dlv_01J…`` counts under ``relay:v1:{s0}:dlv:*``. No key
name is written here: a new layout (``v2``, another structure) shows up by itself.
A scan pipelines ``TYPE`` and ``MEMORY USAGE`` for 1,000 keys a round trip (40,000
keys take about a second). ``breakdown`` subtracts a scan taken before publishing, so
the rows are what the run added; per unit divides by the deliveries (or events).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import redis

from bench.ratios import grid

ID = re.compile(r"(?<![0-9A-Za-z])[a-z]{2,8}_[0-9A-Z]{16,}")
BATCH = 1000


def pattern(key: str) -> str:
    return ID.sub("*", key)


def _scan(url: str) -> dict[str, dict[str, Any]]:
    client = redis.Redis.from_url(url, decode_responses=True)
    groups: dict[str, dict[str, Any]] = {}

    def flush(keys: list[str]) -> None:
        pipe = client.pipeline(transaction=False)
        for k in keys:
            pipe.type(k)
            pipe.memory_usage(k, samples=0)
        got = pipe.execute()
        for i, k in enumerate(keys):
            kind, used = got[2 * i], got[2 * i + 1]
            if used is None:  # gone (expired) between SCAN and MEMORY USAGE
                continue
            g = groups.setdefault(pattern(k), {"type": kind, "keys": 0, "bytes": 0})
            g["keys"] += 1
            g["bytes"] += used

    try:
        keys: list[str] = []
        for k in client.scan_iter(count=BATCH):
            keys.append(k)
            if len(keys) >= BATCH:
                flush(keys)
                keys = []
        if keys:
            flush(keys)
    finally:
        client.close()
    return groups


async def scan(url: str) -> dict[str, dict[str, Any]]:
    """``{pattern: {"type", "keys", "bytes"}}`` of every key in the server's db 0."""
    return await asyncio.to_thread(_scan, url)


def breakdown(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], per: int
) -> list[dict[str, Any]]:
    """What ``after`` holds more than ``before``, per pattern, largest first."""
    rows = []
    for pat, g in after.items():
        b = before.get(pat, {"keys": 0, "bytes": 0})
        added = g["bytes"] - b["bytes"]
        if g["keys"] == b["keys"] and added == 0:
            continue
        rows.append(
            {
                "pattern": pat,
                "type": g["type"],
                "keys": g["keys"] - b["keys"],
                "bytes": added,
                "bytes_per_unit": round(added / per, 1),
            }
        )
    rows.sort(key=lambda r: -r["bytes"])
    return rows


# The steps whose memory is broken down, and what their payloads were (bench/payloads.py)
BROKEN_DOWN = (
    ("relay_drain_1", "drain1"),
    ("relay_drain_1_random", "step random: payloads of random bytes, base64'd"),
)


def lines(res: dict[str, Any]) -> list[str]:
    """Each breakdown (drain1, and the random-payload step), pending and retained side by
    side (empty when neither ran)."""
    out: list[str] = []
    for key, label in BROKEN_DOWN:
        if key == "relay_drain_1":
            label += f", payload {res.get('meta', {}).get('config', {}).get('payload', 'order')}"
        block = _lines(res.get(key) or {}, label)
        if block and out:
            out.append("")
        out += block
    return out


def _lines(d1: dict[str, Any], label: str) -> list[str]:
    mb = d1.get("memory_breakdown")
    if not mb:
        return []
    pend = {r["pattern"]: r for r in mb["pending"]}
    kept = {r["pattern"]: r for r in mb["retained"]}
    order = list(kept) + [p for p in pend if p not in kept]
    rows = []
    for pat in order:
        p, k = pend.get(pat), kept.get(pat)
        kind = (k or p or {}).get("type", "")
        rows.append(
            [
                pat,
                kind,
                f"{p['keys']:,}" if p else "",
                f"{p['bytes_per_unit']:,.0f}" if p else "",
                f"{k['keys']:,}" if k else "",
                f"{k['bytes_per_unit']:,.0f}" if k else "",
            ]
        )
    n = mb["deliveries"]
    sp = sum(r["bytes"] for r in mb["pending"]) / n
    sk = sum(r["bytes"] for r in mb["retained"]) / n
    rows.append(["sum of MEMORY USAGE", "", "", f"{sp:,.0f}", "", f"{sk:,.0f}"])
    rows.append(
        [
            "used_memory delta (the target's figure)",
            "",
            "",
            f"{d1['memory_pending_bytes']:,}",
            "",
            f"{d1['memory_succeeded_bytes']:,}",
        ]
    )
    head = ["key pattern", "type", "keys pending", "B/dlv", "keys retained", "B/dlv"]
    return [
        f"relay memory per delivery by structure ({label}; N={n:,}, 1 KiB payload; "
        "MEMORY USAGE key SAMPLES 0 summed per pattern, minus the keys before publishing):",
        *grid(head, rows),
    ]
