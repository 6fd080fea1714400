"""What a command costs the client through relay's pool (relay/queue/pool.py) and through
redis-py's ``BlockingConnectionPool``, in the same process, against one private
``redis-server``.

Each round sends ``--commands`` commands one after another (a worker's claim, record and
settle calls, and an API replica's publishes, are each one command after another on a
free connection) through a client on each pool, alternating, and takes the process's
CPU time per command; prints the medians and their ratio and writes
``bench/results/pool.json``. Part of ``make bench``, not of ``make test``.

    python bench/pool.py [--commands 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import private_redis
from relay.queue.pool import BlockingPool

RESULTS = Path(__file__).resolve().parent / "results" / "pool.json"
# as relay.queue.base.connect makes its pool
OPTIONS: dict[str, Any] = {
    "decode_responses": True,
    "socket_timeout": 5.0,
    "socket_connect_timeout": 5.0,
    "health_check_interval": 30,
    "max_connections": 256,
    "timeout": 20,
}


async def per_command_us(client: Any, commands: int) -> float:
    started = time.process_time()
    for i in range(commands):
        await client.execute_command("ECHO", i)
    return (time.process_time() - started) / commands * 1e6


async def run(url: str, commands: int, rounds: int) -> dict[str, Any]:
    stock = aioredis.BlockingConnectionPool.from_url(url, **OPTIONS)
    theirs = aioredis.Redis(connection_pool=stock)
    ours = aioredis.Redis(connection_pool=BlockingPool.from_url(url, **OPTIONS))
    got: dict[str, list[float]] = {"redis_py": [], "relay": []}
    try:
        for client in (theirs, ours):  # connect, warm up
            await per_command_us(client, 500)
        for _ in range(rounds):
            got["redis_py"].append(await per_command_us(theirs, commands))
            got["relay"].append(await per_command_us(ours, commands))
    finally:
        await theirs.aclose()
        await ours.aclose()
    med = {k: round(statistics.median(v), 1) for k, v in got.items()}
    return {
        "us_per_command": med,
        "rounds": got,
        "relay_over_redis_py": round(med["relay"] / med["redis_py"], 3),
        "commands": commands,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--commands", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with private_redis() as url:
        res = uvloop.run(run(url, args.commands, args.rounds))
    med = res["us_per_command"]
    print("client CPU per command (ECHO, one after another, uvloop; median of rounds)")
    print(f"  redis-py BlockingConnectionPool  {med['redis_py']:7.1f} us")
    print(f"  relay's pool (relay.queue.pool)  {med['relay']:7.1f} us")
    print(f"  relay / redis-py                 {res['relay_over_redis_py']:7.3f}x")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
