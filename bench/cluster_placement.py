"""One tenant on a Redis Cluster: its work per master, and its delivery on 1 vs 3 masters.

    python bench/cluster_placement.py [--keyed 3000] [--lanes 60] [--per-lane 15]
        [--n 10000] [--rounds 3] [--workers 2] [--no-ingest]

Part of ``make bench``: one table from one run. On 127.0.0.1 it starts a private
Redis Cluster of 3 masters, each with one replica (relay.redisproc, no append-only
file), puts the 12 shard tags ``{s0}`` ... ``{s11}`` 4 to a master, and runs, with
``RELAY_SHARDS=12`` and one app:

* **spread**: 3,000 events, each with its own Idempotency-Key, to one endpoint; then
  60 ordering keys x 15 events to an ``ordering: key`` endpoint (each key's events
  published one after another). Published through :class:`relay.publishing.Publisher`
  with the API's caches, delivered by ``relay worker`` processes to a loopback receiver
  that records each request's key and number. Per master: the run's keys, and its Lua
  calls (``INFO commandstats``: ``evalsha``, ``eval``) over publish and delivery; the
  least busy master against the most busy one (goals: keys >= 0.5, Lua >= 0.4). Each
  run is checked: every event arrived once (one 2xx, no other request) and every key's
  events in publish order, never two of a key at once. Each run is repeated with the
  placement relay had before placement by key (every keyed or ordered event on its
  app's shard: ``ordering.key_shard`` patched to ``app_shard`` in this process).
* **delivery, 1 vs 3 masters**: ``--n`` keyed events published with no worker running,
  then ``--workers`` worker processes drain them (first arrival to last arrival), with
  every relay slot (shards, ``{cfg}``, the endpoint's ``{ep_X}``) on one master, then
  with the shards spread over three (``{cfg}`` and ``{ep_X}`` where the cluster put
  them), ``--rounds`` times each, alternating. Per master over the drain: commands,
  Lua calls and the microseconds Redis spent running commands (``INFO commandstats``);
  the busiest master's microseconds per event give the Redis-side ceiling.
* **ingest**: bench/ingest.py's rounds (one API process, single and batch publishes
  against a do-nothing aiohttp handler), called here so the table is one run.

All of it shares this machine's cores: the end-to-end rates are bound by the workers'
CPU, not by Redis; the work per master is what scales with masters. Prints one table
and writes ``bench/results/cluster_placement.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: bench.* and tests.* importable
    sys.path.insert(0, str(ROOT))

from bench.cluster_kit import (  # noqa: E402
    SHARDS,
    Masters,
    by_app_rule,
    drain,
    open_store,
    problems,
    ratio,
)
from bench.common import RESULTS, machine  # noqa: E402
from relay.domain.schema import EventIn, endpoint_record  # noqa: E402
from tests.helpers.ordering_kit import LaneReceiver  # noqa: E402
from tests.helpers.placement import cached_publisher  # noqa: E402

PAD = "x" * 1000  # ~1 KiB of payload, as the rest of the benchmark


async def publish_keyed(publisher: Any, n: int, app: str = "big") -> None:
    """``n`` events of ``app``, each with its own Idempotency-Key, 100 at a time."""
    for start in range(0, n, 100):
        await asyncio.gather(
            *(
                publisher.publish(
                    EventIn(type="t", payload={"lane": f"k{i}", "n": 0, "pad": PAD}, app=app),
                    idempotency_key=f"key-{i}",
                )
                for i in range(start, min(n, start + 100))
            )
        )


async def publish_ordered(publisher: Any, lanes: int, per_lane: int, app: str = "big") -> None:
    """``per_lane`` events on each of ``lanes`` ordering keys, the keys concurrently."""

    async def one(lane: str) -> None:
        for n in range(per_lane):
            payload = {"lane": lane, "n": n, "pad": PAD}
            await publisher.publish(EventIn(type="t", payload=payload, app=app, ordering_key=lane))

    await asyncio.gather(*(one(f"order-{k}") for k in range(lanes)))


async def spread_run(
    m: Masters, rec: LaneReceiver, kind: str, rule: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One spread run (module docstring): keys and Lua calls per master, the checks."""
    ordered = kind == "ordered"
    ep = endpoint_record(url=rec.url + "/p", app="big", ordering="key" if ordered else "none")
    await asyncio.to_thread(m.place, "3", ep["id"])
    store = await open_store(m, f"{kind}{rule}")
    rec.hits.clear()
    rec.overlaps.clear()
    try:
        await store.put_endpoint(ep)
        before = await asyncio.to_thread(m.snapshot, store.settings.key_prefix)
        with by_app_rule(rule == "app"):
            async with cached_publisher(store) as publisher:
                if ordered:
                    await publish_ordered(publisher, args.lanes, args.per_lane)
                else:
                    await publish_keyed(publisher, args.keyed)
        count = args.lanes * args.per_lane if ordered else args.keyed
        mid = await asyncio.to_thread(m.snapshot, None)
        after = await drain(store, m, rec, count, args, store.settings.key_prefix)
    finally:
        await store.close()
    expected = (
        {f"order-{k}": list(range(args.per_lane)) for k in range(args.lanes)}
        if ordered
        else {f"k{i}": [0] for i in range(args.keyed)}
    )
    keys = {p: after[p]["keys"] for p in m.ports}
    lua = {p: after[p]["lua"] - before[p]["lua"] for p in m.ports}
    wrong = problems(rec, expected)
    info = await asyncio.to_thread(m.cluster_info)
    await asyncio.to_thread(m.flush)
    return {
        "redis_cli_cluster_info": info,
        "kind": kind,
        "rule": rule,
        "events": count,
        "keys": keys,
        "lua": lua,
        "lua_publish": {p: mid[p]["lua"] - before[p]["lua"] for p in m.ports},
        "keys_ratio": ratio(keys),
        "lua_ratio": ratio(lua),
        "once_in_order": not wrong,
        "problems": wrong[:10],
    }


