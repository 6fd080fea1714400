"""Fail on comments and docstrings that cite an issue number or a benchmark figure.

Comments describe the code as it is; measurements and history go in commit bodies and
docs/performance.md. Reads the comments and docstrings of Python files and the comments
of Lua files under the folders given (default: relay and tests), and prints each hit as
``path:line: kind: text``; exits 1 when there is one.

    python scripts/lint_comments.py [FOLDER ...]
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (what is wrong, a pattern that finds it in one line of a comment or docstring)
RULES = [
    ("issue reference", r"\b(?:issue|pr|pull request)s?\s+#?\d+"),
    ("issue reference", r"(?<![\w&#/])#\d+\b"),
    ("benchmark unit", r"\d\s*(?:ns|µs|μs)\b|µs|μs"),
    ("benchmark comparison", r"\b\d+(?:\.\d+)?\s*(?:ms|s)?\s+(?:against|versus|vs\.?)\s+\d"),
    (
        "benchmark comparison",
        r"\b\d+(?:\.\d+)?\s*(?:x|\u00d7|times)\s+(?:faster|slower|fewer|more|less)\b",
    ),
    (
        "benchmark comparison",
        r"\b(?:a (?:third|quarter|fifth)|half|twice)\s+(?:more|less|fewer)\s+CPU\b",
    ),
    ("benchmark comparison", r"\d+(?:\.\d+)?\s*%\s+(?:fewer|more|less|faster|slower|cheaper)\b"),
    ("benchmark comparison", r"\d+(?:\.\d+)?\s*%\s+of\b[^.;]{0,30}\b(?:CPU|instructions)"),
    (  # a measured rate: thousands (1,000 or 1k) of something a second
        "throughput figure",
        r"(?:\d(?:,\d{3})+|\d(?:\.\d+)?\s*k)\s*"
        r"(?:deliveries|requests|events|ops|keys|calls)\s*/\s*s\b",
    ),
    ("throughput figure", r"\binstructions per (?:delivery|call|request|send)\b"),
]
PATTERNS = [(kind, re.compile(pattern, re.I)) for kind, pattern in RULES]


def python_texts(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python source."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string.lstrip("#")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                doc = body[0].value.value
                if isinstance(doc, str):
                    for k, line in enumerate(doc.splitlines()):
                        yield body[0].lineno + k, line


LUA_COMMENT = re.compile(r"""^(?:[^"'-]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|-(?!-))*--(.*)$""")


def lua_texts(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every ``--`` comment of a Lua source."""
    for n, line in enumerate(source.splitlines(), 1):
        m = LUA_COMMENT.match(line)
        if m:
            yield n, m.group(1)


def hits(source: str, lua: bool = False) -> Iterator[tuple[int, str, str]]:
    """(line, what is wrong, the text) for each comment or docstring line that breaks a rule."""
    for line, text in lua_texts(source) if lua else python_texts(source):
        for kind, pattern in PATTERNS:
            if pattern.search(text):
                yield line, kind, text.strip()
                break


def main(folders: list[str]) -> int:
    found = 0
    for folder in folders or ["relay", "tests"]:
        base = Path(folder) if Path(folder).is_absolute() else ROOT / folder
        for path in sorted([*base.rglob("*.py"), *base.rglob("*.lua")]):
            for line, kind, text in hits(path.read_text(), lua=path.suffix == ".lua"):
                print(f"{path.relative_to(ROOT)}:{line}: {kind}: {text}")
                found += 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
