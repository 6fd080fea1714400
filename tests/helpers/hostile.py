"""Hostile tenant logic from the adversarial run, shared by the tests and bench/hostile.py.

Each passes the checks made when it is written, so only the budgets at publish stop it:
run inline, each takes seconds per publish (the memory filter also gigabytes).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from relay.redisproc import free_port

ROOT = Path(__file__).resolve().parents[2]


def zeros(n: int) -> str:
    return "[" + ",".join(["0"] * n) + "]"


# The run's regex filter (the pattern compiled again on every pass), refused at write:
# its pattern is 240,002 RE2 instructions.
def regex_filter(n: int) -> str:
    return f"{zeros(n)}.exists(x, event_type.matches('(?i)\\\\pL{{1,200}}[0-9]{{1,200}}'))"


# The same shape within the write checks (4,295 instructions, 1,813 characters): the
# pattern never matches an event type without digits, so all 880 passes compile it.
SLOW_FILTER = f"{zeros(880)}.exists(x, event_type.matches('\\\\pL{{1,3}}\\\\pN{{1,3}}'))"

# String concatenation inside a comprehension: every pass allocates 20 copies of
# payload.s, and cel-cpp frees none of them before the evaluation ends.
MEMORY_FILTER = "payload.l.exists(x, (" + " + ".join(["payload.s"] * 20) + ").size() == 0)"
MEMORY_PAYLOAD: dict[str, Any] = {"s": "a" * 27_000, "l": [0] * 400}  # 27.8 KB

# An ordinary schema (an array of objects, each one of 41 shapes) and a 229 KB payload
# that matches it: Python's jsonschema tries the branches of every item.
SLOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "anyOf": [
                    {
                        "type": "object",
                        "required": [f"k{i}"],
                        "properties": {f"k{i}": {"type": "integer"}},
                    }
                    for i in range(40)
                ]
                + [{"type": "object"}]
            },
        }
    },
}
SLOW_SCHEMA_PAYLOAD: dict[str, Any] = {"items": [{"z": i} for i in range(20_000)]}


def status_bytes(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` memory field (``VmRSS``, ``VmHWM``) in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def relay_env(redis_url: str, token: str, *, prefix: str, **extra: str) -> dict[str, str]:
    """The environment of relay processes sharing one Redis namespace (a fresh prefix),
    on a free loopback port; ``extra``: more ``RELAY_*`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        RELAY_REDIS_URL=redis_url,
        RELAY_KEY_PREFIX=prefix + os.urandom(4).hex(),
        RELAY_PORT=str(free_port()),
        RELAY_HOST="127.0.0.1",
        RELAY_API_TOKENS=token,
        RELAY_ALLOW_PRIVATE_NETWORKS="1",
        RELAY_LOG_LEVEL="warning",
    )
    env.update(extra)
    return env


async def start_relay(command: str, env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    """``relay <command>`` (``api``, ``worker``) with ``env``; its stderr goes to ``log``."""
    with log.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "relay", command, env=env, cwd=ROOT, stderr=out
        )


async def start_api(
    redis_url: str, token: str, log: Path, *, prefix: str, log_level: str = "warning"
) -> tuple[asyncio.subprocess.Process, str]:
    """A ``relay api`` process on a free loopback port, answering ``/healthz``; its
    stderr goes to ``log``. Returns the process and its base URL."""
    env = relay_env(redis_url, token, prefix=prefix, RELAY_LOG_LEVEL=log_level)
    proc = await start_relay("api", env, log)
    return proc, await healthy(proc, env, log)


async def healthy(proc: asyncio.subprocess.Process, env: dict[str, str], log: Path) -> str:
    """The base URL of the ``relay api`` of ``env``, once it answers ``/healthz``."""
    url = f"http://127.0.0.1:{env['RELAY_PORT']}"
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as s:
        while True:
            assert proc.returncode is None, tail(log)
            try:
                async with s.get(url + "/healthz") as r:
                    if r.status == 200:
                        return url
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, "relay api did not come up"
            await asyncio.sleep(0.1)