async def delivery_run(
    m: Masters, rec: LaneReceiver, layout: str, rnd: int, args: argparse.Namespace
) -> dict[str, Any]:
    """One delivery run on ``layout`` ("1" or "3" masters): rate and work per master."""
    ep = endpoint_record(url=rec.url + "/d", app="big")
    await asyncio.to_thread(m.place, layout, ep["id"])
    store = await open_store(m, f"d{layout}r{rnd}")
    rec.hits.clear()
    try:
        await store.put_endpoint(ep)
        t0 = time.monotonic()
        async with cached_publisher(store) as publisher:
            await publish_keyed(publisher, args.n)
        publish_s = time.monotonic() - t0
        before = await asyncio.to_thread(m.snapshot, None)
        after = await drain(store, m, rec, args.n, args, None)
    finally:
        await store.close()
    ok = sorted(h.start for h in rec.hits if 200 <= h.status < 300)
    wrong = problems(rec, {f"k{i}": [0] for i in range(args.n)})
    elapsed = ok[-1] - ok[0] if len(ok) > 1 else float("nan")
    per = {p: {f: after[p][f] - before[p][f] for f in ("calls", "lua", "usec")} for p in m.ports}
    busiest = max(v["usec"] for v in per.values()) / args.n
    slot_of = m.slots.slot
    ep_state = m.keys.endpoint_state(ep["id"]).breaker
    homes = {
        "cfg": m.slots.owner(slot_of(m.keys.endpoints)),
        "ep": m.slots.owner(slot_of(ep_state)),
    }
    await asyncio.to_thread(m.flush)
    return {
        "layout": layout,
        "events": args.n,
        "rate": round((len(ok) - 1) / elapsed, 1) if elapsed > 0 else 0.0,
        "publish_rate": round(args.n / publish_s, 1),
        "per_master": per,
        "masters_of": homes,
        "busiest_usec_per_event": round(busiest, 2),
        "ceiling_per_s": round(1e6 / busiest) if busiest else None,
        "once": not wrong,
        "problems": wrong[:10],
    }


