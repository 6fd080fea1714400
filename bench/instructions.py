"""Instructions per delivery, counted by valgrind's callgrind: a figure the host's speed
does not move.

    python bench/instructions.py [--n1 500 --n2 2500] [--loops asyncio,uvloop]

Wall-clock and CPU-time figures on a shared VM drift by 30-50% within minutes
(docs/performance.md); instruction counts do not (valgrind counts the same program on the same
input alike, whatever else the machine runs). For each event loop, this drains N1 and
then N2 published deliveries with one ``relay worker`` and its ``redis-server`` both
under callgrind, and the raw-client limit (``bench/load.py``'s ``limit``, the same
signed POSTs at the same concurrency) under callgrind too, and reports

    (instructions at N2 - instructions at N1) / (N2 - N1)

per process: start-up and shutdown cancel out. Redis is counted from just before the
worker starts (``callgrind_control --zero`` after the publish) until every outcome is
recorded. User-space instructions only: the kernel's share (socket calls) is not in them.

Not part of ``make bench`` (it takes a few minutes and needs valgrind); writes
``bench/results/instructions.json`` (``--redis-only``:
``bench/results/tmp/instructions-redis.json``, leaving the full run's as it is).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load
from bench.common import RESULTS, ROOT, TMP, Procs, Receiver, check_alive
from bench.scenarios import SHARD, TOKEN, Cfg, relay, relay_argv

CONCURRENCY = 64


def callgrind(out: Path) -> list[str]:
    exe = shutil.which("valgrind")
    if exe is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    return [exe, "--tool=callgrind", f"--callgrind-out-file={out}"]


def total(out: Path) -> int:
    """Instructions in a callgrind output file (its ``summary`` or ``totals`` line)."""
    text = out.read_text(errors="replace")
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    if m is None:
        raise RuntimeError(f"no instruction total in {out}")
    return int(m.group(1))


def control(flag: str, pid: int) -> None:
    subprocess.run(["callgrind_control", flag, str(pid)], check=True, capture_output=True)


def redis_wrapper(out: Path) -> Path:
    """An executable that runs redis-server under callgrind (RedisServer's ``binary``)."""
    path = TMP / "redis-under-callgrind"
    real = shutil.which("redis-server") or "redis-server"
    argv = " ".join(callgrind(out))
    path.write_text(f'#!/bin/sh\nexec {argv} {real} "$@"\n')
    path.chmod(0o755)
    return path


async def relay_round(
    receiver: Receiver, n: int, loop: str, worker_too: bool = True
) -> dict[str, int]:
    """One drain of ``n`` deliveries: instructions of the worker and of Redis."""
    tag = f"{loop}-{n}"
    r_out, w_out = TMP / f"cg-redis-{tag}.out", TMP / f"cg-worker-{tag}.out"
    for f in TMP.glob(f"cg-*-{tag}.out*"):
        f.unlink()
    cfg = Cfg(n=n, concurrency=CONCURRENCY, clients=16, rate=0, seconds=0, event_loop=loop)
    await receiver.reset()
    async with relay(receiver, f"cg-{tag}", cfg, redis_binary=redis_wrapper(r_out)) as r:
        await load.publish(r.api_port, TOKEN, n, 16)
        rpid = r.redis.pid or 0
        control("--zero", rpid)
        wrap = callgrind(w_out) if worker_too else []
        worker = r.procs.spawn(f"cg-{tag}-worker", wrap + relay_argv("worker"), r.env)
        await receiver.wait_for("unique_ids", n, 600, [(worker, "worker")])
        c = redis.Redis.from_url(r.redis.url)
        deadline = time.monotonic() + 120
        while c.zcard(SHARD.succeeded) < n:  # every outcome recorded
            check_alive(worker, "worker")
            if time.monotonic() > deadline:
                raise TimeoutError("outcomes not recorded within 120 s")
            await asyncio.sleep(0.2)
        control("--dump", rpid)
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=120)
        c.close()
    dumps = sorted(TMP.glob(f"cg-redis-{tag}.out.*"))
    return {"worker": total(w_out) if worker_too else 0, "redis": total(dumps[-1])}


async def limit_round(receiver: Receiver, n: int, loop: str) -> int:
    """Instructions of the raw client sending ``n`` signed POSTs (the limit)."""
    out = TMP / f"cg-limit-{loop}-{n}.out"
    await receiver.reset()
    setup = "import uvloop; uvloop.install(); " if loop == "uvloop" else ""
    code = (
        f"import asyncio; {setup}from bench import load; "
        f"asyncio.run(load.limit({receiver.url!r}, {n}, {CONCURRENCY}))"
    )
    argv = [*callgrind(out), sys.executable, "-c", code]
    proc = await asyncio.to_thread(subprocess.run, argv, cwd=ROOT, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode(errors="replace")[-2000:])
    return total(out)


@asynccontextmanager
async def receiving() -> AsyncIterator[Receiver]:
    """The local receiver every round sends to, stopped (with whatever is left) after."""
    procs = Procs()
    receiver = Receiver(procs)
    try:
        await receiver.start()
        yield receiver
    finally:
        await receiver.close()
        procs.close()


async def redis_only(n1: int, n2: int) -> dict[str, Any]:
    """Only Redis under callgrind (the worker runs at full speed): Lua changes, quickly."""
    async with receiving() as receiver:
        a = await relay_round(receiver, n1, "asyncio", worker_too=False)
        b = await relay_round(receiver, n2, "asyncio", worker_too=False)
    per = round((b["redis"] - a["redis"]) / (n2 - n1))
    print(f"redis per delivery: {per:,} instructions", flush=True)
    return {"n1": n1, "n2": n2, "redis_only": per}


async def main(n1: int, n2: int, loops: list[str]) -> dict[str, Any]:
    res: dict[str, Any] = {"n1": n1, "n2": n2, "concurrency": CONCURRENCY}
    async with receiving() as receiver:
        for loop in loops:
            a, b = await relay_round(receiver, n1, loop), await relay_round(receiver, n2, loop)
            la, lb = await limit_round(receiver, n1, loop), await limit_round(receiver, n2, loop)
            per = {k: round((b[k] - a[k]) / (n2 - n1)) for k in a}
            per["limit"] = round((lb - la) / (n2 - n1))
            res[loop] = per
            ratio = per["limit"] / per["worker"]
            print(
                f"{loop:8} per delivery: worker {per['worker']:,}  redis {per['redis']:,}  "
                f"raw client {per['limit']:,}  (worker vs client {ratio:.2f}x)",
                flush=True,
            )
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n1", type=int, default=500)
    ap.add_argument("--n2", type=int, default=2500)
    ap.add_argument("--loops", default="asyncio,uvloop")
    ap.add_argument("--redis-only", action="store_true", help="count Redis alone, quickly")
    args = ap.parse_args()
    if args.redis_only:  # a quick look: the full run's results file stays as it is
        out, path = asyncio.run(redis_only(args.n1, args.n2)), TMP / "instructions-redis.json"
    else:
        out = asyncio.run(main(args.n1, args.n2, args.loops.split(",")))
        path = RESULTS / "instructions.json"
    path.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    print(f"results: {path}")
