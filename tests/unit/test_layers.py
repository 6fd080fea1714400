"""The architecture holds: imports run one way, only the queue talks to Redis, files stay small.

The "Where things live" table (docs/design/architecture.md) is the contract: entry points
import services, services import the queue, the queue imports the pure domain; nothing
imports upward.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RELAY = Path(__file__).resolve().parents[2] / "relay"

# The rank of each part: a part may import only parts of a lower rank (or the shared
# leaves: the settings object, the package version, logging setup, the dev Redis runner).
RANK = {
    "domain": 0,
    "queue": 1,
    "archive": 2,
    "endpoints": 2,
    "sandbox": 2,
    "idempotency": 2.75,  # one event per key: below publishing, above its refusals
    "publishing": 3,
    "publish_errors": 2.5,  # the refusals publishing raises; below it, above sandbox
    "eventsearch": 3,
    "ops": 3,
    "delivery": 4,
    "connectors": 4,
    "api": 5,
    "demo": 5,
    "runner": 6,
    "cli": 7,
    "__main__": 8,
}
LEAVES = {"settings", "__init__", "__version__", "logs", "redisproc", "redisslots", "tracing"}
MAX_LINES = 400


def _part(path: Path) -> str:
    rel = path.relative_to(RELAY)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module imported, the relay part it belongs to) for each relay import."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "relay":
                found += [(node.lineno, f"relay.{a.name}", a.name) for a in node.names]
            elif node.module.startswith("relay."):
                found.append((node.lineno, node.module, node.module.split(".")[1]))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("relay."):
                    found.append((node.lineno, a.name, a.name.split(".")[1]))
    return found


def _sources() -> list[Path]:
    return sorted(RELAY.rglob("*.py"))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(RELAY)))
def test_imports_run_downward(path: Path) -> None:
    part = _part(path)
    upward = []
    for line, module, target in _imports(path):
        if target in LEAVES or target == part:
            continue
        if part in LEAVES:  # a leaf imports only the domain (settings parses durations)
            if target != "domain":
                upward.append(f"{line}: {module}")
            continue
        if RANK[target] >= RANK[part]:
            upward.append(f"{line}: {module}")
    assert upward == [], f"{path.name} ({part}) imports upward or sideways: {upward}"


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(RELAY)))
def test_only_the_queue_imports_redis(path: Path) -> None:
    if _part(path) in ("queue", "redisproc", "redisslots"):  # test servers: start, move slots
        return
    tree = ast.parse(path.read_text())
    hits = [
        n.lineno
        for n in ast.walk(tree)
        if (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "redis")
        or (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "redis" for a in n.names))
    ]
    assert hits == [], f"{path} imports redis-py at lines {hits}: go through relay.queue"


def test_no_module_is_past_the_size_limit() -> None:
    big = {
        str(p.relative_to(RELAY)): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert big == {}


def test_the_checks_see_a_violation(tmp_path: Path) -> None:
    """The import reader itself: an upward import from a queue module is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("from relay.delivery.worker import Worker\nfrom relay.domain import ids\n")
    seen = [(t, RANK[t] >= RANK["queue"]) for _, _, t in _imports(probe)]
    assert seen == [("delivery", True), ("domain", False)]
