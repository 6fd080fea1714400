"""Payload filters: an endpoint's optional ``filter``, a CEL expression over the event.

CEL (the Common Expression Language, cel.dev) is a small language made for exactly
this: no loops, no recursion, no I/O, linear-time RE2 regexes, and errors as values
(a missing field or a type mismatch is an error result, not an exception). relay uses
Google's own runtime through ``cel-expr-python`` (a binding of cel-cpp, the reference
implementation), and adds bounds of its own on the text, checked before compiling:

* at most :data:`MAX_CHARS` characters and :data:`MAX_DEPTH` levels of brackets;
* at most :data:`MAX_COMPREHENSIONS` comprehension macros (``all``, ``exists``,
  ``exists_one``, ``map``, ``filter``), none inside another, so the work of one
  evaluation is at most linear in the payload (itself at most
  ``RELAY_MAX_PAYLOAD_BYTES``) times the length of the filter.

The expression sees ``payload`` (the event's payload, any JSON), ``event_type`` and
``app`` (strings); it must be a boolean. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel

MAX_CHARS = 2048
MAX_DEPTH = 16
MAX_COMPREHENSIONS = 4
MAX_REASON = 200  # characters of an evaluation error kept on the event
MAX_PROGRAMS = 10_000  # compiled filters kept by one ProgramCache

_MACRO = re.compile(r"\.\s*(all|exists_one|exists|map|filter)\s*\(")
_STRING = re.compile(
    r"""(?s)[rRbB]*('''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")"""
)
_ENV = cel.NewEnv(
    variables={"payload": cel.Type.DYN, "event_type": cel.Type.STRING, "app": cel.Type.STRING}
)


class FilterInvalid(ValueError):
    """The filter text is refused: too long, too deep, not CEL, or not a boolean."""


class FilterError(Exception):
    """The filter could not be evaluated on one event (its reason is recorded)."""


def _check_bounds(text: str) -> None:
    if not text.strip():
        raise FilterInvalid("filter is empty; leave it out (or null) to receive every event")
    if len(text) > MAX_CHARS:
        raise FilterInvalid(f"filter is {len(text)} characters; the limit is {MAX_CHARS}")
    code = _STRING.sub('""', text)  # brackets and macro names inside strings do not count
    depth, deepest = 0, 0
    macro_at: list[int] = []  # bracket depth of each comprehension we are inside of
    count = 0
    opened = {m.end() - 1 for m in _MACRO.finditer(code)}
    for i, ch in enumerate(code):
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
            if i in opened:
                if macro_at:
                    raise FilterInvalid("a comprehension (all, exists, map, ...) inside another")
                count += 1
                macro_at.append(depth)
        elif ch in ")]}":
            if macro_at and macro_at[-1] == depth:
                macro_at.pop()
            depth -= 1
    if deepest > MAX_DEPTH:
        raise FilterInvalid(f"filter nests {deepest} brackets deep; the limit is {MAX_DEPTH}")
    if count > MAX_COMPREHENSIONS:
        raise FilterInvalid(
            f"filter has {count} comprehensions (all, exists, map, ...); "
            f"the limit is {MAX_COMPREHENSIONS}"
        )


@dataclass(frozen=True, slots=True)
class Program:
    """A compiled filter."""

    text: str
    expression: Any = field(repr=False)

    def matches(self, activation: Any) -> bool:
        """True or False for one event; :class:`FilterError` when it errs on it."""
        try:
            value = self.expression.eval(activation)
        except Exception as exc:  # a payload value CEL cannot take (e.g. a uint64 past 2^63)
            raise FilterError(_short(f"evaluation failed: {exc}")) from None
        kind = value.type()
        if kind == cel.Type.BOOL:
            return bool(value.value())
        if kind == cel.Type.ERROR:
            raise FilterError(_short(str(value.value())))
        raise FilterError(_short(f"filter returned {kind.name().lower()}, not a boolean"))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def compile_filter(text: str) -> Program:
    """Check the bounds and compile; :class:`FilterInvalid` says why a filter is refused."""
    _check_bounds(text)
    try:
        expression = _ENV.compile(text)
    except Exception as exc:
        message = str(exc).removeprefix("INVALID_ARGUMENT: ").removesuffix(" [INVALID_ARGUMENT]")
        raise FilterInvalid(f"filter is not valid CEL: {message}") from None
    kind = expression.return_type()
    if kind not in (cel.Type.BOOL, cel.Type.DYN):
        raise FilterInvalid(f"filter must be a boolean expression; this one is {kind.name()}")
    return Program(text, expression)


def check(text: str | None) -> str | None:
    """Validate a filter for an endpoint write (``None``: no filter)."""
    if text is not None:
        compile_filter(text)
    return text


def activation(payload: Any, event_type: str, app: str) -> Any:
    """The event as filters see it, converted once per publish for every filter."""
    try:
        return _ENV.Activation(data={"payload": payload, "event_type": event_type, "app": app})
    except Exception as exc:
        raise FilterError(_short(f"payload cannot be evaluated: {exc}")) from None


class ProgramCache:
    """Compiled filters by endpoint id and version (``updated_at``), so a publish never
    compiles a filter it compiled before. Bounded: cleared when it holds too many."""

    def __init__(self) -> None:
        self._programs: dict[tuple[str, int, str], Program] = {}
        self.compiled = 0

    def get(self, endpoint: dict[str, Any]) -> Program | None:
        text = endpoint.get("filter")
        if not text:
            return None
        key = (endpoint["id"], int(endpoint.get("updated_at") or 0), text)
        program = self._programs.get(key)
        if program is None:
            if len(self._programs) >= MAX_PROGRAMS:
                self._programs.clear()
            program = self._programs[key] = compile_filter(text)
            self.compiled += 1
        return program


MAX_RECORDED = 20  # filtered endpoints recorded on one event (the rest are counted)


def narrow(
    targets: list[dict[str, Any]],
    payload: Any,
    event_type: str,
    app: str,
    programs: ProgramCache,
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The targets whose filter (if any) is true for the event, and, for those whose
    filter erred on it, ``{"endpoint_id", "reason"}`` (a false filter is not recorded)."""
    if not any(t.get("filter") for t in targets):
        return targets, []
    kept: list[dict[str, Any]] = []
    erred: list[dict[str, str]] = []
    seen: Any = None
    for target in targets:
        try:
            program = programs.get(target)
            if program is None:
                kept.append(target)
                continue
            if seen is None:
                seen = activation(payload, event_type, app)
            if program.matches(seen):
                kept.append(target)
        except (FilterError, FilterInvalid) as exc:
            erred.append({"endpoint_id": target["id"], "reason": _short(str(exc))})
    return kept, erred
