"""Events accepted per second by one API process: single publishes, batches, and the limit.

Three processes on 127.0.0.1 beside a fresh ``redis-server`` (no append-only file): one
``relay api`` (uvloop, as shipped; one endpoint in the app, so each event makes one
delivery; no worker runs), a do-nothing aiohttp server on uvloop that reads the body,
parses its JSON and answers 201 (the **limit**: what one Python process on this machine
answers at all), and, for each run, a load generator of its own (a lean keep-alive
client, ``--concurrency`` connections, each request checked). Every event carries its
own idempotency key and a 1 KiB ``order.paid`` payload (``bench/payloads.py``).

Modes, run in turn ``--rounds`` times for ``--seconds`` each, the median round reported:

* ``limit``: ``POST`` of one event's body to the do-nothing server;
* ``single``: ``POST /v1/events``, ``Idempotency-Key`` header;
* ``batch``: ``POST /v1/events/batch`` of ``--batch`` events, ``idempotency_key`` each.

It prints events/s, the API process's CPU share and CPU microseconds per event, the Redis
server's CPU microseconds per event, the ratios single / limit (goal >= 0.5) and batch /
single (goal >= 5), and what the two goals together ask of the batch path (at least 2.5x
the limit) against the ceiling Redis's one thread puts on it and the cores the API and
Redis would need at that rate; and writes ``bench/results/ingest.json``. Part of
``make bench``, not of ``make test``.

    python bench/ingest.py [--seconds 6] [--rounds 3] [--concurrency 32] [--batch 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: bench.* importable
    sys.path.insert(0, str(ROOT))

from bench.common import HOST, RESULTS, Procs, check_alive, machine, proc_cpu  # noqa: E402
from bench.payloads import EVENT_TYPE, payload  # noqa: E402
from relay.redisproc import free_port  # noqa: E402

TOKEN = "bench-ingest-token"
PATHS = {"limit": "/v1/events", "single": "/v1/events", "batch": "/v1/events/batch"}
POOL = 256  # distinct payloads each load generator cycles through


# ---------------------------------------------------------------------- the do-nothing server


def serve_limit(port: int) -> None:
    """The limit: aiohttp on uvloop that reads and parses the body and answers 201."""
    import uvloop
    from aiohttp import web

    async def handler(request: web.Request) -> web.Response:
        doc = orjson.loads(await request.read())
        answer = {"id": "evt_limit", "type": doc["type"], "deliveries": []}
        return web.Response(body=orjson.dumps(answer), status=201, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/events", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, HOST, port).start()
        await asyncio.Event().wait()

    uvloop.run(main())


# ---------------------------------------------------------------------- the load generator


class Conn:
    """One keep-alive HTTP/1.1 connection with a prebuilt request head."""

    def __init__(self, port: int, path: str) -> None:
        self.port = port
        self.head = (
            f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        ).encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(HOST, self.port)

    async def post(self, extra: bytes, body: bytes) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(self.head + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return int(head[9:12]), await self.reader.readexactly(length)


def generate(mode: str, port: int, seconds: float, concurrency: int, batch: int) -> None:
    """Drive one mode for ``seconds`` after a short warm-up; print the counts as JSON."""
    import uvloop

    payloads = [orjson.dumps(payload()) for _ in range(POOL)]
    tag = uuid.uuid4().hex[:8]
    event_head = b'{"type":"' + EVENT_TYPE.encode() + b'","payload":'
    counts = {"events": 0, "requests": 0}
    state = {"n": 0, "counting": False, "stop": False}

    def request() -> tuple[bytes, bytes, int]:
        n = state["n"]
        if mode == "batch":
            items = [
                event_head
                + payloads[(n + i) % POOL]
                + b',"idempotency_key":"%s-%d"}' % (tag.encode(), n + i)
                for i in range(batch)
            ]
            state["n"] = n + batch
            return b"", b'{"events":[' + b",".join(items) + b"]}", batch
        state["n"] = n + 1
        extra = b"Idempotency-Key: %s-%d\r\n" % (tag.encode(), n)
        return extra, event_head + payloads[n % POOL] + b"}", 1

    async def one(conn: Conn) -> None:
        await conn.open()
        while not state["stop"]:
            extra, body, events = request()
            status, answer = await conn.post(extra, body)
            if mode == "batch":
                ok = status == 200 and answer.count(b'"status":201') == events
            else:
                ok = status == 201
            if not ok:
                raise RuntimeError(f"{mode}: {status} {answer[:300]!r}")
            if state["counting"]:
                counts["events"] += events
                counts["requests"] += 1

    async def main() -> dict[str, Any]:
        conns = [Conn(port, PATHS[mode]) for _ in range(concurrency)]
        tasks = [asyncio.create_task(one(c)) for c in conns]
        await asyncio.sleep(1.0)  # warm-up: connections open, caches filled
        state["counting"] = True
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        state["counting"] = False
        wall = time.perf_counter() - started
        state["stop"] = True
        await asyncio.gather(*tasks)
        return {**counts, "wall": wall}

    print(json.dumps(uvloop.run(main())))


# ---------------------------------------------------------------------- the run


def wait_ready(proc: Any, name: str, port: int, path: str) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        check_alive(proc, name)
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=2):
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    raise RuntimeError(f"{name} did not answer on {port}")


def listening(proc: Any, name: str, port: int) -> None:
    for _ in range(300):
        check_alive(proc, name)
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on {port}")


def post_json(port: int, path: str, doc: Any) -> Any:
    import urllib.request

    req = urllib.request.Request(
        f"http://{HOST}:{port}{path}",
        data=orjson.dumps(doc),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return orjson.loads(resp.read())


def run_mode(
    mode: str, port: int, server_pid: int, args: argparse.Namespace, redis_pid: int | None = None
) -> dict[str, Any]:
    """One run of ``mode`` in a load generator process of its own; with ``redis_pid``, the
    Redis server's CPU per event too."""
    concurrency = args.batch_concurrency if mode == "batch" else args.concurrency
    argv = [sys.executable, __file__, "--generate", mode, "--port", str(port)]
    argv += ["--seconds", str(args.seconds), "--concurrency", str(concurrency)]
    argv += ["--batch", str(args.batch)]
    cpu0 = proc_cpu(server_pid)
    redis0 = proc_cpu(redis_pid) if redis_pid else 0.0
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    cpu = proc_cpu(server_pid) - cpu0  # over warm-up and measure: the share, not per event
    redis_cpu = proc_cpu(redis_pid) - redis0 if redis_pid else 0.0
    got = json.loads(out.stdout.strip().splitlines()[-1])
    rate = got["events"] / got["wall"]
    share = cpu / (got["wall"] + 1.0)
    done = {
        "events_per_s": round(rate),
        "requests_per_s": round(got["requests"] / got["wall"]),
        "server_cpu_share": round(share, 3),
        "server_cpu_us_per_event": round(share * 1e6 / rate, 1) if rate else None,
    }
    if redis_pid and rate:
        done["redis_cpu_us_per_event"] = round(redis_cpu / (got["wall"] + 1.0) * 1e6 / rate, 1)
    return done


