"""Shared plumbing for the benchmark: processes, fresh Redis servers, the receiver, costs.

Everything binds and connects to 127.0.0.1 only. Child processes log to files under
``bench/results/tmp/`` (git-ignored) and are always stopped by ``Procs.close()``.
"""

from __future__ import annotations

import asyncio
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis

from relay.redisproc import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
TMP = RESULTS / "tmp"
HOST = "127.0.0.1"


# ---------------------------------------------------------------------------- processes


@dataclass
class Procs:
    """Child processes of one scenario; ``close`` stops whatever is left (TERM, then KILL)."""

    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    redis: list[RedisServer] = field(default_factory=list)

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Any:
        TMP.mkdir(parents=True, exist_ok=True)
        with (TMP / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                argv,
                env={**os.environ, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        self.procs.append(proc)
        return proc

    def fresh_redis(self, name: str, binary: str | None = None) -> RedisServer:
        """A new redis-server with an empty data dir; no AOF (throughput runs; see bench/README.md).
        ``binary``: another executable to start it with (bench/instructions.py)."""
        data = TMP / f"redis-{name}"
        if data.exists():
            for f in data.iterdir():
                f.unlink()
        srv = RedisServer(data_dir=data, appendonly=False, binary=binary)
        srv.start(timeout=60)
        self.redis.append(srv)
        return srv

    @staticmethod
    def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int | None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def close(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)
        self.procs.clear()
        for srv in self.redis:
            srv.stop()
        self.redis.clear()


@contextmanager
def private_redis() -> Iterator[str]:
    """A ``redis-server`` of the script's own, in a temporary directory, no append-only
    file: its URL while the block runs (bench/pool.py, filters.py, tracing.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(data_dir=Path(tmp), appendonly=False)
        server.start()
        try:
            yield server.url
        finally:
            server.stop()


def check_alive(proc: subprocess.Popen[bytes], name: str) -> None:
    if proc.poll() is not None:
        tail = (TMP / f"{name}.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")


# ---------------------------------------------------------------------------- receiver


class Receiver:
    """The receiver process and a control client for it."""

    def __init__(self, procs: Procs) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}/hook"
        self._base = f"http://{HOST}:{self.port}"
        self.proc = procs.spawn(
            "receiver", [sys.executable, str(BENCH / "receiver.py"), "--port", str(self.port)]
        )
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        deadline = time.monotonic() + 15
        while True:
            try:
                await self.stats()
                return
            except aiohttp.ClientError:
                check_alive(self.proc, "receiver")
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def reset(self, **opts: Any) -> None:
        assert self._session is not None
        async with self._session.post(self._base + "/_reset", json=opts) as resp:
            resp.raise_for_status()

    async def stats(self) -> dict[str, Any]:
        assert self._session is not None
        async with self._session.get(self._base + "/_stats") as resp:
            return dict(await resp.json())

    async def arrivals(self) -> list[list[Any]]:
        assert self._session is not None
        async with self._session.get(self._base + "/_arrivals") as resp:
            return list(await resp.json())

    async def wait_for(
        self, key: str, n: int, within: float, watch: Sequence[tuple[Any, str]] = ()
    ) -> dict[str, Any]:
        """Poll until ``stats[key] >= n``; fail if a watched process dies or time runs out."""
        deadline = time.monotonic() + within
        while True:
            st = await self.stats()
            if st[key] >= n:
                return st
            for proc, name in watch:
                check_alive(proc, name)
            if time.monotonic() > deadline:
                raise TimeoutError(f"receiver {key}={st[key]} of {n} after {within:.0f}s")
            await asyncio.sleep(0.05)


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU time of named processes over a window, per unit of work (ms per delivery).

    Less sensitive to other load on a shared machine than throughput is: it says what a
    delivery costs each process, whoever else is competing for the cores.
    """

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.start: dict[str, float] = {}

    def read(self) -> dict[str, float]:
        return {name: proc_cpu(pid) for name, pid in self.pids.items()}

    def begin(self) -> None:
        self.start = self.read()

    def per_unit_ms(self, units: int) -> dict[str, float]:
        end = self.read()
        out = {k: round((end[k] - self.start[k]) * 1000 / max(units, 1), 4) for k in end}
        out["total"] = round(sum(out.values()), 4)
        return out


async def drain_with_cpu(
    receiver: Receiver,
    n: int,
    within: float,
    pids: dict[str, int],
    watch: Sequence[tuple[Any, str]] = (),
    key: str = "unique_ids",
) -> tuple[dict[str, Any], dict[str, float]]:
    """Wait for ``stats[key] >= n`` like ``Receiver.wait_for``, metering CPU from the first
    arrival on (start-up excluded): returns the final stats and CPU ms per request."""
    meter = CpuMeter(pids)
    deadline = time.monotonic() + within
    while True:
        st = await receiver.stats()
        if st["count"] > 0:
            break
        for proc, name in watch:
            check_alive(proc, name)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no arrival at the receiver after {within:.0f}s")
        await asyncio.sleep(0.005)
    meter.begin()
    first = st["count"]
    st = await receiver.wait_for(key, n, max(1.0, deadline - time.monotonic()), watch)
    return st, meter.per_unit_ms(st["count"] - first)


def drain_rate(st: dict[str, Any], n: int | None = None) -> dict[str, Any]:
    """Throughput from the receiver's first arrival to its last."""
    span = (st["last"] or 0) - (st["first"] or 0)
    count = st["count"] if n is None else n
    return {
        "count": count,
        "seconds": round(span, 3),
        "per_s": round(count / span, 1) if span > 0 else None,
        "duplicates": st["count"] - st["unique_ids"],
    }


# ---------------------------------------------------------------------------- redis cost


class RedisMeter:
    """``INFO`` snapshots of one server: commandstats, read events (round trips), memory."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, decode_responses=True)

    def snapshot(self) -> dict[str, Any]:
        info = self.client.info("all")
        stats = {k.removeprefix("cmdstat_"): v for k, v in info.items() if k.startswith("cmdstat_")}
        return {
            "calls": {k: v["calls"] for k, v in stats.items()},
            "usec": {k: v["usec"] for k, v in stats.items()},
            "reads": info["total_reads_processed"],
            "bytes_in": info["total_net_input_bytes"],
            "bytes_out": info["total_net_output_bytes"],
            "used_memory": info["used_memory"],
            # the whole redis-server process (getrusage), main thread and any other
            "cpu_s": info["used_cpu_sys"] + info["used_cpu_user"],
            "cpu_sys_s": info["used_cpu_sys"],
        }

    @staticmethod
    def delta(before: dict[str, Any], after: dict[str, Any], per: int) -> dict[str, Any]:
        """Commands and round trips between two snapshots, per ``per`` unit of work.

        The snapshot's own ``INFO`` is left out of the command counts; its read event
        (one per snapshot) is subtracted from the round trips. Redis CPU: ``INFO cpu``
        (user + system of the server process) and the sum of ``INFO commandstats`` usec,
        in ms per unit. The usec sum counts a command run inside a script twice (on its own
        line and within the EVALSHA that ran it), so ``script_usec`` is given apart.
        """
        calls = {
            k: v - before["calls"].get(k, 0)
            for k, v in after["calls"].items()
            if k != "info" and v - before["calls"].get(k, 0) > 0
        }
        total = sum(calls.values())
        reads = after["reads"] - before["reads"] - 1
        scripts = ("evalsha", "eval", "fcall", "evalsha_ro", "eval_ro", "fcall_ro")
        script_calls = sum(calls.get(k, 0) for k in scripts)
        usec = {
            k: v - before.get("usec", {}).get(k, 0)
            for k, v in after.get("usec", {}).items()
            if k != "info"
        }
        cpu_ms = (after.get("cpu_s", 0.0) - before.get("cpu_s", 0.0)) * 1000
        sys_ms = (after.get("cpu_sys_s", 0.0) - before.get("cpu_sys_s", 0.0)) * 1000
        return {
            "units": per,
            "commands": total,
            "round_trips": reads,
            "commands_per_unit": round(total / per, 2),
            "round_trips_per_unit": round(reads / per, 3),
            "script_calls_per_unit": round(script_calls / per, 3),
            "bytes_to_redis_per_unit": round((after["bytes_in"] - before["bytes_in"]) / per),
            "bytes_from_redis_per_unit": round((after["bytes_out"] - before["bytes_out"]) / per),
            "redis_cpu_ms_per_unit": round(cpu_ms / per, 4),
            "redis_cpu_sys_ms_per_unit": round(sys_ms / per, 4),  # of it, the kernel's
            "command_usec_ms_per_unit": round(sum(usec.values()) / 1000 / per, 4),
            "script_usec_ms_per_unit": round(sum(usec.get(k, 0) for k in scripts) / 1000 / per, 4),
            "by_command": dict(sorted(calls.items(), key=lambda kv: -kv[1])),
        }

    def close(self) -> None:
        self.client.close()


# ---------------------------------------------------------------------------- machine


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    redis_version = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "redis": redis_version.split(" v=")[1].split()[0] if " v=" in redis_version else "?",
        "platform": platform.platform(),
        "aiohttp": aiohttp.__version__,
    }
