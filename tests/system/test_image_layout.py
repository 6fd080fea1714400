"""The container image's layout, assembled and run without a container engine.

``tests/system/test_dockerfile.py`` builds the image itself with ``make image`` only where
a docker daemon or podman holds the pinned base image; this test runs everywhere. It
assembles what ``deploy/Dockerfile`` assembles and runs it the way the image does:

* the build context is only what the Dockerfile copies (``requirements.lock``,
  ``pyproject.toml``, ``README.md``, ``LICENSE``, ``relay/``), and the wheel is built
  from that copy;
* the virtualenv is made without pip; another pip installs ``requirements.lock`` into it
  with ``--require-hashes --no-deps`` (wheels only), then the wheel with ``--no-deps``,
  and ``pip check`` finds nothing missing; the build stage's own Lua check runs in it,
  and pip, setuptools and wheel are not in it;
* the process starts with the image's ENTRYPOINT + CMD (``relay api``), with the image's
  ENV, from its WORKDIR, as its non-root uid/gid 10001 when this test runs as root and
  the system's python3 is this interpreter's version (else as the user running it);
* the image's HEALTHCHECK command, as written in the Dockerfile, fails before the API
  listens and passes once it does.

Loopback only: RELAY_HOST is overridden to 127.0.0.1 (the image's 0.0.0.0 is for a
container's own network namespace).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.redisproc import free_port

pytestmark = pytest.mark.realredis

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()
SYSTEM_PYTHON = Path("/usr/bin/python3")


TOOLS_CHECK = (
    "import importlib.util as u; "
    "print(*[m for m in ('pip', 'setuptools', 'wheel') if u.find_spec(m)])"
)


def _json_instruction(name: str) -> list[str]:
    match = re.search(rf"^{name}\s+(\[.*\])\s*$", DOCKERFILE, re.M)
    assert match, f"no exec-form {name} in the Dockerfile"
    return list(json.loads(match.group(1)))


def _healthcheck() -> list[str]:
    match = re.search(r"^HEALTHCHECK .*?\\\n\s*CMD\s+(\[.*\])\s*$", DOCKERFILE, re.M)
    assert match, "no exec-form HEALTHCHECK CMD in the Dockerfile"
    return list(json.loads(match.group(1)))


def _image_env() -> dict[str, str]:
    """The runtime stage's ENV (the last ENV block)."""
    block = re.findall(r"^ENV ((?:.*\\\n)*.*)$", DOCKERFILE, re.M)[-1]
    pairs = re.findall(r"([A-Z_]+)=(\S+)", block.replace("\\\n", " "))
    return dict(pairs)


def _build_check() -> str:
    """The build stage's `python -c "..."` check that every Lua script is installed."""
    match = re.search(r'/opt/venv/bin/python -c "(.*)"\s*$', DOCKERFILE, re.M)
    assert match, "the Dockerfile's Lua check is gone"
    return match.group(1)


@functools.cache
def _system_python() -> str | None:
    """The interpreter that stands in for the image's when the test switches to its uid:
    one that uid can execute (this checkout's may live under /root, pyenv), of this
    interpreter's exact version, the one requirements.lock's markers were evaluated for
    (another patch release may need another set: redis needs async-timeout before 3.11.3)."""
    if os.geteuid() != 0 or not SYSTEM_PYTHON.exists():
        return None
    version = "import sys; print(*sys.version_info[:3])"
    out = subprocess.run([SYSTEM_PYTHON, "-c", version], capture_output=True, text=True)
    same = out.stdout.split() == [str(n) for n in sys.version_info[:3]]
    return str(SYSTEM_PYTHON) if same else None


def _uid_gid() -> tuple[int, int] | None:
    """The image's uid/gid, when this test can run relay as them (as root, see above)."""
    match = re.search(r"^USER (\d+):(\d+)$", DOCKERFILE, re.M)
    assert match, "the Dockerfile must name a numeric USER uid:gid"
    return (int(match.group(1)), int(match.group(2))) if _system_python() else None


