"""Profile relay under the benchmark's load with py-spy: the worker draining, the API ingesting.

    python bench/profile.py [--n 20000] [--out bench/results/tmp/profile]

Starts the same fresh Redis, API and receiver as ``bench/run.py``; records

* ``worker.txt``: py-spy samples of one worker draining N pending deliveries,
* ``api.txt``: py-spy samples of the API while N events are published (32 clients),

in collapsed-stack form (feed to any flamegraph tool), and prints the top functions by
own time and by inclusive time for each. Needs ``py-spy`` (in the ``bench`` extra) and
the permission to attach to a child process (root, or ptrace_scope 0).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load
from bench.common import TMP, Procs, Receiver
from bench.scenarios import TOKEN, Cfg, relay

GIL = False  # --gil: only samples holding the GIL (Python CPU, not time blocked in syscalls)


def spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    argv = [exe, "record", "--pid", str(pid), "--rate", "1000", "--format", "raw"]
    argv += ["--output", str(out), "--nonblocking", *(["--gil"] if GIL else [])]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def finish(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def summary(path: Path, top: int = 25) -> str:
    """Top functions by own ("self") samples and by inclusive samples."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [_short(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    out = [f"{path.name}: {total} samples"]
    for title, counter in (("own time", own), ("inclusive time", incl)):
        out.append(f"  top by {title}:")
        for name, n in counter.most_common(top):
            out.append(f"    {100 * n / max(total, 1):5.1f}%  {name}")
    return "\n".join(out)


def _short(frame: str) -> str:
    """``fn (/long/path/site-packages/pkg/mod.py:123)`` -> ``fn (pkg/mod.py)``."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where})"


async def main(n: int, out: Path) -> None:
    cfg = Cfg(n, 64, 32, 500, 5)
    procs = Procs()
    receiver = Receiver(procs)
    try:
        await receiver.start()
        async with relay(receiver, "profile", cfg) as r:
            api_spy = spy(r.api.pid, out / "api.txt")
            await asyncio.sleep(0.5)
            pub = await load.publish(r.api_port, TOKEN, n, cfg.clients)
            finish(api_spy)
            print(f"ingest: {pub['per_s']:,.0f} events/s under py-spy", flush=True)
            await receiver.reset()
            r.start_workers(1)
            await receiver.wait_for("count", 1, 30, r.watch())  # start-up not profiled
            worker_spy = spy(r.workers[0].pid, out / "worker.txt")
            st = await receiver.wait_for("unique_ids", n, 60 + n / 100, r.watch())
            finish(worker_spy)
            span = st["last"] - st["first"]
            print(f"drain: {n / span:,.0f} deliveries/s under py-spy", flush=True)
    finally:
        await receiver.close()
        procs.close()
    for name in ("worker.txt", "api.txt"):
        if (out / name).exists():
            print(summary(out / name))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="profile relay's worker and API with py-spy")
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--out", type=Path, default=TMP / "profile")
    parser.add_argument("--gil", action="store_true", help="py-spy --gil: Python CPU only")
    args = parser.parse_args()
    GIL = args.gil
    args.out.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(args.n, args.out))
