"""A small static reader of relay's Lua scripts: where do their keys come from?

Enough of Lua for ``relay/queue/lua/*.lua`` (and it says so when it meets anything it
cannot follow): tokens, assignments, local functions and their call sites, and every
``redis.call``. A script is read as Redis runs it, after ``prelude.lua``: a prelude
function's parameter is a key when every argument the script passes for it is one (a
function the script never calls passes nothing, so holds nothing). :func:`problems`
lists what breaks the rule "a script names no key":

* a string literal that is a key fragment (``"dlv:"``, anything ending in ``:``) or
  holds a hash tag or the layout version;
* a ``redis.call`` key argument that is not ``KEYS[...]``, nor a name bound only to
  ``KEYS[...]`` or to ``<prefix> .. <id>`` (no literal), where ``<prefix>`` is bound
  only to an ``ARGV[n]`` whose header line names a ``ShardKeys.*_prefix`` builder;
* a channel (``PUBLISH``) that is not ``ARGV[...]``;
* ``#KEYS`` or ``#ARGV`` (item counts come in ARGV, never from counting keys);
* a literal ``KEYS[i]``/``ARGV[i]`` the header does not document.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# Commands the scripts may use, by where their keys are.
KEY_FIRST = {
    "GET", "SET", "PEXPIRE", "EXPIRE", "HGET", "HSET", "HMGET", "HGETALL", "HINCRBY",
    "HDEL", "HSETNX", "HEXISTS", "ZADD", "ZREM", "ZRANGE", "ZRANGEBYSCORE", "ZSCORE",
    "ZREMRANGEBYSCORE", "ZCARD", "ZCOUNT", "RPUSH", "LRANGE", "SADD", "SREM", "SMEMBERS",
    "ZRANK", "PTTL",
    "LINDEX", "LPOP",
}  # fmt: skip
ALL_KEYS = {"DEL", "EXISTS", "UNLINK"}
NO_KEYS = {"TIME"}
CHANNEL_FIRST = {"PUBLISH"}

TOKEN = re.compile(
    r"""(?P<comment>--[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<number>\d+(?:\.\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>\.\.\.|\.\.|==|~=|<=|>=|[-+*/%^#<>=(){}\[\];:,.])
      | (?P<space>\s+)
    """,
    re.VERBOSE,
)
BINARY = {"..", "+", "-", "*", "/", "%", "^", "==", "~=", "<", ">", "<=", ">=", "and", "or"}
OPEN, CLOSE = {"(": ")", "[": "]", "{": "}"}, {")", "]", "}"}


@dataclass(frozen=True)
class Tok:
    kind: str  # string | number | name | op
    text: str
    line: int
    file: str = ""  # the script's name, or "prelude"

    @property
    def value(self) -> str:
        """A string literal's value (escapes left as written)."""
        return self.text[1:-1]


def tokenize(source: str, file: str = "") -> list[Tok]:
    out: list[Tok] = []
    pos, line = 0, 1
    while pos < len(source):
        m = TOKEN.match(source, pos)
        if m is None:
            raise ValueError(f"line {line}: cannot read {source[pos : pos + 20]!r}")
        kind = m.lastgroup or ""
        if kind not in ("comment", "space"):
            out.append(Tok(kind, m.group(), line, file))
        line += m.group().count("\n")
        pos = m.end()
    return out


def header(source: str) -> str:
    """The comment block a script starts with."""
    lines = []
    for line in source.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


@dataclass
class Script:
    name: str
    source: str
    prelude: str = ""
    tokens: list[Tok] = field(init=False)
    # name -> every expression (token list) bound to it; None for a loop variable
    bindings: dict[str, list[list[Tok] | None]] = field(init=False, default_factory=dict)
    # table name -> expressions stored in it with t[#t + 1] = e
    elements: dict[str, list[list[Tok]]] = field(init=False, default_factory=dict)
    functions: dict[str, list[str]] = field(init=False, default_factory=dict)  # params
    calls: list[tuple[str, list[list[Tok]]]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.tokens = tokenize(self.prelude, "prelude") + tokenize(self.source, self.name)
        self._read()

    # ------------------------------------------------------------------ parsing

    def _expr_end(self, i: int) -> int:
        """Index just past the expression starting at token ``i``."""
        t, depth, need_operand = self.tokens, 0, True
        while i < len(t):
            tok = t[i]
            if tok.text in OPEN:
                if not need_operand and tok.text == "{" and depth == 0:
                    return i
                depth += 1
                need_operand = True
            elif tok.text in CLOSE:
                if depth == 0:
                    return i
                depth -= 1
                need_operand = False
            elif depth > 0:
                pass
            elif (
                tok.text in BINARY or tok.text in ("not", "#") or (tok.text == "-" and need_operand)
            ):
                need_operand = True
            elif tok.text in (".", ":"):
                need_operand = True
            elif tok.text == "function":
                raise ValueError(f"{self.name} line {tok.line}: function expressions unsupported")
            elif need_operand:
                need_operand = False
            else:
                return i  # an operand after an operand: the next statement
            i += 1
        return i

    def _expr_list(self, i: int) -> tuple[list[list[Tok]], int]:
        exprs = []
        while True:
            end = self._expr_end(i)
            exprs.append(self.tokens[i:end])
            if end < len(self.tokens) and self.tokens[end].text == ",":
                i = end + 1
                continue
            return exprs, end

    def _args(self, open_at: int) -> tuple[list[list[Tok]], int]:
        """The arguments of a call whose "(" is token ``open_at``."""
        if self.tokens[open_at + 1].text == ")":
            return [], open_at + 2
        exprs, end = self._expr_list(open_at + 1)
        if self.tokens[end].text != ")":
            raise ValueError(f"{self.name} line {self.tokens[end].line}: cannot read a call")
        return exprs, end + 1

    def _read(self) -> None:
        t = self.tokens
        braces = 0  # "=" inside a table constructor is a field, not an assignment
        for i, tok in enumerate(t):
            braces += (tok.text == "{") - (tok.text == "}")
            if tok.text == "function" and i + 2 < len(t) and t[i + 1].kind == "name":
                fname, j = t[i + 1].text, i + 3
                params = []
                while t[j].text != ")":
                    if t[j].kind == "name":
                        params.append(t[j].text)
                    j += 1
                self.functions[fname] = params
            elif tok.text == "=" and braces == 0:
                self._assignment(i)
            elif tok.text == "(" and i > 0 and t[i - 1].kind == "name":
                before = t[i - 2].text if i >= 2 else ""
                if before == "function":
                    continue
                callee = t[i - 1].text
                if before == "." and i >= 3:
                    callee = t[i - 3].text + "." + callee
                args, _ = self._args(i)
                self.calls.append((callee, args))
        for i, tok in enumerate(t):  # for-loop variables
            if tok.text == "for":
                j = i + 1
                while t[j].text not in ("=", "in"):
                    if t[j].kind == "name":
                        self.bindings.setdefault(t[j].text, []).append(None)
                    j += 1

    def _assignment(self, eq: int) -> None:
        t = self.tokens
        if t[eq - 1].text == "]":  # t[#t + 1] = e
            depth, j = 0, eq - 1
            while True:
                if t[j].text == "]":
                    depth += 1
                elif t[j].text == "[":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            values, _ = self._expr_list(eq + 1)
            self.elements.setdefault(t[j - 1].text, []).append(values[0])
            return
        names, j = [], eq - 1
        while j >= 0 and t[j].kind == "name":
            names.insert(0, t[j].text)
            if j >= 1 and t[j - 1].text == ",":
                j -= 2
            else:
                break
        if j >= 1 and t[j - 1].text == "for":
            return  # numeric for: read with the loop variables
        values, _ = self._expr_list(eq + 1)
        for k, name in enumerate(names):
            self.bindings.setdefault(name, []).append(values[k] if k < len(values) else [])

    # ------------------------------------------------------------------ what is a key

    def _param_args(self, name: str) -> list[list[Tok]] | None:
        """Every argument passed for parameter ``name`` of a local function, if it is one."""
        found: list[list[Tok]] | None = None
        for fname, params in self.functions.items():
            if name in params:
                k = params.index(name)
                found = found or []
                found += [args[k] for callee, args in self.calls if callee == fname]
        return found

    def argv_prefixes(self) -> dict[str, str]:
        """ARGV index -> the ShardKeys prefix builder the header says it is. The index is
        a number, or a position after the items written as the header writes it
        (``ARGV[3+7n]``, read in the script as ``ARGV[3 + 7 * n]``)."""
        out = {}
        found = re.finditer(
            r"ARGV\[(\d+(?:\+\d*n)?)\][^\n]*?ShardKeys\.(\w+_prefix)", header(self.source)
        )
        for m in found:
            out[m.group(1)] = m.group(2)
        return out

    def _sources(self, name: str) -> list[list[Tok] | None] | None:
        """Every expression that may flow into ``name``: what it is bound to and, for a
        function parameter, what each call passes (none for a function never called);
        None for a name that is neither."""
        bound: list[list[Tok] | None] = list(self.bindings.get(name, []))
        passed = self._param_args(name)
        if passed is None and not bound:
            return None
        return bound + list(passed or [])

    def is_prefix(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in seen:
            return True  # bound to itself through a call: decided by its other bindings
        sources, prefixes = self._sources(name), self.argv_prefixes()
        return sources is not None and all(
            e is not None
            and (
                _index_text(e, "ARGV") in prefixes
                or (
                    len(e) == 1 and e[0].kind == "name" and self.is_prefix(e[0].text, seen | {name})
                )
            )
            for e in sources
        )

    def is_key(self, expr: list[Tok], seen: frozenset[str] = frozenset()) -> bool:
        if _index_of(expr, "KEYS") is not None:
            return True
        if len(expr) >= 3 and expr[0].kind == "name" and expr[1].text == "..":
            return self.is_prefix(expr[0].text) and not any(x.kind == "string" for x in expr)
        if len(expr) == 1 and expr[0].kind == "name":
            return self._is_key_name(expr[0].text, seen)
        return False

    def _is_key_name(self, name: str, seen: frozenset[str]) -> bool:
        if name in seen:
            return True  # bound to itself through a call: decided by its other bindings
        sources = self._sources(name)
        return sources is not None and all(
            e is not None and self.is_key(e, seen | {name}) for e in sources
        )

    def is_key_list(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in seen:
            return True
        seen = seen | {name}
        passed = self._param_args(name)
        if passed is not None:
            return all(len(e) == 1 and self.is_key_list(e[0].text, seen) for e in passed)
        bound = self.bindings.get(name, [])
        items = self.elements.get(name, [])
        return (
            bool(bound)
            and all(e is not None and [x.text for x in e] == ["{", "}"] for e in bound)
            and bool(items)
            and all(self.is_key(e) for e in items)
        )

    # ------------------------------------------------------------------ the rules

    def problems(self) -> list[str]:
        out = []
        for tok in self.tokens:
            if tok.kind == "string" and _key_fragment(tok.value):
                out.append(f"{_at(tok)}: key fragment literal {tok.text}")
        for a, b in zip(self.tokens, self.tokens[1:], strict=False):
            if a.text == "#" and b.text in ("KEYS", "ARGV"):
                out.append(f"{_at(a)}: counts items with #{b.text}")
        doc = header(self.source)
        for tok_i, tok in enumerate(self.tokens[:-2]):
            if tok.text in ("KEYS", "ARGV") and self.tokens[tok_i + 1].text == "[":
                nxt, after = self.tokens[tok_i + 2], self.tokens[tok_i + 3]
                if nxt.kind == "number" and after.text == "]":
                    n = nxt.text
                    if not re.search(rf"{tok.text}\[{n}(\]|\.\.)", doc):
                        out.append(f"{_at(tok)}: {tok.text}[{n}] not in the header")
        for callee, args in self.calls:
            if callee != "redis.call":
                continue
            where = _at(args[0][0]) if args and args[0] else f"{self.name}.lua:0"
            if not args or len(args[0]) != 1 or args[0][0].kind != "string":
                out.append(f"{where}: redis.call without a literal command")
                continue
            cmd = args[0][0].value.upper()
            rest = args[1:]
            if cmd in NO_KEYS:
                continue
            if cmd in CHANNEL_FIRST:
                if not rest or _index_of(rest[0], "ARGV") is None:
                    out.append(f"{where}: {cmd} channel is not ARGV[...]")
                continue
            if cmd in KEY_FIRST:
                checked = rest[:1]
            elif cmd in ALL_KEYS:
                checked = rest
            else:
                out.append(f"{where}: {cmd}: add it to lua_keys.py's command table")
                continue
            for expr in checked:
                if _unpacked(expr) is not None:
                    listed = _unpacked(expr) or ""
                    if cmd not in ALL_KEYS or not self.is_key_list(listed):
                        out.append(f"{where}: {cmd} keys from {listed}, not keys")
                elif not self.is_key(expr):
                    text = " ".join(x.text for x in expr)
                    out.append(f"{where}: {cmd} key {text!r} is not from KEYS/ARGV")
        return out


def _at(tok: Tok) -> str:
    return f"{tok.file}.lua:{tok.line}"


def _closes_at_end(expr: list[Tok], open_at: int) -> bool:
    depth = 0
    for k in range(open_at, len(expr)):
        if expr[k].text == "[":
            depth += 1
        elif expr[k].text == "]":
            depth -= 1
            if depth == 0:
                return k == len(expr) - 1
    return False


def _index_of(expr: list[Tok] | None, table: str) -> int | None:
    """N for an expression that is exactly ``TABLE[N]``; -1 for ``TABLE[<expr>]``."""
    if not expr or len(expr) < 4 or expr[0].text != table or expr[1].text != "[":
        return None
    if not _closes_at_end(expr, 1):
        return None
    if len(expr) == 4 and expr[2].kind == "number":
        return int(expr[2].text)
    return -1


def _index_text(expr: list[Tok] | None, table: str) -> str | None:
    """``3+7n`` for ``TABLE[3 + 7 * n]``, ``2`` for ``TABLE[2]``; None for anything else."""
    if _index_of(expr, table) is None or expr is None:
        return None
    return "".join(t.text for t in expr[2:-1] if t.text != "*")


def _unpacked(expr: list[Tok]) -> str | None:
    """``t`` for ``unpack(t, ...)``."""
    if len(expr) >= 4 and expr[0].text == "unpack" and expr[1].text == "(":
        return expr[2].text
    return None


def _key_fragment(value: str) -> bool:
    return bool(
        re.fullmatch(r"[A-Za-z0-9_.\-]*:", value)
        or re.search(r"\{[^{}\"]*\}", value)
        or re.search(r":v\d+:", value)
    )


def problems(scripts: Iterable[tuple[str, str]], prelude: str = "") -> list[str]:
    """Every rule broken by ``(name, source)`` scripts, each run after ``prelude``."""
    out: list[str] = []
    for name, source in scripts:
        out += Script(name, source, prelude).problems()
    return sorted(set(out))
