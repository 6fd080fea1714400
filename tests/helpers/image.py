"""``deploy/Dockerfile`` read as instructions and stages, and the container builders
that can build it here."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


@dataclass
class Stage:
    base: str  # the FROM image reference
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def runs(self) -> list[str]:
        return [rest for op, rest in self.instructions if op == "RUN"]


def instructions(text: str | None = None) -> list[tuple[str, str]]:
    """(INSTRUCTION, the rest) for each instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text() if text is None else text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def stages(text: str | None = None) -> list[Stage]:
    out: list[Stage] = []
    for op, rest in instructions(text):
        if op == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            out.append(Stage(base=words[0], name=name))
        else:
            assert out, f"{op} before the first FROM"
            out[-1].instructions.append((op, rest))
    return out


def base_image() -> str:
    (base,) = {s.base for s in stages()}
    return base


def _answers(*command: str) -> bool:
    try:
        done = subprocess.run(command, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def image_builder(base: str) -> tuple[str | None, str]:
    """The builder ``make image`` would use, when it can build here without pulling: a
    reachable docker daemon or podman, holding ``base`` already. Else None, and why."""
    why = []
    if shutil.which("docker") is None:
        why.append("docker is not installed")
    elif not _answers("docker", "info"):
        why.append("no docker daemon answers (docker info fails)")
    elif _answers("docker", "image", "inspect", base):
        return "docker", ""
    else:
        why.append(f"docker has no local copy of {base}")
    if shutil.which("podman") is None:
        why.append("podman is not installed")
    elif _answers("podman", "image", "exists", base):
        return "podman", ""
    else:
        why.append(f"podman has no local copy of {base}")
    return None, "; ".join(why)
