"""The distribution as a user gets it: built, installed by its name, run from elsewhere.

``python -m build`` makes the sdist and builds the wheel from that sdist (so the sdist
carries everything the wheel needs); ``pip install relay-webhooks==VERSION`` with the
built wheel on ``--find-links`` installs it into a fresh virtualenv in a temporary
folder outside the repository (its dependencies come from the package index or pip's
cache); then ``relay --help`` and ``import relay`` run there, from a temporary working
directory and without the repository on the path, and the installed distribution's
metadata says its name, version and license.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

import relay

ROOT = Path(__file__).resolve().parents[2]
NAME = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]

# What the installed distribution says about itself, read inside the fresh venv.
METADATA = """\
import importlib.metadata as m, json, relay
d = m.distribution({name!r})
md = d.metadata
print(json.dumps({{
    "name": md["Name"],
    "version": md["Version"],
    "license": md["License-Expression"],
    "license_files": [str(f) for f in d.files if f.name == "LICENSE"],
    "readme_type": md["Description-Content-Type"],
    "readme": md.get_payload(),
    "urls": md.get_all("Project-URL"),
    "classifiers": md.get_all("Classifier"),
    "scripts": sorted(e.name for e in d.entry_points if e.group == "console_scripts"),
    "module_file": relay.__file__,
    "module_version": relay.__version__,
}}))
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    top = tmp_path_factory.mktemp("wheel")
    assert not top.resolve().is_relative_to(ROOT), "the install must happen outside the repo"
    dist = top / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "relay/cli/__init__.py",
        "relay/queue/lua/claim.lua",
    } <= names
    env = _clean_env()
    subprocess.run([sys.executable, "-m", "venv", str(top / "venv")], check=True, timeout=120)
    pip = [str(top / "venv" / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    got = subprocess.run(
        [*pip, "--find-links", str(dist), f"{NAME}=={relay.__version__}"],
        capture_output=True,
        text=True,
        cwd=top,
        env=env,
        timeout=600,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    return top / "venv"


def _clean_env() -> dict[str, str]:
    """This process's environment without anything that would put the checkout on the path."""
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**_clean_env(), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=60)


def test_the_installed_command_and_module_run_outside_the_repository(
    venv: Path, tmp_path: Path
) -> None:
    helped = _run(venv, str(venv / "bin" / "relay"), "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "worker" in helped.stdout and "api" in helped.stdout
    version = _run(venv, "relay", "--version", cwd=tmp_path)
    assert version.returncode == 0 and relay.__version__ in version.stdout
    imported = _run(
        venv,
        str(venv / "bin" / "python"),
        "-c",
        "import relay; print(relay.__version__)",
        cwd=tmp_path,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == relay.__version__


def test_the_installed_metadata_names_the_distribution_and_its_license(
    venv: Path, tmp_path: Path
) -> None:
    script = METADATA.format(name=NAME)
    out = _run(venv, str(venv / "bin" / "python"), "-c", script, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    meta = json.loads(out.stdout)
    assert Path(meta["module_file"]).is_relative_to(venv)  # the installed copy, not the checkout
    assert meta["name"] == NAME == "relay-webhooks"
    assert meta["version"] == meta["module_version"] == relay.__version__
    assert meta["license"] == "Apache-2.0"
    assert meta["license_files"], "LICENSE is not in the installed distribution"
    assert meta["readme_type"] == "text/markdown"
    assert meta["readme"] == (ROOT / "README.md").read_text()
    assert meta["scripts"] == ["relay"]
    labels = {u.split(",", 1)[0] for u in meta["urls"] or []}
    assert {"Homepage", "Documentation", "Changelog", "Issues"} <= labels
    assert "Programming Language :: Python :: 3.11" in meta["classifiers"]
