"""scripts/lint_comments.py: comments and docstrings cite no issue number and no benchmark
figure, and the rule has no false alarm on the comments relay has."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "lint_comments", ROOT / "scripts" / "lint_comments.py"
)
assert _spec is not None and _spec.loader is not None
lint = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lint)


def kinds(source: str, lua: bool = False) -> list[str]:
    return [kind for _, kind, _ in lint.hits(source, lua)]


@pytest.mark.parametrize(
    ("comment", "kind"),
    [
        ("# the layout of issue 17", "issue reference"),
        ("# see #17 for why", "issue reference"),
        ("# (PR 4)", "issue reference"),
        ("# 0.13 µs a call", "benchmark unit"),
        ("# 120 ns per entry", "benchmark unit"),
        ("# 0.13 against 0.70", "benchmark comparison"),
        ("# 3x faster than the pool", "benchmark comparison"),
        ("# a third more CPU per delivery", "benchmark comparison"),
        ("# 8% fewer instructions", "benchmark comparison"),
        ("# 12% of its CPU in bench/run.py", "benchmark comparison"),
        ("# a slot moved at ~60,000 keys/s", "throughput figure"),
        ("# 113k instructions per delivery", "throughput figure"),
    ],
)
def test_each_rule_finds_its_case(comment: str, kind: str) -> None:
    assert kinds(f"x = 1  {comment}\n") == [kind]
    assert kinds(f'def f() -> None:\n    """{comment[2:]}"""\n') == [kind]
    assert kinds(f"local x = 1  -- {comment[2:]}\n", lua=True) == [kind]


@pytest.mark.parametrize(
    "comment",
    [
        "# a 5 s socket timeout, retried after 500 ms",
        "# at most 1,000 arguments per command",
        "# jitter of 20% either way",
        "# RELAY_API_RATE: 100 requests/s per key, bursts of 200",
        "# the third request gets 429",
        "# twice the usual send time, at least 100 ms",
        "# base32 digit #",
        "# color: #fff",
    ],
)
def test_ordinary_comments_pass(comment: str) -> None:
    assert kinds(f"x = 1  {comment}\n") == []


def test_strings_are_not_comments() -> None:
    assert kinds('x = "issue 17"\n') == []
    assert kinds('local k = "--issue 17"  -- the key\n', lua=True) == []
    assert kinds("local k = 'a' .. \"b\"  -- issue 17\n", lua=True) == ["issue reference"]


def test_relay_and_tests_are_clean() -> None:
    assert lint.main(["relay", "tests"]) == 0
