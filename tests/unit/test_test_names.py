"""Test files are collected by basename (pytest's default import mode, no packages), so two
files of one name in different tiers stop the whole suite at collection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_no_two_test_files_share_a_name() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []
