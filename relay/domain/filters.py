"""Payload filters: an endpoint's optional ``filter``, a CEL expression over the event.

CEL (the Common Expression Language, cel.dev) is a small language made for exactly
this: no loops, no recursion, no I/O, linear-time RE2 regexes, and errors as values
(a missing field or a type mismatch is an error result, not an exception). relay uses
Google's own runtime through ``cel-expr-python`` (a binding of cel-cpp, the reference
implementation), and adds bounds of its own on the text, checked before compiling:

* at most :data:`MAX_CHARS` characters and :data:`MAX_DEPTH` levels of brackets;
* at most :data:`MAX_COMPREHENSIONS` comprehension macros (``all``, ``exists``,
  ``exists_one``, ``map``, ``filter``), none inside another;
* the pattern of every ``matches`` call is a string literal that RE2 compiles into at
  most :data:`MAX_REGEX_PROGRAM` instructions (cel-cpp compiles a pattern again on every
  call, so inside a comprehension once per element).

These bound what a filter can say, not what it costs: a comprehension over a payload
list that builds strings from other payload fields does work (and takes memory) that
grows with the product of their sizes. Time and memory are bounded where filters run
(``relay.sandbox``), not here.

The expression sees ``payload`` (the event's payload, any JSON), ``event_type`` and
``app`` (strings); it must be a boolean. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import re2
from cel_expr_python import cel

MAX_CHARS = 2048
MAX_DEPTH = 16
MAX_COMPREHENSIONS = 4
MAX_REASON = 200  # characters of an evaluation error kept on the event
MAX_PROGRAMS = 10_000  # compiled filters kept by one ProgramCache
MAX_REGEX_PROGRAM = 5_000  # RE2 instructions of one ``matches`` pattern

_MACRO = re.compile(r"\.\s*(all|exists_one|exists|map|filter)\s*\(")
_STRING = re.compile(
    r"""(?s)[rRbB]*('''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")"""
)
_LITERAL_OR_COMMENT = re.compile(_STRING.pattern + r"|//[^\n]*")
_MATCHES = re.compile(r"\bmatches\s*\(")
_RE2 = re2.Options()
_RE2.max_mem = 1 << 20  # a pattern far past the limit fails fast instead of compiling
_RE2.log_errors = False
_ENV = cel.NewEnv(
    variables={"payload": cel.Type.DYN, "event_type": cel.Type.STRING, "app": cel.Type.STRING}
)


class FilterInvalid(ValueError):
    """The filter text is refused: too long, too deep, not CEL, or not a boolean."""


class FilterError(Exception):
    """The filter could not be evaluated on one event (its reason is recorded)."""


def _code(text: str) -> str:
    """``text`` with its string literals and comments blanked out (same length, so an
    index into one is an index into the other)."""
    return _LITERAL_OR_COMMENT.sub(lambda m: " " * len(m.group(0)), text)


def _check_bounds(text: str) -> str:
    """The bounds on the text; returns its code (:func:`_code`)."""
    if not text.strip():
        raise FilterInvalid("filter is empty; leave it out (or null) to receive every event")
    if len(text) > MAX_CHARS:
        raise FilterInvalid(f"filter is {len(text)} characters; the limit is {MAX_CHARS}")
    code = _code(text)  # brackets and macro names inside strings do not count
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
    return code


def _arguments(code: str, opened: int) -> list[tuple[int, int]]:
    """The spans of the arguments of the call whose ``(`` is at ``opened``."""
    spans, depth, start = [], 0, opened + 1
    for i in range(opened, len(code)):
        ch = code[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                spans.append((start, i))
                return spans
        elif ch == "," and depth == 1:
            spans.append((start, i))
            start = i + 1
    return spans


def _patterns(text: str, code: str) -> list[str]:
    """The source text of the pattern of every ``matches`` call (member or global);
    :class:`FilterInvalid` when one is not a string literal."""
    found = []
    for call in _MATCHES.finditer(code):
        member = code[: call.start()].rstrip().endswith(".")
        args = _arguments(code, call.end() - 1)
        if len(args) != (1 if member else 2):
            continue  # not the standard function: the compiler has refused it already
        start, end = args[-1]
        literal = text[start:end].strip()
        if not _STRING.fullmatch(literal):
            raise FilterInvalid(
                "the pattern of matches() must be a string literal (a computed pattern "
                "cannot be checked before it runs)"
            )
        found.append(literal)
    return found


def _check_pattern(literal: str) -> None:
    pattern = _ENV.compile(literal).eval().value()  # CEL reads its own escapes
    try:
        size = re2.compile(pattern, _RE2).programsize
    except re2.error as exc:
        why = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        if "too large" in why:
            raise FilterInvalid(
                f"the pattern '{_short(pattern)}' of matches() is too large for RE2 "
                f"(the limit is {MAX_REGEX_PROGRAM} instructions)"
            ) from None
        raise FilterInvalid(
            f"the pattern '{_short(pattern)}' of matches() is not RE2: {why}"
        ) from None
    if size > MAX_REGEX_PROGRAM:
        raise FilterInvalid(
            f"the pattern '{_short(pattern)}' of matches() compiles to {size} RE2 "
            f"instructions; the limit is {MAX_REGEX_PROGRAM} (a counted repetition of a "
            "large class, such as \\pL{1,200}, is the usual cause)"
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
        except MemoryError:  # std::bad_alloc: the caller's memory budget, not the event
            raise
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
    code = _check_bounds(text)
    try:
        expression = _ENV.compile(text)
    except Exception as exc:
        message = str(exc).removeprefix("INVALID_ARGUMENT: ").removesuffix(" [INVALID_ARGUMENT]")
        raise FilterInvalid(f"filter is not valid CEL: {message}") from None
    kind = expression.return_type()
    if kind not in (cel.Type.BOOL, cel.Type.DYN):
        raise FilterInvalid(f"filter must be a boolean expression; this one is {kind.name()}")
    for literal in _patterns(text, code):
        _check_pattern(literal)
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
    """Compiled filters by text, so a text is compiled once whichever endpoints carry it;
    a text that does not compile (stored before a check it fails) keeps its refusal.
    Bounded: cleared when it holds too many."""

    def __init__(self) -> None:
        self._programs: dict[str, Program | FilterInvalid] = {}
        self.compiled = 0

    def get(self, text: str) -> Program:
        program = self._programs.get(text)
        if program is None:
            if len(self._programs) >= MAX_PROGRAMS:
                self._programs.clear()
            self.compiled += 1
            try:
                program = compile_filter(text)
            except FilterInvalid as exc:
                program = exc
            self._programs[text] = program
        if isinstance(program, FilterInvalid):
            raise program
        return program


MAX_RECORDED = 20  # filtered endpoints recorded on one event (the rest are counted)


def judge(
    texts: Iterable[str], programs: ProgramCache, payload: Any, event_type: str, app: str
) -> Iterator[bool | str]:
    """One verdict per filter text, as each is reached: True (the endpoint gets the
    event), False (it does not), or the reason the filter erred on it (left out, and the
    reason recorded). The payload is converted once, when a filter first needs it.
    ``MemoryError`` passes through: it is the evaluator's budget, not the event's."""
    seen: Any = None
    for text in texts:
        try:
            program = programs.get(text)
            if seen is None:
                seen = activation(payload, event_type, app)
            yield program.matches(seen)
        except (FilterError, FilterInvalid) as exc:
            yield _short(str(exc))
