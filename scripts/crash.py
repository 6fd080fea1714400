"""Crash-injection suite (``make crash``): SIGKILL workers, and Redis, while publishing.

Per round, everything on 127.0.0.1 and in a temporary directory:

1. a real ``redis-server`` with ``appendonly yes`` and ``appendfsync always``
   (``relay.redisproc``), an API process (``python -m relay api``), a recording
   receiver (``scripts/receiver.py``) and ``--workers`` worker processes;
2. N events are published over HTTP (each with its own ``Idempotency-Key``; an answer
   other than 200/201 is not an acknowledgement and is retried with the same key)
   while a random worker is SIGKILLed every few hundred milliseconds and replaced (a
   worker that is up, never the last one up, so survivors are there to reclaim); in
   the rounds of ``--redis-kill-rounds`` redis-server is SIGKILLed once mid-publish
   and restarted on the same data directory, and the API and workers ride through;
3. once the queue drains (nothing due, scheduled or leased) the round compares what
   was acknowledged with what the receiver got and with Redis's attempt logs.

Reported per round: events acknowledged and received, **lost** (acknowledged, never
received), duplicate sends, duplicates **explained** by a crash and **unexplained**,
recovery time after each kill (worker: SIGKILL until the last delivery it held is
finished; Redis: down time, then time to the next delivery), attempt distribution
(final ``attempts`` per delivery). The exit status is non-zero when any round lost an
acknowledged event, has an unexplained duplicate, did not drain, did not get every
event acknowledged, or saw a process die that was not killed on purpose.

When is a duplicate explained? Attempts are counted at claim, and a worker sends claim
j of a delivery with ``x-relay-attempt: j``; the receiver records that number with
every copy. Claim j of a delivery ends with the j-th unfenced entry of its attempt log:
the recorded outcome, or the ``lease_expired`` entry reclaim writes, which names the
worker that held the claim (late results of superseded claims are logged ``fenced``
and end nothing). A claim is *lost to a crash* when it ended ``lease_expired`` and
either (a) its worker is one this script SIGKILLed, before that reclaim, or (b) the
reclaim happened inside a Redis outage window, from the SIGKILL of redis-server to
its restart plus one lease plus 2 s, when no worker could extend a lease or record an
outcome. Every copy of a delivery beyond the first is a duplicate send; copies from
claims lost to a crash are explained, and so is at most one copy from the claims that
were not (the send whose outcome was recorded); anything else is unexplained,
including two copies under the same claim number.

    python scripts/crash.py --rounds 5 --events 1000 --workers 4 --json bench/results/crash.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crash_report import TOTALS, analyze, print_table  # noqa: E402

from relay.domain import attemptlog  # noqa: E402
from relay.queue.keys import Keys  # noqa: E402
from relay.redisproc import RedisServer, free_port  # noqa: E402

PREFIX = "crash"


@dataclass
class Config:
    events: int = 1000
    workers: int = 4
    lease: float = 1.5
    kill_every: tuple[float, float] = (0.2, 0.6)
    min_kills: int = 1
    publishers: int = 16
    drain_timeout: float = 120.0
    give_up: float = 60.0


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    ready_at: float | None = None  # when it logged worker.started
    killed_at: float | None = None
    noted: bool = False  # an unexpected exit already reported

    def ready(self) -> bool:
        if self.ready_at is None:
            for line in self.log.read_bytes().splitlines():
                if b'"worker.started"' in line:
                    stamp = orjson.loads(line)["timestamp"].replace("Z", "+00:00")
                    self.ready_at = datetime.fromisoformat(stamp).timestamp()
                    break
        return self.ready_at is not None


@dataclass
class RoundState:
    procs: list[Proc] = field(default_factory=list)
    kills: list[dict[str, Any]] = field(default_factory=list)
    outages: list[dict[str, float]] = field(default_factory=list)
    unexpected: list[dict[str, Any]] = field(default_factory=list)
    replacements: dict[str, Proc] = field(default_factory=dict)
    acked: dict[int, tuple[str, str, float]] = field(default_factory=dict)
    publish_errors: Counter[str] = field(default_factory=Counter)
    refused: dict[int, int] = field(default_factory=dict)
    publish_done: asyncio.Event = field(default_factory=asyncio.Event)
    kills_done: asyncio.Event = field(default_factory=asyncio.Event)
    redis_due: asyncio.Event = field(default_factory=asyncio.Event)  # time to kill Redis


class Round:
    """One round: start everything, publish under fire, drain, collect, tear down."""

    def __init__(self, number: int, cfg: Config, kill_redis: bool, rng: random.Random) -> None:
        self.number = number
        self.cfg = cfg
        self.kill_redis = kill_redis
        self.rng = rng
        self.dir = Path(tempfile.mkdtemp(prefix=f"relay-crash-r{number}-"))
        (self.dir / "logs").mkdir()
        self.redis = RedisServer(data_dir=self.dir / "redis", appendonly=True)
        self.token = secrets.token_urlsafe(16)
        self.api_port = free_port()
        self.recv_port = free_port()
        self.st = RoundState()
        self.redis_kill_at = int(cfg.events * rng.uniform(0.3, 0.6))  # acknowledged events
        self._spawned = 0
        self.keep = False

    # ------------------------------------------------------------------ processes

    def _env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "RELAY_REDIS_URL": self.redis.url,
            "RELAY_KEY_PREFIX": PREFIX,
            "RELAY_API_TOKENS": self.token,
            "RELAY_HOST": "127.0.0.1",
            "RELAY_PORT": str(self.api_port),
            "RELAY_LEASE_SECONDS": str(self.cfg.lease),
            "RELAY_RETRY_SCHEDULE": "250ms,500ms,1s,2s,2s,2s,2s",
            "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
            "RELAY_SHUTDOWN_GRACE": "2",
            "RELAY_LOG_FORMAT": "json",
            "RELAY_LOG_LEVEL": "warning",
            **extra,
        }

    def _spawn(self, name: str, args: list[str], **env: str) -> Proc:
        path = self.dir / "logs" / f"{name}.log"
        log = path.open("wb")
        popen = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=self._env(**env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        proc = Proc(name, popen, path)
        self.st.procs.append(proc)
        return proc

    def _spawn_worker(self) -> Proc:
        self._spawned += 1
        wid = f"r{self.number}-w{self._spawned}"
        # info level: the kill loop waits for "worker.started" before a worker is fair game
        return self._spawn(
            wid, ["-m", "relay", "worker"], RELAY_WORKER_ID=wid, RELAY_LOG_LEVEL="info"
        )

    def workers(self) -> list[Proc]:
        return [p for p in self.st.procs if p.name.startswith(f"r{self.number}-w")]

    async def _supervise(self, stop: asyncio.Event) -> None:
        """Restart any process that died without being killed on purpose, and say so."""
        while not stop.is_set():
            for p in list(self.st.procs):
                rc = p.popen.poll()
                if rc is None or p.killed_at is not None or p.noted:
                    continue
                p.noted = True
                self.st.unexpected.append({"process": p.name, "rc": rc, "at": time.time()})
                if p.name.startswith(f"r{self.number}-w"):
                    self._spawn_worker()
            await asyncio.sleep(0.05)

    async def _kill_workers(self) -> None:
        lo, hi = self.cfg.kill_every
        while not (self.st.publish_done.is_set() and len(self.st.kills) >= self.cfg.min_kills):
            await asyncio.sleep(self.rng.uniform(lo, hi))
            # Only workers that are up (killing one still importing proves nothing), and
            # never the last one: recovery is the survivors reclaiming the dead one's
            # leases, not how fast a replacement boots on a busy machine.
            up = [p for p in self.workers() if p.popen.poll() is None and p.ready()]
            if len(up) < 2:
                continue
            victim = self.rng.choice(up)
            victim.killed_at = time.time()
            victim.popen.kill()
            victim.popen.wait()
            self.st.kills.append({"worker": victim.name, "at": victim.killed_at})
            self.st.replacements[victim.name] = self._spawn_worker()
        self.st.kills_done.set()

    async def _kill_redis(self) -> None:
        await self.st.redis_due.wait()
        killed = time.time()
        self.redis.kill()
        # Sometimes longer than a lease, so leases run out while Redis is away.
        await asyncio.sleep(self.rng.uniform(0.3, 2.5))
        await asyncio.to_thread(self.redis.start, 30.0)  # same port, same AOF
        self.st.outages.append({"killed_at": killed, "ready_at": time.time()})

    # ------------------------------------------------------------------ traffic

    async def _publish(self, session: aiohttp.ClientSession) -> None:
        url = f"http://127.0.0.1:{self.api_port}/v1/events"
        sem = asyncio.Semaphore(self.cfg.publishers)

        async def one(i: int) -> None:
            body = {"type": "crash.test", "payload": {"round": self.number, "i": i}}
            headers = {"Idempotency-Key": f"crash-r{self.number}-e{i}"}
            deadline = time.monotonic() + self.cfg.give_up
            delay = 0.05
            async with sem:
                while time.monotonic() < deadline:
                    try:
                        async with session.post(url, json=body, headers=headers) as r:
                            if r.status in (200, 201):
                                data = await r.json()
                                dlv = data["deliveries"][0]["id"]
                                self.st.acked[i] = (data["id"], dlv, time.time())
                                if len(self.st.acked) >= self.redis_kill_at:
                                    self.st.redis_due.set()
                                return
                            self.st.publish_errors[f"http {r.status}"] += 1
                            if 400 <= r.status < 500:
                                self.st.refused[i] = r.status
                                return
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        self.st.publish_errors[type(exc).__name__] += 1
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)

        await asyncio.gather(*(one(i) for i in range(self.cfg.events)))
        self.st.publish_done.set()
        self.st.redis_due.set()  # at the latest

    async def _wait_http(self, url: str, session: aiohttp.ClientSession) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                async with session.get(url) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up; logs in {self.dir / 'logs'}")
            await asyncio.sleep(0.05)

    def _shard_keys(self, event_id: str | None = None) -> list[Any]:
        """The shards to drain (``event_id`` None) or the one holding ``event_id``: one
        shard here."""
        return [Keys(PREFIX).shard(0)]

    def _client(self) -> Any:
        return aioredis.Redis(port=self.redis.port, decode_responses=True)

    async def _drain(self, client: Any) -> bool:
        deadline = time.monotonic() + self.cfg.drain_timeout
        while time.monotonic() < deadline:
            try:
                empty = True
                for sk in self._shard_keys():
                    empty = empty and await client.zcard(sk.due) == 0
                    empty = empty and await client.zcard(sk.processing) == 0
                if empty:
                    return True
            except Exception:  # Redis restarting: ask again
                pass
            await asyncio.sleep(0.1)
        return False

    async def _collect(self, client: Any) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        items = sorted(self.st.acked.items())
        for start in range(0, len(items), 500):
            chunk = items[start : start + 500]
            async with client.pipeline(transaction=False) as pipe:
                for _, (evt, dlv, _) in chunk:
                    sk = self._shard_keys(evt)[0]
                    pipe.exists(sk.event(evt))
                    pipe.hgetall(sk.delivery(dlv))
                    pipe.lrange(sk.log(dlv), 0, -1)
                res = await pipe.execute()
            for n, (i, (evt, dlv, _)) in enumerate(chunk):
                exists, row, log = res[3 * n : 3 * n + 3]
                log = [orjson.loads(e) for e in log]
                if "a1" in row:  # a first request that succeeded, kept in the hash (issue 17)
                    log.insert(0, attemptlog.expand(row["a1"]))
                out[i] = {"event": evt, "delivery": dlv, "exists": exists, "row": row, "log": log}
        return out

    async def run(self) -> dict[str, Any]:
        started = time.time()
        self.redis.start()
        out = str(self.dir / "received.jsonl")
        # The receiver answers after 0-40 ms, so kills catch sends in flight.
        args = ["--port", str(self.recv_port), "--out", out, "--delay-ms", "0,40"]
        self._spawn("receiver", ["scripts/receiver.py", *args])
        self._spawn("api", ["-m", "relay", "api"])
        for _ in range(self.cfg.workers):
            self._spawn_worker()
        auth = {"Authorization": f"Bearer {self.token}"}
        timeout = aiohttp.ClientTimeout(total=15)
        client = self._client()
        stop = asyncio.Event()
        try:
            async with aiohttp.ClientSession(headers=auth, timeout=timeout) as session:
                api = f"http://127.0.0.1:{self.api_port}"
                recv = f"http://127.0.0.1:{self.recv_port}"
                await self._wait_http(api + "/readyz", session)
                await self._wait_http(recv + "/stats", session)
                endpoint = {"url": recv + "/hook", "description": "crash suite"}
                async with session.post(api + "/v1/endpoints", json=endpoint) as r:
                    assert r.status == 201, await r.text()
                t0 = time.time()
                tasks = [
                    asyncio.create_task(self._supervise(stop)),
                    asyncio.create_task(self._kill_workers()),
                ]
                if self.kill_redis:
                    tasks.append(asyncio.create_task(self._kill_redis()))
                await self._publish(session)
                await self.st.kills_done.wait()
                published = time.time()
                drained = await self._drain(client)
                drain_done = time.time()
                await asyncio.sleep(0.2)  # let the receiver settle its last answers
                async with session.get(recv + "/records") as r:
                    records = await r.json()
                stop.set()
                await asyncio.gather(*tasks)
            rows = await self._collect(client)
        finally:
            stop.set()
            await client.aclose()
            self._teardown()
        report = analyze(self, rows, records, drained)
        report["seconds"] = {
            "total": round(time.time() - started, 2),
            "publish": round(published - t0, 2),
            "drain": round(drain_done - published, 2),
        }
        if report["ok"] and not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            report["kept_dir"] = str(self.dir)
        return report

    def _teardown(self) -> None:
        for p in self.st.procs:
            if p.popen.poll() is None:
                p.popen.terminate()
        for p in self.st.procs:
            try:
                p.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()
        self.redis.stop()


# ---------------------------------------------------------------------- CLI


def parse_rounds(spec: str | None, rounds: int) -> set[int]:
    word = (spec or "").strip().lower()
    if spec is None:
        return set(range(1, rounds + 1, 2))  # every other round, starting with the first
    if word in ("", "none"):
        return set()
    if word == "all":
        return set(range(1, rounds + 1))
    return {int(x) for x in word.split(",") if x.strip()}


async def run_rounds(
    args: argparse.Namespace, seed: int, redis_rounds: set[int]
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    cfg = Config(
        events=args.events, workers=args.workers, lease=args.lease, min_kills=args.min_kills
    )
    results = []
    for n in range(1, args.rounds + 1):
        extra = ", Redis killed" if n in redis_rounds else ""
        print(f"round {n}/{args.rounds}: {cfg.events} events{extra}", file=sys.stderr, flush=True)
        rnd = Round(n, cfg, n in redis_rounds, rng)
        rnd.keep = args.keep
        results.append(await rnd.run())
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--events", type=int, default=1000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--redis-kill-rounds", help="e.g. 1,3 / all / none (default: odd rounds)")
    p.add_argument("--json", default=str(ROOT / "bench" / "results" / "crash.json"))
    p.add_argument("--seed", type=int)
    p.add_argument("--keep", action="store_true", help="keep every round's directory (logs)")
    p.add_argument("--lease", type=float, default=1.5, help="RELAY_LEASE_SECONDS for workers")
    p.add_argument("--min-kills", type=int, default=1, help="worker kills per round, at least")
    p.add_argument(
        "--outbox-rows",
        type=int,
        default=5000,
        help="then the outbox round (scripts/crash_outbox.py) with this many rows; 0: skip",
    )
    args = p.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    redis_rounds = parse_rounds(args.redis_kill_rounds, args.rounds)
    results = asyncio.run(run_rounds(args, seed, redis_rounds))
    totals = {k: sum(r[k] for r in results) for k in TOTALS}
    totals["worker_kills"] = sum(len(r["worker_kills"]) for r in results)
    totals["redis_kills"] = sum(len(r["redis_outages"]) for r in results)
    ok = all(r["ok"] for r in results)
    outbox = None
    if args.outbox_rows > 0:
        import crash_outbox

        outbox = crash_outbox.run_round(
            crash_outbox.parse(["--rows", str(args.outbox_rows), "--seed", str(seed)])
        )
        ok = ok and outbox["ok"]
    out = {
        "command": " ".join(["scripts/crash.py", *sys.argv[1:]]),
        "seed": seed,
        "config": {**vars(args), "redis_kill_rounds": sorted(redis_rounds)},
        "rounds": results,
        "totals": totals,
        "outbox": outbox,
        "ok": ok,
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    print_table(results)
    print(
        f"seed {seed}; lost {totals['lost']} of {totals['acknowledged']} acknowledged; "
        f"{totals['duplicate_sends']} duplicate sends, {totals['unexplained']} unexplained; "
        f"{totals['worker_kills']} worker kills, {totals['redis_kills']} Redis kills; {path}"
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
