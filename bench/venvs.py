"""The baselines' virtualenvs: each queue library runs in one of its own, made on first use.

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

import hashlib
import subprocess
import sys
from pathlib import Path

from bench.common import BENCH

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
