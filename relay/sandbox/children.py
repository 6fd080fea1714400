"""An evaluator child as its parent sees it: the process, its pipes and its verdict file.

:func:`start` runs ``python -m relay.sandbox.child FD`` with a verdict file of its own
(:mod:`relay.sandbox.wire`) and waits for it to say it is ready; :func:`end` reaps it,
with SIGKILL when it does not end by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import structlog

from relay.sandbox import wire

log = structlog.get_logger("relay.sandbox")

START_SECONDS = 30.0  # a child that is not ready by then is not coming


class SandboxUnavailable(RuntimeError):
    """No evaluator could be started: nothing was judged (retry later)."""


@dataclass(eq=False)
class Child:
    proc: asyncio.subprocess.Process
    answers: wire.Answers
    verdicts: int  # the verdict file, shared with the child
    known: dict[str | bytes, int] = field(default_factory=dict)

    def written(self) -> list[Any]:
        """The verdicts the child wrote for the request in progress, or its last."""
        return wire.parse(os.pread(self.verdicts, os.lseek(self.verdicts, 0, os.SEEK_CUR), 0))

    def forget(self) -> None:
        """Close the verdict file (the child has ended)."""
        with contextlib.suppress(OSError):
            os.close(self.verdicts)

    def id_of(self, text: str | bytes) -> tuple[int, bool]:
        """The id this child knows ``text`` by, and whether it is new to it."""
        got = self.known.get(text)
        if got is not None:
            return got, False
        got = self.known[text] = len(self.known)
        return got, True


async def start() -> Child:
    """A child, ready; :class:`SandboxUnavailable` when it cannot be started."""
    proc, verdicts = None, -1
    try:
        verdicts = _verdict_file()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "relay.sandbox.child",
            str(verdicts),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            pass_fds=(verdicts,),
        )
        assert proc.stdout is not None
        child = Child(proc, wire.Answers(proc.stdout), verdicts)
        ready = await asyncio.wait_for(child.answers.next(), START_SECONDS)
        if not isinstance(ready, dict) or "ready" not in ready:
            raise wire.ProtocolError(f"not a ready answer: {ready!r}")
    except (OSError, EOFError, TimeoutError, wire.ProtocolError) as exc:
        await _abandon(proc, verdicts)
        log.error("sandbox.start_failed", error=str(exc) or type(exc).__name__)
        raise SandboxUnavailable(f"an evaluator process could not start: {exc}") from None
    except asyncio.CancelledError:  # closing: the child must not outlive its start
        await _abandon(proc, verdicts)
        raise
    return child


def _verdict_file() -> int:
    """A file for a child's verdicts: in memory where Linux offers it, else a temporary
    file (unlinked)."""
    try:
        return os.memfd_create("relay-sandbox-verdicts", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        with tempfile.TemporaryFile() as f:
            return os.dup(f.fileno())


async def _abandon(proc: asyncio.subprocess.Process | None, verdicts: int) -> None:
    """Undo a start that failed or was cancelled."""
    if proc is not None:
        await end(proc)
    if verdicts >= 0:
        os.close(verdicts)


async def end(proc: asyncio.subprocess.Process, within: float = 0.0) -> int | None:
    """Wait up to ``within`` for ``proc`` to exit, then SIGKILL it and reap it."""
    if within:
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(proc.wait(), within)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    return await proc.wait()
