"""uvloop against asyncio's own loop, in alternating pairs: one worker's CPU per delivery.

    python bench/loops.py [--rounds 3] [--n 20000]

``make bench``'s ``asyncio`` step runs a minute after ``drain1``, and on a shared VM the
host's speed drifts more than that in a minute. Here each round drains N published
deliveries with one worker on uvloop, then at once the same on asyncio, and prints the
worker's user and system CPU per delivery (``/proc/<pid>/stat``, from its first arrival
to the last) and the drain rate of each. Not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load
from bench.common import Procs, Receiver
from bench.scenarios import TOKEN, Cfg, relay


def user_sys(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    hz = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / hz, int(fields[12]) / hz


async def drain(receiver: Receiver, loop: str, n: int) -> tuple[float, float, float]:
    """User and system CPU ms per delivery of the worker, and deliveries/s."""
    cfg = Cfg(n=n, concurrency=64, clients=32, rate=0, seconds=0, event_loop=loop)
    await receiver.reset()
    async with relay(receiver, f"loops-{loop}", cfg) as r:
        await load.publish(r.api_port, TOKEN, n, 32)
        r.start_workers(1)
        pid = r.workers[0].pid
        while (await receiver.stats())["count"] == 0:  # noqa: ASYNC110 (another process)
            await asyncio.sleep(0.005)
        before, started = user_sys(pid), time.monotonic()
        first = (await receiver.stats())["count"]
        st = await receiver.wait_for("unique_ids", n, 120, r.watch())
        after, took = user_sys(pid), time.monotonic() - started
    k = st["count"] - first
    return (after[0] - before[0]) * 1000 / k, (after[1] - before[1]) * 1000 / k, k / took


async def main(rounds: int, n: int) -> None:
    procs = Procs()
    receiver = Receiver(procs)
    try:
        await receiver.start()
        for i in range(rounds):
            got = {loop: await drain(receiver, loop, n) for loop in ("uvloop", "asyncio")}
            for loop, (user, system, rate) in got.items():
                print(
                    f"round {i + 1} {loop:8} user {user:.3f} + sys {system:.3f} = "
                    f"{user + system:.3f} ms/delivery, {rate:,.0f}/s",
                    flush=True,
                )
            u, a = sum(got["uvloop"][:2]), sum(got["asyncio"][:2])
            print(f"round {i + 1} uvloop / asyncio CPU per delivery: {u / a:.2f}", flush=True)
    finally:
        await receiver.close()
        procs.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=20000)
    args = ap.parse_args()
    asyncio.run(main(args.rounds, args.n))