def ingest_numbers(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.no_ingest:
        return None
    from bench import ingest

    ns = argparse.Namespace(
        seconds=args.ingest_seconds, rounds=args.ingest_rounds, concurrency=32,
        batch_concurrency=4, batch=100,
    )  # fmt: skip
    return ingest.main(ns)


def fmt(values: dict[int, float], ports: list[int]) -> str:
    return " / ".join(f"{values[p]:,.0f}" for p in ports)


def table(res: dict[str, Any]) -> str:
    ports: list[int] = res["ports"]
    lines = [
        f"one app on a 3-master + 3-replica Redis Cluster, RELAY_SHARDS={SHARDS} "
        f"(4 shards a master); masters :{' / :'.join(map(str, ports))}",
        "",
        f"{'traffic':36}  {'placement':9}  {'keys per master':22}  {'ratio':>5}"
        f"  {'Lua calls per master':22}  {'ratio':>5}  once, in order",
    ]
    names = {"keyed": f"{res['config']['keyed']:,} events, own Idempotency-Key"}
    names["ordered"] = (
        f"{res['config']['lanes']} ordering keys x {res['config']['per_lane']} events"
    )
    for r in res["spread"]:
        lines.append(
            f"{names[r['kind']]:36}  {'by ' + r['rule']:9}  {fmt(r['keys'], ports):22}"
            f"  {r['keys_ratio']:>5.2f}  {fmt(r['lua'], ports):22}  {r['lua_ratio']:>5.2f}"
            f"  {'yes' if r['once_in_order'] else 'NO'}"
        )
    lines.append("ratio: least busy master / most busy (goals: keys >= 0.50, Lua calls >= 0.40)")
    d = res["delivery"]
    one, three = d["1"], d["3"]
    lines += [
        "",
        f"delivery of one app: {res['config']['n']:,} keyed events, "
        f"{res['config']['workers']} worker process(es)   1 master      3 masters      3 / 1",
    ]

    def row(label: str, a: float, b: float, unit: str = "") -> None:
        lines.append(f"{label:58}  {a:>10,.0f}{unit:2}  {b:>10,.0f}{unit:2}  {b / a:>7.2f}x")

    row("events/s end to end (median of rounds)", one["rate"], three["rate"], "/s")
    row("Redis usec per event, busiest master", one["busiest_usec"], three["busiest_usec"])
    row("Redis-side ceiling (1e6 / that)", one["ceiling"], three["ceiling"], "/s")
    for field, label in (("usec", "Redis usec"), ("calls", "commands"), ("lua", "Lua calls")):
        lines.append(f"{label + ' per master, per event':36}  {one[field]:>32}  {three[field]:>24}")
    lines.append(
        f"rounds: 1 master {one['rounds']}, 3 masters {three['rounds']}; every event "
        f"once: {'yes' if d['once'] else 'NO'}; publish (in-process Publisher) "
        f"{one['publish_rate']:,.0f} / {three['publish_rate']:,.0f} events/s"
    )
    if res.get("ingest"):
        from bench import ingest

        lines += ["", ingest.table(res["ingest"])]
    else:
        lines += ["", "ingest: not run (--no-ingest); bench/ingest.py measures it"]
    return "\n".join(lines)


def summarize(runs: list[dict[str, Any]], ports: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"once": all(r["once"] for r in runs)}
    for layout in ("1", "3"):
        rs = [r for r in runs if r["layout"] == layout]
        mid = sorted(rs, key=lambda r: r["rate"])[len(rs) // 2]
        n = mid["events"]
        per = mid["per_master"]
        out[layout] = {
            "rate": statistics.median(r["rate"] for r in rs),
            "rounds": ", ".join(f"{r['rate']:,.0f}" for r in rs),
            "publish_rate": statistics.median(r["publish_rate"] for r in rs),
            "busiest_usec": mid["busiest_usec_per_event"],
            "ceiling": mid["ceiling_per_s"] or 0,
            **{
                f: " / ".join(f"{per[p][f] / n:.{digits}f}" for p in ports)
                for f, digits in (("usec", 1), ("calls", 1), ("lua", 2))
            },
        }
    return out


async def cluster_part(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    m = Masters(tmp)
    rec = await LaneReceiver(fail=0.0, slow=0.0).start()
    try:
        spread = []
        for kind in ("keyed", "ordered"):
            for rule in ("key", "app"):
                r = await spread_run(m, rec, kind, rule, args)
                once = r["once_in_order"]
                print(f"{kind} by {rule}: {r['keys_ratio']:.2f} {r['lua_ratio']:.2f} {once}")
                spread.append(r)
        runs = []
        for rnd in range(args.rounds):
            for layout in ("1", "3"):
                r = await delivery_run(m, rec, layout, rnd, args)
                print(f"{layout} master(s), round {rnd + 1}: {r['rate']:,.0f}/s {r['once']}")
                runs.append(r)
        return {"ports": m.ports, "spread": spread, "runs": runs}
    finally:
        await rec.stop()
        m.stop()


def main(args: argparse.Namespace) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="relay-bench-clplace-") as tmp:
        res = asyncio.run(cluster_part(args, Path(tmp)))
    res["delivery"] = summarize(res["runs"], res["ports"])
    res["config"] = {
        k: getattr(args, k) for k in ("keyed", "lanes", "per_lane", "n", "rounds", "workers")
    }
    res["ingest"] = ingest_numbers(args)
    res["machine"] = machine()
    res["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    res["took_s"] = round(time.time() - started, 1)
    text = table(res)
    res["table"] = text
    print()
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cluster_placement.json").write_text(json.dumps(res, indent=2) + "\n")
    ok = all(r["once_in_order"] for r in res["spread"]) and res["delivery"]["once"]
    return 0 if ok else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--keyed", type=int, default=3000, help="keyed events of the spread run")
    p.add_argument("--lanes", type=int, default=60, help="ordering keys of the spread run")
    p.add_argument("--per-lane", type=int, default=15, help="events per ordering key")
    p.add_argument("--n", type=int, default=10_000, help="events per delivery run")
    p.add_argument("--rounds", type=int, default=3, help="delivery runs per layout")
    p.add_argument("--workers", type=int, default=2, help="relay worker processes")
    p.add_argument("--concurrency", type=int, default=64, help="sends in flight per worker")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per drain at most")
    p.add_argument("--no-ingest", action="store_true", help="leave bench/ingest.py's rows out")
    p.add_argument("--ingest-seconds", type=float, default=4.0)
    p.add_argument("--ingest-rounds", type=int, default=3)
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main(parse()))