@pytest.fixture(scope="module")
def image_venv() -> Iterator[Path]:
    """A venv assembled as the build stage assembles /opt/venv: made without pip, the
    locked dependencies installed into it by another pip with their hashes checked, then
    the wheel built from the Dockerfile's build context, without dependencies."""
    top = Path(tempfile.mkdtemp(prefix="relay-image-"))
    top.chmod(0o755)  # the non-root user must read the venv, as in the image
    try:
        context = top / "src"
        context.mkdir()
        for name in ("requirements.lock", "pyproject.toml", "README.md", "LICENSE"):
            shutil.copy(ROOT / name, context)
        shutil.copytree(
            ROOT / "relay", context / "relay", ignore=shutil.ignore_patterns("__pycache__")
        )
        wheels = top / "wheels"
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        # The image builds the wheel with its base's setuptools (--no-build-isolation);
        # here pip fetches the same pinned version into an isolated build environment.
        subprocess.run(
            [*pip, "wheel", "--no-deps", "-w", str(wheels), str(context)], check=True, timeout=300
        )
        (wheel,) = wheels.glob("relay_webhooks-*.whl")
        venv = top / "venv"
        python = _system_python() or sys.executable
        subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        into = [*pip, "--python", str(venv / "bin" / "python")]
        steps = [
            [
                *into,
                "install",
                "--require-hashes",
                "--no-deps",
                "--only-binary=:all:",
                "-r",
                str(context / "requirements.lock"),
            ],
            [*into, "install", "--no-deps", str(wheel)],
            [*into, "check"],
        ]
        for step in steps:
            got = subprocess.run(step, capture_output=True, text=True, timeout=600)
            if got.returncode != 0:
                pytest.fail(f"{' '.join(step[3:])} failed:\n{got.stdout}{got.stderr}")
        for path in top.rglob("*"):
            path.chmod(path.stat().st_mode | 0o044 | (0o011 if path.is_dir() else 0))
        yield venv
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _run_as(uid_gid: tuple[int, int] | None) -> dict[str, Any]:
    if uid_gid is None:
        return {}
    uid, gid = uid_gid
    return {"user": uid, "group": gid, "extra_groups": []}


def test_image_layout_installs_runs_and_passes_its_healthcheck(
    image_venv: Path, redis_server: Any
) -> None:
    venv_bin = image_venv / "bin"
    # the build stage's check, in the clean venv
    check = subprocess.run(
        [str(venv_bin / "python"), "-c", _build_check()], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    # no installer in the venv the runtime stage copies
    tools = subprocess.run(
        [str(venv_bin / "python"), "-c", TOOLS_CHECK], capture_output=True, text=True, cwd="/tmp"
    )
    assert tools.returncode == 0 and tools.stdout.split() == [], tools.stdout + tools.stderr
    assert not list(venv_bin.glob("pip*"))
    # the relay that runs is the installed one, not this checkout
    where = subprocess.run(
        [str(venv_bin / "python"), "-c", "import relay; print(relay.__file__)"],
        capture_output=True,
        text=True,
        cwd="/tmp",
    )
    assert where.stdout.startswith(str(image_venv)), where.stdout

    image_env = _image_env()
    assert image_env["PATH"] == "/opt/venv/bin:$PATH"
    port = free_port()
    env = {
        **{k: v for k, v in image_env.items() if k != "PATH"},
        "PATH": f"{venv_bin}:/usr/bin:/bin",
        "HOME": "/nonexistent",
        "RELAY_HOST": "127.0.0.1",  # loopback here; the image's 0.0.0.0 is its own netns
        "RELAY_PORT": str(port),
        "RELAY_REDIS_URL": redis_server.url,
        "RELAY_KEY_PREFIX": "img" + str(port),
        "RELAY_API_TOKENS": "image-test-token",
    }
    workdir = re.search(r"^WORKDIR (\S+)$", DOCKERFILE.split("FROM ")[-1], re.M)
    assert workdir is not None
    who = _run_as(_uid_gid())
    health = _healthcheck()
    assert health[0] == "python"

    def healthcheck() -> int:
        return subprocess.run(
            health, env=env, cwd=workdir.group(1), capture_output=True, timeout=10, **who
        ).returncode

    assert healthcheck() != 0  # nothing listens yet: the check can fail
    command = [*_json_instruction("ENTRYPOINT"), *_json_instruction("CMD")]
    assert command == ["relay", "api"]
    proc = subprocess.Popen(
        command,
        env=env,
        cwd=workdir.group(1),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **who,
    )
    try:
        deadline = time.monotonic() + 30
        while healthcheck() != 0:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the HEALTHCHECK never passed"
            time.sleep(0.2)
        if who:
            uid = Path(f"/proc/{proc.pid}/status").read_text()
            assert re.search(r"^Uid:\s+10001\s", uid, re.M), "not running as uid 10001"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "api.listening" in out
