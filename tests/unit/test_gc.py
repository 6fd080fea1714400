"""Every relay process (worker, API, both) tunes the cyclic garbage collector before it
starts (relay.runner.tune_gc): start-up's objects frozen, the first generation collected
less often."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

import relay.runner
from relay.settings import Settings


@pytest.fixture
def gc_restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def _run_as(
    monkeypatch: pytest.MonkeyPatch, *, with_api: bool, with_worker: bool
) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def fake_run_loop(settings: Settings, coro: Any) -> None:  # what would run, not run
        coro.close()
        seen["threshold"] = gc.get_threshold()
        seen["frozen"] = gc.get_freeze_count()

    monkeypatch.setattr(relay.runner, "run_loop", fake_run_loop)
    monkeypatch.setattr(relay.runner.logs, "configure", lambda *a: None)
    relay.runner.run(Settings.from_env({}), with_api=with_api, with_worker=with_worker)
    return seen


@pytest.mark.parametrize(("with_api", "with_worker"), [(False, True), (True, False), (True, True)])
def test_a_relay_process_tunes_gc_before_it_runs(
    monkeypatch: pytest.MonkeyPatch, gc_restored: None, with_api: bool, with_worker: bool
) -> None:
    gc.set_threshold(700, 10, 10)
    seen = _run_as(monkeypatch, with_api=with_api, with_worker=with_worker)
    assert seen["threshold"] == (relay.runner.GC_GEN0_THRESHOLD, 10, 10)
    assert seen["frozen"] > 0
