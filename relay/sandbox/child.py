"""An evaluator child: ``python -m relay.sandbox.child FD``, started by :class:`Sandbox`.

It caps its own address space at what it holds once started plus
:data:`~relay.sandbox.work.MEMORY_BYTES`, says it is ready, then answers requests from
stdin on its original stdout and in the verdict file ``FD`` (:mod:`relay.sandbox.wire`)
until stdin closes; anything else printed goes to stderr. A ``MemoryError``
(``std::bad_alloc`` from cel-cpp included) is answered as the item's memory budget, and
the child then asks to be replaced. Its parent enforces the deadlines, with SIGKILL.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
from typing import Any

import orjson

from relay.domain import eventtypes, filters
from relay.sandbox import wire
from relay.sandbox.work import FILTER_MEMORY, MEMORY_BYTES, schema_failure

PR_SET_PDEATHSIG = 1


def _address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _confine(budget: int) -> int:
    """Cap this process's address space at its size now plus ``budget``; the cap."""
    limit = _address_space() + budget
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit


def _die_with_parent() -> None:
    """SIGKILL when the parent dies, even mid-evaluation (Linux; elsewhere stdin's end)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class Evaluator:
    """The child's state: the texts its parent sent, by the ids it gave them, and what
    they compiled to; where its answers go (``out``) and its verdicts (``verdicts``)."""

    def __init__(self, out: int, verdicts: int) -> None:
        self.out = out
        self.verdicts = verdicts
        self.texts: dict[int, str] = {}
        self.schemas: dict[int, bytes] = {}
        self.validators: dict[int, Any] = {}
        self.programs = filters.ProgramCache()
        self.retire = False

    def send(self, value: Any) -> None:
        wire.write_all(self.out, wire.answer(value))

    def serve(self, header: list[Any], schema: bytes, payload_json: bytes) -> None:
        """Answer one request: the schema's verdict, then one per filter (in the file)."""
        reset, event_type, app, schema_id, items = header
        if reset:
            self.texts.clear()
            self.schemas.clear()
            self.validators.clear()
            self.programs = filters.ProgramCache()
        if schema:
            self.schemas[schema_id] = schema
        texts = []
        for item in items:
            if isinstance(item, list):
                self.texts[item[0]] = item[1]
                texts.append(item[1])
            else:
                texts.append(self.texts[item])
        payload = orjson.loads(payload_json)
        if schema_id is not None and not self._schema(schema_id, payload):
            return
        done = 0
        while done < len(texts):
            try:
                for verdict in filters.judge(texts[done:], self.programs, payload, event_type, app):
                    wire.write_all(self.verdicts, wire.answer(verdict))
                    done += 1
            except MemoryError:  # std::bad_alloc past the address space cap
                self.retire = True
                wire.write_all(self.verdicts, wire.answer(FILTER_MEMORY))
                done += 1

    def _schema(self, schema_id: int, payload: Any) -> bool:
        """Send the schema's verdict; True when the payload passed."""
        try:
            validator = self.validators.get(schema_id)
            if validator is None:
                validator = eventtypes.compile_schema(orjson.loads(self.schemas[schema_id]))
                self.validators[schema_id] = validator
            failure = schema_failure(validator, payload)
        except MemoryError:
            self.retire = True
            self.send(["memory"])
            return False
        except Exception as exc:  # a stored schema that this version cannot compile
            self.send(["broken", f"the event type's schema cannot be applied: {exc}"[:500]])
            return False
        if failure is None:
            self.send(None)
            return True
        self.send([failure.kind, failure.message, failure.path])
        return False


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C: the parent stops us
    _die_with_parent()
    out = os.dup(1)
    os.dup2(2, 1)  # stray prints (a library's) cannot corrupt the answers
    limit = _confine(MEMORY_BYTES)
    evaluator = Evaluator(out, int(sys.argv[1]))
    try:
        evaluator.send({"ready": os.getpid(), "limit": limit})
        while not evaluator.retire:
            got = wire.read_request(0)
            if got is None:
                return
            evaluator.serve(*got)
            evaluator.send(evaluator.retire)
    except BrokenPipeError:  # the parent closed our output: it is stopping
        return


if __name__ == "__main__":
    main()
