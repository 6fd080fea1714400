"""The settings declaration is the one source: the reference page is generated from it,
every ``RELAY_*`` name relay uses is declared, and the declared defaults are the defaults."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from relay.domain.settingspec import declared
from relay.settings import Settings, SettingsError, TestHooks, reference_markdown

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "settings.md"
DERIVED = {
    "redis_url_given",
    "redis_url_source",
    "api_burst",
    "tracing_exporters",
    "tracing_service",
}


def test_the_page_lists_every_setting_once() -> None:
    page = reference_markdown()
    for _, spec in declared(Settings):
        assert page.count(f"| `{spec.env}` |") == 1, spec.env
    for _, spec in declared(TestHooks):
        assert spec.env not in page  # test hooks are not configuration


def test_the_committed_page_is_the_generated_one() -> None:
    printed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_settings_reference.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed == reference_markdown()
    assert PAGE.read_text() == printed, "run: python scripts/gen_settings_reference.py > " + str(
        PAGE.relative_to(ROOT)
    )


def test_every_relay_variable_used_in_relay_is_declared() -> None:
    names = {spec.env for cls in (Settings, TestHooks) for _, spec in declared(cls)}
    used: dict[str, str] = {}
    for path in sorted((ROOT / "relay").rglob("*")):
        if path.is_file() and path.suffix in (".py", ".lua", ".js", ".html"):
            for name in re.findall(r"\bRELAY_[A-Z][A-Z0-9_]*", path.read_text()):
                used.setdefault(name, str(path.relative_to(ROOT)))
    assert {n: where for n, where in used.items() if n not in names} == {}


def test_every_field_is_declared_or_derived() -> None:
    undeclared = {f.name for f in fields(Settings)} - {name for name, _ in declared(Settings)}
    assert undeclared == DERIVED


def test_declared_defaults_are_the_defaults() -> None:
    s, env = Settings(), Settings.from_env({})
    assert s == env
    for name, spec in declared(Settings):
        if not spec.default:
            continue
        parsed = spec.parse(spec.default)
        if spec.also:
            assert parsed == (getattr(s, name), getattr(s, spec.also)), spec.env
        else:
            assert parsed == getattr(s, name), spec.env


def test_test_hooks_are_read_apart_from_the_settings() -> None:
    hooks = TestHooks.from_env(
        {"RELAY_TEST_CRASH_MARKER": "boom", "RELAY_TEST_OUTBOX_CRASH_AFTER": "5"}
    )
    assert (hooks.crash_marker, hooks.outbox_crash_after) == ("boom", 5)
    assert TestHooks.from_env({}) == TestHooks()
    assert not any(f.name.startswith("test_") for f in fields(Settings))
    with pytest.raises(SettingsError, match=r"^RELAY_TEST_OUTBOX_CRASH_AFTER='x': "):
        TestHooks.from_env({"RELAY_TEST_OUTBOX_CRASH_AFTER": "x"})
