"""What tenant logic is asked about one publish, what it answers, and the budgets.

A publish may run two kinds of logic its publisher does not control: the JSON Schema of
its event type and the CEL filters of its target endpoints. :class:`Work` carries them
with the payload; a :class:`Verdict` says whether the payload passed the schema and,
per filter, whether that endpoint gets the event. :class:`Inline` judges in the calling
process, with no budget (tests, and callers that trust the logic);
:class:`relay.sandbox.Sandbox` judges in child processes, within the budgets below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from relay.domain import filters
from relay.domain.eventtypes import SchemaInvalid, Validator, compile_schema, payload_error

# The schema of one publish's event type: validated within this wall time.
SCHEMA_SECONDS = 1.0
# All the filters of one publish together: evaluated within this wall time.
FILTER_SECONDS = 1.0
# What one evaluator process may hold beyond what it holds idle (its address space).
MEMORY_BYTES = 256 * 1024 * 1024
MAX_VALIDATORS = 1_000  # compiled schemas an Inline judge keeps; past it, it forgets them all

FILTER_TIME = (
    f"filter exceeded its time budget ({FILTER_SECONDS:g} s, shared by the filters of a publish)"
)
FILTER_UNREACHED = (
    f"filter not evaluated: the publish's filter time budget ({FILTER_SECONDS:g} s) was spent"
)
FILTER_MEMORY = f"filter exceeded its memory budget ({MEMORY_BYTES >> 20} MiB)"
FILTER_LOST = "filter not evaluated: the evaluator stopped on an earlier filter of this publish"


@dataclass(frozen=True, slots=True)
class Work:
    """One publish's tenant logic. ``schema``: the type's JSON Schema, serialized (None:
    the type has none); ``filters``: the texts of the target endpoints' filters, in order."""

    app: str
    event_type: str
    payload: Any
    payload_json: bytes
    schema: bytes | None = None
    filters: Sequence[str] = ()

    @property
    def empty(self) -> bool:
        return self.schema is None and not self.filters


@dataclass(frozen=True, slots=True)
class SchemaFailure:
    """Why the payload is refused: ``invalid`` (it does not match: ``path``, ``message``),
    ``broken`` (the schema cannot be applied), ``time`` or ``memory`` (over a budget)."""

    kind: str
    message: str = ""
    path: str = ""


@dataclass(slots=True)
class Verdict:
    """``schema``: None when the payload passed (or there is no schema). ``filters``: one
    per filter of the work, True (kept), False (left out) or the reason it is left out
    with a record. A refused payload has no filter verdicts."""

    schema: SchemaFailure | None = None
    filters: list[bool | str] = field(default_factory=list)


def schema_failure(validator: Validator, payload: Any) -> SchemaFailure | None:
    """The schema's verdict on ``payload``, in whichever process validates it."""
    try:
        error = payload_error(validator, payload)
    except SchemaInvalid as exc:
        return SchemaFailure("broken", str(exc))
    except RecursionError:
        return SchemaFailure("broken", "the event type's schema cannot be applied: it recurses")
    if error is None:
        return None
    path, why = error
    return SchemaFailure("invalid", why, path)


class Judge(Protocol):
    async def judge(self, work: Work) -> Verdict: ...

    async def close(self) -> None: ...


class Inline:
    """Judges in this process, with no time or memory budget: for tests, and callers
    that trust the logic they run."""

    def __init__(self) -> None:
        self.programs = filters.ProgramCache()
        self.validators: dict[bytes, Validator] = {}  # by the schema's serialized form

    def _validator(self, schema: bytes) -> Validator:
        validator = self.validators.get(schema)
        if validator is None:
            if len(self.validators) >= MAX_VALIDATORS:
                self.validators.clear()
            validator = self.validators[schema] = compile_schema(orjson.loads(schema))
        return validator

    async def judge(self, work: Work) -> Verdict:
        if work.schema is not None:
            failure = schema_failure(self._validator(work.schema), work.payload)
            if failure is not None:
                return Verdict(failure)
        verdicts = filters.judge(
            work.filters, self.programs, work.payload, work.event_type, work.app
        )
        return Verdict(None, list(verdicts))

    async def close(self) -> None:
        return None
