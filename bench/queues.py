"""The queue-library baselines: their virtualenvs, and the step that measures one of them.

``baseline``: N jobs enqueued with no worker running, then one worker process drains
them (``bench/baselines.py``); first arrival to last arrival at the shared receiver,
CPU of the worker, its Redis and the receiver, and the Redis cost per job. Each library
runs in a virtualenv of its own, made on first use:

They cannot share relay's: arq requires redis<6 and saq's redis extra redis<8, while
relay pins redis 8.1.0; taskiq, dramatiq and streaq each get one of their own too, so
that no library's pins can move another's (streaq brings coredis, taskiq pydantic).

=========  =======================  =================================
system     virtualenv               requirements (every package pinned)
=========  =======================  =================================
arq, saq   ``bench/.venv``          ``requirements-baselines.txt``
taskiq     ``bench/.venv-taskiq``   ``requirements-taskiq.txt``
dramatiq   ``bench/.venv-dramatiq`` ``requirements-dramatiq.txt``
streaq     ``bench/.venv-streaq``   ``requirements-streaq.txt``
=========  =======================  =================================
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import BENCH, Procs, Receiver, RedisMeter, check_alive, drain_rate, drain_with_cpu

VENVS: dict[str, tuple[str, str]] = {
    "arq": (".venv", "requirements-baselines.txt"),
    "saq": (".venv", "requirements-baselines.txt"),
    "taskiq": (".venv-taskiq", "requirements-taskiq.txt"),
    "dramatiq": (".venv-dramatiq", "requirements-dramatiq.txt"),
    "streaq": (".venv-streaq", "requirements-streaq.txt"),
}
SYSTEMS = tuple(VENVS)


def python(system: str) -> Path:
    """The interpreter of ``system``'s virtualenv."""
    return BENCH / VENVS[system][0] / "bin" / "python"


def ensure(system: str) -> None:
    """Make (or refresh) ``system``'s virtualenv at the pinned versions; a stamp of the
    requirements file's hash skips the install when nothing changed."""
    venv_name, req_name = VENVS[system]
    req, venv = BENCH / req_name, BENCH / venv_name
    stamp = venv / ".requirements-sha256"
    want = hashlib.sha256(req.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == want and python(system).exists():
        return
    print(f"bench: installing {req_name} into bench/{venv_name} ...", file=sys.stderr, flush=True)
    if not python(system).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(req)], check=True)
    stamp.write_text(want)


async def baseline(receiver: Receiver, n: int, concurrency: int, system: str) -> dict[str, Any]:
    """Enqueue N jobs, then start one worker process; drain rate at the receiver."""
    procs = Procs()
    try:
        srv = procs.fresh_redis(system)
        py = str(python(system))
        script = str(BENCH / "baselines.py")
        enq = procs.spawn(f"{system}-enqueue", [py, script, "enqueue", system, srv.url, str(n)])
        if await asyncio.to_thread(enq.wait) != 0:
            check_alive(enq, f"{system}-enqueue")
        await receiver.reset()
        meter = RedisMeter(srv.url)
        try:
            s1 = meter.snapshot()
            argv = [py, script, "work", system, srv.url, receiver.url, str(concurrency)]
            work = procs.spawn(f"{system}-worker", argv)
            watch = [(work, f"{system}-worker")]
            pids = {"worker0": work.pid, "redis": srv.pid or 0, "receiver": receiver.proc.pid}
            st, cpu = await drain_with_cpu(receiver, n, (60 + n / 100) * 3, pids, watch)
            await asyncio.sleep(0.5)
            s2 = meter.snapshot()
        finally:
            meter.close()
    finally:
        procs.close()
    return {**drain_rate(st), "cpu_ms": cpu, "redis": RedisMeter.delta(s1, s2, n)}
