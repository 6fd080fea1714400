"""The private cluster of bench/cluster_placement.py: slot layouts, work per master,
relay stores and worker processes on it, and the checks of what the receiver saw."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import TMP
from relay.domain import ordering
from relay.queue.keys import Keys
from relay.queue.store import Store, connect
from relay.redisproc import RedisCluster
from relay.redisslots import SlotControl
from relay.settings import Settings
from tests.helpers.ordering_kit import LaneReceiver, lane_problems, start_workers, stop_workers

SHARDS = 12
LUA = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
MINE = ("info", "cluster", "scan", "flushall", "migrate")  # the bench's own commands


class Masters:
    """3 masters with a replica each; slot layouts "3" (shards 4 a master) and "1"."""

    def __init__(self, data: Path) -> None:
        self.proc = RedisCluster(data_dir=data, masters=3, replicas=1)
        for node in self.proc.nodes:
            node.appendonly = False
        self.proc.start(timeout=60)
        self.slots = SlotControl(self.proc)
        self.url = self.proc.url
        self.keys = Keys("relay", SHARDS)
        self.slots.balance([self.keys.shard(n).due for n in range(SHARDS)])
        self.ports = sorted(self.slots.masters())
        self.base = self.slots.clients[self.ports[0]].execute_command("CLUSTER", "SLOTS")

    def _base_owner(self, slot: int) -> int:
        for start, end, master, *_ in self.base:
            if int(start) <= slot <= int(end):
                return int(master[1])
        raise RuntimeError(f"slot {slot} is not served")

    def place(self, layout: str, endpoint_id: str) -> None:
        """Layout "3": every slot where it was after balancing (shards 4 a master, the
        rest where ``--cluster create`` put it); "1": the shards, ``{cfg}`` and the
        endpoint's ``{ep_X}`` all on the first master. Run on an empty cluster."""
        names = [self.keys.shard(n).due for n in range(SHARDS)]
        names += [self.keys.endpoints, self.keys.endpoint_state(endpoint_id).breaker]
        for name in names:
            slot = self.slots.slot(name)
            self.slots.move_slot(slot, self.ports[0] if layout == "1" else self._base_owner(slot))

    def snapshot(self, prefix: str | None) -> dict[int, dict[str, int]]:
        """Per master: keys under ``prefix`` (when given), and from ``INFO commandstats``
        the calls, Lua calls and microseconds of every command but the bench's own."""
        out = {}
        for port in self.ports:
            client = self.slots.clients[port]
            stats = client.info("commandstats")
            mine = {f"cmdstat_{c}" for c in MINE}
            row = {
                "calls": sum(int(v["calls"]) for k, v in stats.items() if k not in mine),
                "usec": sum(int(v["usec"]) for k, v in stats.items() if k not in mine),
                "lua": sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in LUA),
                "keys": 0,
            }
            if prefix is not None:
                row["keys"] = sum(1 for _ in client.scan_iter(match=f"{prefix}:*", count=1000))
            out[port] = row
        return out

    def cluster_info(self) -> str:
        """What ``redis-cli --cluster info`` prints: keys, slots and replicas per master."""
        cli = shutil.which("redis-cli") or "redis-cli"
        argv = [cli, "--cluster", "info", f"127.0.0.1:{self.ports[0]}"]
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        return re.sub(r"\x1b\[[0-9;]*m", "", out).strip()  # its colours

    def flush(self) -> None:
        for port in self.ports:
            self.slots.clients[port].flushall()

    def stop(self) -> None:
        self.slots.close()
        self.proc.stop()


async def open_store(m: Masters, tag: str) -> Store:
    settings = Settings(
        redis_url=m.url,
        redis_cluster=True,
        shards=SHARDS,
        key_prefix=f"b{tag}{uuid.uuid4().hex[:6]}",
        allow_private_networks=True,
    )
    store = Store(connect(settings), settings)
    await store.start()
    return store


@contextlib.contextmanager
def by_app_rule(on: bool) -> Iterator[None]:
    """While ``on``: placement as before placement by key, in this process (every key of
    an app on the app's shard: its guards, its keyed and its ordered events)."""
    if not on:
        yield
        return
    saved = ordering.key_shard
    ordering.key_shard = lambda app, key, shards: ordering.app_shard(app, shards)
    try:
        yield
    finally:
        ordering.key_shard = saved


def _settled(rec: LaneReceiver, count: int) -> bool:
    return sum(1 for h in rec.hits if 200 <= h.status < 300) >= count


async def drain(
    store: Store,
    m: Masters,
    rec: LaneReceiver,
    count: int,
    args: Any,
    prefix: str | None,
) -> dict[int, dict[str, int]]:
    """Start the workers, wait until ``count`` deliveries succeeded and their outcomes are
    written, take ``m.snapshot(prefix)``, stop the workers; the snapshot."""
    s = store.settings
    env = {
        **os.environ,
        "RELAY_REDIS_URL": m.url,
        "RELAY_REDIS_CLUSTER": "1",
        "RELAY_SHARDS": str(s.shards),
        "RELAY_KEY_PREFIX": s.key_prefix,
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_WORKER_CONCURRENCY": str(args.concurrency),
        "RELAY_LOG_LEVEL": "warning",
    }
    TMP.mkdir(parents=True, exist_ok=True)
    procs = await start_workers(env, args.workers, TMP, name=f"clplace-{s.key_prefix}")
    try:
        deadline = time.monotonic() + args.timeout
        while True:
            counts = (await store.stats())["counts"]
            done = counts["succeeded"] + counts["dead"] == count and counts["delivering"] == 0
            if (done and _settled(rec, count)) or time.monotonic() > deadline:
                break
            if any(p.returncode is not None for p in procs):
                raise RuntimeError(f"a worker exited; logs in {TMP}")
            await asyncio.sleep(0.1)
        after = await asyncio.to_thread(m.snapshot, prefix)
        await asyncio.sleep(0.3)  # late duplicates, if any, would land now
        return after
    finally:
        await stop_workers(procs)


def problems(rec: LaneReceiver, expected: dict[str, list[int]]) -> list[str]:
    """What the receiver saw against once and in order per key: every ``(key, n)``
    answered 2xx once and asked once (no retry, no duplicate), each key's requests in
    publish order and never two at once."""
    out = lane_problems(rec.hits, expected)
    out += [f"{lane}: n={n} overlapped" for lane, n in rec.overlaps]
    asked = Counter((h.lane, h.n) for h in rec.hits)
    ok = Counter((h.lane, h.n) for h in rec.hits if 200 <= h.status < 300)
    want = Counter((lane, n) for lane, ns in expected.items() for n in ns)
    if ok != want:
        missing = sorted((want - ok).elements())[:5]
        extra = sorted((ok - want).elements())[:5]
        out.append(f"2xx per (key, n) off: missing {missing}, more than once {extra}")
    if asked != ok:
        out.append(f"{sum((asked - ok).values())} request(s) besides one 2xx per event")
    return out


def ratio(values: dict[int, int]) -> float:
    most = max(values.values())
    return round(min(values.values()) / most, 3) if most else 0.0
