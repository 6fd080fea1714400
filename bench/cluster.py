"""Delivery throughput with RELAY_SHARDS=1, 2 and 3 on a 3-master Redis Cluster.

    python bench/cluster.py [--n 15000] [--workers 2] [--rounds 3] [--fsync everysec]

Standalone (not part of ``bench/run.py``). It starts a private 3-master cluster from
``redis-server`` processes on 127.0.0.1 (relay.redisproc), places the shard tags {s0},
{s1}, {s2} on three different nodes, and for each shard count, in rounds (1, 2, 3, 1,
2, 3, ...): publishes N events with one delivery each (spread over the shards, straight
into Redis, no worker running), then starts ``relay worker`` processes and times the
drain at a local receiver process (first arrival to last arrival). It checks every
event arrived exactly once and the stats end clean, then FLUSHALLs the cluster.

Also measured per run: CPU time of each Redis node (``INFO cpu``) and of the workers
(``/proc``) per delivery. The busiest node's CPU per delivery gives the Redis-side
ceiling, ``1000 / ms`` deliveries/s, i.e. how fast this cluster could go with enough
worker CPU in front of it.

The honest caveat: every process (3 Redis nodes, the workers, the receiver) shares this
machine's cores (2 when this was written), so the end-to-end rate is bound by worker
CPU, not by Redis; adding shards spreads Redis's work over nodes but cannot make the
workers faster here. Prints a table and writes ``bench/results/cluster.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from relay.domain import ids, signing  # noqa: E402
from relay.domain.schema import endpoint_record  # noqa: E402
from relay.queue.keys import Keys  # noqa: E402
from relay.queue.store import Store, connect  # noqa: E402
from relay.redisproc import RedisCluster, free_port  # noqa: E402
from relay.redisslots import SlotControl  # noqa: E402
from relay.settings import Settings  # noqa: E402

RESULTS = ROOT / "bench" / "results"
HOST = "127.0.0.1"
TAGS = ("{s0}", "{s1}", "{s2}")
PAYLOAD = {"order": "x" * 1000}  # ~1 KiB, like the rest of the benchmark
TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- receiver


def run_receiver(port: int) -> None:
    """Child process: 200 to every POST; GET /stats, POST /reset (counts, arrival times)."""
    from aiohttp import web

    state: dict[str, Any] = {"ids": {}, "first": None, "last": None}

    async def hit(request: web.Request) -> web.Response:
        await request.read()
        now = time.monotonic()
        if state["first"] is None:
            state["first"] = now
        state["last"] = now
        wid = request.headers.get("webhook-id", "")
        state["ids"][wid] = state["ids"].get(wid, 0) + 1
        return web.Response(text="ok")

    async def stats(_: web.Request) -> web.Response:
        seen = state["ids"]
        return web.json_response(
            {
                "count": sum(seen.values()),
                "unique": len(seen),
                "doubled": sum(1 for n in seen.values() if n > 1),
                "first": state["first"],
                "last": state["last"],
            }
        )

    async def reset(_: web.Request) -> web.Response:
        state.update(ids={}, first=None, last=None)
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)
    app.router.add_post("/{tail:.*}", hit)
    web.run_app(app, host=HOST, port=port, access_log=None, print=None)


# ---------------------------------------------------------------------------- cluster


class Cluster(SlotControl):
    """The private cluster: node clients and shard placement (SlotControl), CPU counters."""

    def __init__(self, data: Path, fsync: str) -> None:
        self.proc = RedisCluster(data_dir=data, masters=3)
        for node in self.proc.nodes:
            node.appendfsync = fsync
        self.proc.start()
        super().__init__(self.proc)

    def place_shards(self) -> None:
        """Move (empty) slots so {s0}, {s1}, {s2} are on three different nodes."""
        self.spread(TAGS)

    def cpu(self) -> dict[int, float]:
        """Seconds of CPU each node has used."""
        out = {}
        for port, c in self.clients.items():
            info = c.info("cpu")
            out[port] = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        return out

    def reads(self) -> int:
        return sum(int(c.info("stats")["total_reads_processed"]) for c in self.clients.values())

    def flush(self) -> None:
        for c in self.clients.values():
            c.flushall()

    def stop(self) -> None:
        self.close()
        self.proc.stop()


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


# ---------------------------------------------------------------------------- one run


async def publish_backlog(store: Store, n: int, endpoint_id: str) -> float:
    """N events, one delivery each, round-robin over the shards; returns seconds taken."""
    started = time.monotonic()
    payload = json.dumps(PAYLOAD).encode()

    async def one(i: int) -> None:
        shard = i % store.settings.shards
        now = int(time.time() * 1000)
        event_id = ids.new_id("evt", shard, now)
        await store.publish(
            shard=shard,
            event_id=event_id,
            event_type="bench.cluster",
            app="default",
            body=signing.build_body(event_id, "bench.cluster", now, payload),
            created_ms=now,
            deliveries=[(ids.new_id("dlv", shard, now), endpoint_id)],
        )

    for start in range(0, n, 200):
        await asyncio.gather(*(one(i) for i in range(start, min(n, start + 200))))
    return time.monotonic() - started


async def receiver_stats(url: str) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(url + "/stats") as r:
        return dict(await r.json())


async def run_one(
    cluster: Cluster, receiver: str, shards: int, args: argparse.Namespace, tag: str
) -> dict[str, Any]:
    import aiohttp

    prefix = f"bench{tag}"
    settings = Settings(
        redis_url=cluster.proc.url, redis_cluster=True, shards=shards, key_prefix=prefix
    )
    store = Store(connect(settings), settings)
    await store.start()
    endpoint = endpoint_record(url=receiver + "/hook")
    await store.put_endpoint(endpoint)
    ingest_s = await publish_backlog(store, args.n, endpoint["id"])
    async with aiohttp.ClientSession() as s, s.post(receiver + "/reset") as r:
        await r.read()

    env = {
        **os.environ,
        "RELAY_REDIS_URL": cluster.proc.url,
        "RELAY_REDIS_CLUSTER": "1",
        "RELAY_SHARDS": str(shards),
        "RELAY_KEY_PREFIX": prefix,
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_LOG_LEVEL": "warning",
        "RELAY_WORKER_CONCURRENCY": str(args.concurrency),
    }
    cpu0, reads0 = cluster.cpu(), cluster.reads()
    logs = RESULTS / "tmp"
    logs.mkdir(parents=True, exist_ok=True)
    workers = []
    for w in range(args.workers):
        with (logs / f"cluster-{tag}-worker{w}.log").open("wb") as log:
            workers.append(
                subprocess.Popen(  # noqa: ASYNC220 -- started once per run, not awaited
                    [sys.executable, "-m", "relay", "worker"],
                    env={**env, "RELAY_WORKER_ID": f"bench-{tag}-{w}"},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                )
            )
    try:
        deadline = time.monotonic() + args.timeout
        while True:
            got = await receiver_stats(receiver)
            if got["unique"] >= args.n or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)  # late duplicates, if any, would land now
        got = await receiver_stats(receiver)
        cpu1, reads1 = cluster.cpu(), cluster.reads()
        worker_cpu = sum(proc_cpu(p.pid) for p in workers)
    finally:
        for p in workers:
            p.send_signal(signal.SIGTERM)
        for p in workers:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    stats = await store.stats()
    await store.close()
    cluster.flush()

    n = args.n
    elapsed = (got["last"] - got["first"]) if got["first"] is not None else float("nan")
    node_ms = {p: (cpu1[p] - cpu0[p]) * 1000 / n for p in cluster.ports}
    return {
        "shards": shards,
        "deliveries": n,
        "received": got["count"],
        "unique": got["unique"],
        "doubled": got["doubled"],
        "clean": stats["counts"] == {"pending": 0, "delivering": 0, "succeeded": n, "dead": 0},
        "rate": (n - 1) / elapsed if elapsed > 0 else 0.0,
        "drain_s": round(elapsed, 3),
        "ingest_per_s": round(n / ingest_s, 1),
        "redis_cpu_ms_per_delivery": {str(p): round(v, 4) for p, v in node_ms.items()},
        "busiest_node_ms": round(max(node_ms.values()), 4),
        "redis_ceiling_per_s": round(1000 / max(node_ms.values())),
        "worker_cpu_ms_per_delivery": round(worker_cpu * 1000 / n, 4),
        "round_trips_per_delivery": round((reads1 - reads0) / n, 3),
    }


# ---------------------------------------------------------------------------- main


def table(runs: list[dict[str, Any]], ports: list[int], placement: dict[str, int]) -> str:
    by: dict[int, list[dict[str, Any]]] = {}
    for r in runs:
        by.setdefault(r["shards"], []).append(r)
    head = (
        "shards  deliveries/s (median; runs)      Redis CPU ms/dlv per node"
        "        busiest  Redis ceiling  worker CPU ms/dlv"
    )
    lines = [head, "-" * len(head)]
    for shards, rs in sorted(by.items()):
        rate = statistics.median(r["rate"] for r in rs)
        each = ", ".join(f"{r['rate']:,.0f}" for r in rs)
        nodes = " / ".join(
            f"{statistics.median(r['redis_cpu_ms_per_delivery'][str(p)] for r in rs):.3f}"
            for p in ports
        )
        busiest = statistics.median(r["busiest_node_ms"] for r in rs)
        ceiling = statistics.median(r["redis_ceiling_per_s"] for r in rs)
        wcpu = statistics.median(r["worker_cpu_ms_per_delivery"] for r in rs)
        lines.append(
            f"{shards:>6}  {rate:>8,.0f}/s ({each:<18})  {nodes:<32}"
            f"  {busiest:>6.3f}  {ceiling:>10,.0f}/s  {wcpu:>17.3f}"
        )
    where = ", ".join(f"{k} on :{v}" for k, v in placement.items())
    lines.append(f"nodes (columns): {' / '.join(f':{p}' for p in ports)}; {where}")
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="relay-bench-cluster-") as tmp:
        cluster = Cluster(Path(tmp), args.fsync)
        port = free_port()
        recv = subprocess.Popen(  # noqa: ASYNC220 -- started once, before any timing
            [sys.executable, __file__, "--receiver", str(port)],
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
        receiver = f"http://{HOST}:{port}"
        runs: list[dict[str, Any]] = []
        started = time.time()
        try:
            cluster.place_shards()
            keys = Keys("relay", 3)
            placement = {f"s{n}": cluster.owner(cluster.slot(keys.shard(n).due)) for n in range(3)}
            placement["cfg"] = cluster.owner(cluster.slot(keys.endpoints))
            for _ in range(100):  # the receiver is up
                try:
                    await receiver_stats(receiver)
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            for rnd in range(args.rounds):
                for shards in args.shards:
                    res = await run_one(cluster, receiver, shards, args, f"{shards}s{rnd}")
                    runs.append(res)
                    print(
                        f"round {rnd + 1}, {shards} shard(s): {res['rate']:,.0f}/s, "
                        f"{res['unique']}/{res['deliveries']} once, doubled {res['doubled']}, "
                        f"clean {res['clean']}",
                        flush=True,
                    )
        finally:
            recv.terminate()
            recv.wait()
            cluster.stop()
    text = table(runs, cluster.ports, placement)
    caveat = (
        f"caveat: all 3 Redis nodes, {args.workers} worker process(es) and the receiver share "
        f"this machine's {os.cpu_count()} cores: the rate is bound by worker CPU, not Redis. "
        "Redis ceiling = 1000 / busiest node's CPU ms per delivery."
    )
    print()
    print(text)
    print(caveat)
    ok = all(r["unique"] == r["deliveries"] and not r["doubled"] and r["clean"] for r in runs)
    out = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "took_s": round(time.time() - started, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_1m_after": os.getloadavg()[0],
        },
        "config": {
            "deliveries_per_run": args.n,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "rounds": args.rounds,
            "appendfsync": args.fsync,
            "placement": placement,
        },
        "runs": runs,
        "every_event_once_and_clean": ok,
        "table": text,
        "caveat": caveat,
    }
    target = RESULTS / args.out
    target.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {target}")
    return 0 if ok else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=15_000, help="deliveries per run")
    p.add_argument("--workers", type=int, default=2, help="relay worker processes")
    p.add_argument("--concurrency", type=int, default=64, help="sends in flight per worker")
    p.add_argument("--rounds", type=int, default=3, help="runs of each shard count")
    p.add_argument("--shards", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--fsync", default="everysec", choices=["always", "everysec", "no"])
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per drain at most")
    p.add_argument("--out", default="cluster.json", help="file name under bench/results/")
    p.add_argument("--receiver", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


if __name__ == "__main__":
    ns = parse()
    if ns.receiver:
        run_receiver(ns.receiver)
    else:
        sys.exit(asyncio.run(main(ns)))