def ceiling(result: dict[str, Any]) -> dict[str, Any]:
    """What the two goals together ask of the batch path, against what it costs: single
    >= 0.5 x limit and batch >= 5 x single put batch at 2.5 x the limit or more. Redis
    runs one thread, so its CPU per event caps the rate at one core's worth; and the API,
    Redis and the load generator share the machine's cores."""
    batch = result["batch"]
    needed = 2.5 * result["limit"]["events_per_s"]
    redis_us = batch.get("redis_cpu_us_per_event") or 0.0
    cost_us = redis_us + batch["server_cpu_us_per_event"]
    return {
        "batch_needed_per_s": round(needed),
        "redis_caps_batch_at_per_s": round(1e6 / redis_us) if redis_us else None,
        "cores_needed_by_api_and_redis": round(needed * cost_us / 1e6, 2),
        "cores": os.cpu_count(),
    }


def main(args: argparse.Namespace) -> dict[str, Any]:
    procs = Procs()
    try:
        srv = procs.fresh_redis("ingest")
        limit_port, api_port = free_port(), free_port()
        limit = procs.spawn(
            "ingest-limit", [sys.executable, __file__, "--serve-limit", "--port", str(limit_port)]
        )
        env = {
            "RELAY_REDIS_URL": srv.url,
            "RELAY_HOST": HOST,
            "RELAY_PORT": str(api_port),
            "RELAY_API_TOKENS": TOKEN,
            "RELAY_KEY_PREFIX": "ingest",
            "RELAY_LOG_FORMAT": "json",
            "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        }
        api = procs.spawn("ingest-api", [sys.executable, "-m", "relay", "api"], env)
        wait_ready(api, "ingest-api", api_port, "/readyz")
        listening(limit, "ingest-limit", limit_port)
        post_json(api_port, "/v1/endpoints", {"url": "http://127.0.0.1:9/hook"})
        rounds: dict[str, list[dict[str, Any]]] = {m: [] for m in PATHS}
        for _ in range(args.rounds):
            for mode in PATHS:
                if mode == "limit":
                    rounds[mode].append(run_mode(mode, limit_port, limit.pid, args))
                else:
                    rounds[mode].append(run_mode(mode, api_port, api.pid, args, srv.pid))
        out: dict[str, Any] = {
            "machine": machine(),
            "config": {
                k: getattr(args, k)
                for k in ("seconds", "rounds", "concurrency", "batch_concurrency", "batch")
            },
        }
        for mode, runs in rounds.items():
            median = statistics.median(r["events_per_s"] for r in runs)
            chosen = min(runs, key=lambda r: abs(r["events_per_s"] - median))
            out[mode] = {**chosen, "rounds": [r["events_per_s"] for r in runs]}
        single, batch = out["single"]["events_per_s"], out["batch"]["events_per_s"]
        out["single_vs_limit"] = round(single / out["limit"]["events_per_s"], 2)
        out["batch_vs_single"] = round(batch / single, 2)
        out["ceiling"] = ceiling(out)
        return out
    finally:
        procs.close()


def table(result: dict[str, Any]) -> str:
    rows = [
        ("limit: aiohttp handler, parse and answer", "limit", "1.00x"),
        ("relay POST /v1/events (Idempotency-Key)", "single", f"{result['single_vs_limit']:.2f}x"),
        (f"relay POST /v1/events/batch ({result['config']['batch']}/request)", "batch", ""),
    ]
    lines = [
        f"{'ingest, one API process':44}  {'events/s':>9}  {'rounds':>23}  {'vs limit':>8}"
        f"  {'API CPU':>7}  {'CPU us/event':>12}  {'Redis us/event':>14}",
        f"{'-' * 44}  {'-' * 9}  {'-' * 23}  {'-' * 8}  {'-' * 7}  {'-' * 12}  {'-' * 14}",
    ]
    for label, mode, ratio in rows:
        r = result[mode]
        if mode == "batch":
            ratio = f"{r['events_per_s'] / result['limit']['events_per_s']:.2f}x"
        spread = " ".join(f"{x:,}" for x in r["rounds"])
        lines.append(
            f"{label:44}  {r['events_per_s']:>9,}  {spread:>23}  {ratio:>8}"
            f"  {r['server_cpu_share']:>7.2f}  {r['server_cpu_us_per_event']:>12,.1f}"
            f"  {r.get('redis_cpu_us_per_event', '-'):>14}"
        )
    lines.append(
        f"single / limit {result['single_vs_limit']:.2f}x (goal >= 0.5x); "
        f"batch / single {result['batch_vs_single']:.2f}x (goal >= 5x)"
    )
    c = result["ceiling"]
    lines.append(
        f"both goals put batch at >= 2.5x the limit, {c['batch_needed_per_s']:,} events/s: "
        f"Redis (one thread) caps it at {c['redis_caps_batch_at_per_s'] or 0:,}, and the API "
        f"and Redis would need {c['cores_needed_by_api_and_redis']} of the {c['cores']} cores"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--batch-concurrency", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--port", type=int)
    parser.add_argument("--generate", choices=sorted(PATHS))
    parser.add_argument("--serve-limit", action="store_true")
    args = parser.parse_args()
    if args.serve_limit:
        serve_limit(args.port)
    elif args.generate:
        generate(args.generate, args.port, args.seconds, args.concurrency, args.batch)
    else:
        result = main(args)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "ingest.json").write_text(json.dumps(result, indent=2) + "\n")
        print(table(result))
