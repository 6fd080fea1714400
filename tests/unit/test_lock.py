"""``requirements.lock``, the image's dependencies: complete, hashed, and true to
``pyproject.toml``.

``make lock`` writes it (pip-compile from ``pyproject.toml``); ``deploy/Dockerfile``
installs it with ``--require-hashes --no-deps``, so a dependency missing here is missing
from the image, and one pinned here at another version than ``pyproject.toml`` says
ships a version the tests never ran.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
DIST = "relay-webhooks"
# installers and build tools: never in the runtime lock (the image leaves them out)
TOOLS = {"pip", "setuptools", "wheel"}


def _entries() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes), from the lock's ``name==version \\ --hash=...`` blocks."""
    text = re.sub(r"\\\n", " ", LOCK.read_text())
    out: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split()
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([^\s;]+)", spec)
        assert match, f"not a pinned requirement: {line!r}"
        name = canonicalize_name(match.group(1))
        assert name not in out, f"{name} twice"
        out[name] = (match.group(2), [o.removeprefix("--hash=") for o in options])
    return out


def _direct() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def test_every_entry_is_pinned_with_hashes() -> None:
    entries = _entries()
    assert len(entries) > 20
    for name, (_, hashes) in entries.items():
        assert hashes, f"{name}: no --hash"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name
    assert not TOOLS & set(entries)
    assert canonicalize_name(DIST) not in entries


def test_every_direct_dependency_is_locked_at_its_pyproject_pin() -> None:
    entries = _entries()
    wrong = {}
    for req in _direct():
        (spec,) = req.specifier
        assert spec.operator == "==", f"{req}: pyproject.toml pins with =="
        got = entries.get(canonicalize_name(req.name), ("missing", []))[0]
        if got != spec.version:
            wrong[req.name] = (spec.version, got)
    assert wrong == {}, "pyproject.toml pin -> requirements.lock: run `make lock`"


def _closure() -> set[str]:
    """The runtime dependencies of the installed relay-webhooks, transitively, with their
    extras and environment markers evaluated here (Linux, CPython 3.11, as in the image)."""
    seen: set[str] = set()
    todo = [(canonicalize_name(DIST), frozenset[str]())]
    while todo:
        name, extras = todo.pop()
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for raw in importlib.metadata.distribution(name).requires or []:
            req = Requirement(raw)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return {k.split("[")[0] for k in seen} - {canonicalize_name(DIST)}


def test_the_lock_holds_exactly_the_runtime_dependency_closure() -> None:
    locked = set(_entries())
    needed = _closure()
    assert {"aiohttp", "psycopg-binary", "protobuf"} <= needed  # extras and transitives too
    assert {"missing": sorted(needed - locked), "extra": sorted(locked - needed)} == {
        "missing": [],
        "extra": [],
    }
