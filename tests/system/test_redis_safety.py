"""relay refuses a Redis that evicts keys and warns about one that persists
nothing (docs/operating/redis-persistence.md).

Without the check in the runner, ``relay worker`` on an ``allkeys-lru`` Redis starts and
runs until killed (the refusal tests time out waiting for it to exit), and no
``redis.unsafe`` warning is logged for ``--save "" --appendonly no``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from relay.domain.redisfacts import RedisFacts, judge
from relay.queue.store import Store
from relay.redisproc import RedisServer, free_port
from relay.runner import RedisRefused, check_redis, open_store
from relay.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
RELAY = [sys.executable, "-m", "relay"]


def _env(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        RELAY_REDIS_URL=url,
        RELAY_LOG_FORMAT="json",
        RELAY_PORT=str(free_port()),
        RELAY_API_TOKENS="t",
        RELAY_KEY_PREFIX="safety",
        **extra,
    )
    return env


def _server(tmp_path: Path, *extra: str, appendonly: bool = True) -> RedisServer:
    server = RedisServer(data_dir=tmp_path / "redis", appendonly=appendonly, extra_args=extra)
    server.start()
    return server


def _run_until(cmd: list[str], env: dict[str, str], marker: str, within: float = 15.0) -> str:
    """Start ``cmd``; once ``marker`` shows on stderr (or it exits), SIGTERM it; its stderr."""
    log = Path(env["RELAY_KEY_PREFIX"] + f"-{os.getpid()}-{time.monotonic_ns()}.log")
    path = ROOT / ".pytest_cache" / log
    path.parent.mkdir(exist_ok=True)
    with path.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=out, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + within
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                if marker in path.read_text():
                    break
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
    text = path.read_text()
    path.unlink()
    return text


@pytest.mark.parametrize("command", ["worker", "api"])
def test_refuses_an_evicting_redis(tmp_path: Path, command: str) -> None:
    server = _server(tmp_path, "--maxmemory-policy", "allkeys-lru")
    try:
        proc = subprocess.run(
            [*RELAY, command],
            env=_env(server.url),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        server.stop()
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert "allkeys-lru" in lines[0] and "noeviction" in lines[0]
    assert lines[0].startswith("relay: refusing to start")


def test_refuses_when_config_is_renamed_by_reading_info(tmp_path: Path) -> None:
    """Managed Redis without CONFIG: the policy comes from INFO memory."""
    server = _server(
        tmp_path, "--maxmemory-policy", "volatile-ttl", "--rename-command", "CONFIG", ""
    )
    try:
        proc = subprocess.run(
            [*RELAY, "worker"],
            env=_env(server.url),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        server.stop()
    assert proc.returncode == 1, proc.stderr
    assert "volatile-ttl" in proc.stderr and "INFO memory" in proc.stderr


def test_starts_on_noeviction_and_warns_without_persistence(tmp_path: Path) -> None:
    server = _server(tmp_path, appendonly=False)  # RedisServer passes --save "" too
    port = free_port()
    try:
        env = _env(server.url, RELAY_METRICS_PORT=str(port))
        err = _run_until([*RELAY, "worker"], env, "worker.started")
    finally:
        server.stop()
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    names = [e.get("event") for e in events]
    assert "worker.started" in names, err
    unsafe = [e for e in events if e.get("event") == "redis.unsafe"]
    assert len(unsafe) == 1 and unsafe[0]["persistence"] == "none", err
    assert "refusing" not in err


def test_no_warning_with_aof(tmp_path: Path) -> None:
    server = _server(tmp_path, appendonly=True)
    try:
        err = _run_until([*RELAY, "worker"], _env(server.url), "worker.started")
    finally:
        server.stop()
    assert "worker.started" in err and "redis.unsafe" not in err, err


def test_judge() -> None:
    ok = RedisFacts(role="master", maxmemory_policy="noeviction", aof=True, rdb=False)
    assert judge(ok).refuse is None and judge(ok).warnings == []
    assert ok.persistence_level == 2
    lru = RedisFacts(maxmemory_policy="allkeys-lru", aof=True, rdb=True)
    assert judge(lru).refuse and "allkeys-lru" in (judge(lru).refuse or "")
    bare = RedisFacts(maxmemory_policy="noeviction", aof=False, rdb=False)
    assert bare.persistence_level == 0 and len(judge(bare).warnings) == 1
    unread = RedisFacts(policy_from="")
    assert judge(unread).refuse is None and len(judge(unread).warnings) == 2
    assert unread.persistence_level == -1
    assert RedisFacts(aof=True, rdb=True).persistence_level == 3


def test_stats_shows_redis(tmp_path: Path) -> None:
    server = _server(tmp_path, appendonly=False)
    try:
        env = _env(server.url)
        out = subprocess.run(
            [*RELAY, "stats", "--json"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        table = subprocess.run(
            [*RELAY, "stats"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    finally:
        server.stop()
    data = json.loads(out)
    assert {"counts", "queue"} <= data.keys()
    assert data["redis"]["role"] == "master"
    assert data["redis"]["persistence"] == "none"
    assert data["redis"]["connected_replicas"] == 0
    assert "redis role" in table and "redis persistence" in table and "redis replicas" in table


async def test_server_facts_on_a_cluster(cluster_store: Any) -> None:
    store = await cluster_store()
    facts = await store.server_facts()
    assert facts.role == "master" and facts.maxmemory_policy == "noeviction"
    assert facts.persistence in {"aof", "none", "rdb", "aof+rdb"}


async def test_every_cluster_primary_is_checked(cluster_store: Any) -> None:
    """One primary of three set to ``allkeys-lru`` (not the client's default node): the
    start is refused and the line names that node. Fails when only the default node is
    asked (the start goes ahead)."""
    store = await cluster_store()
    default = store.redis.get_default_node()
    other = next(n for n in store.redis.get_primaries() if n.name != default.name)
    assert len(await store.server_facts_by_node()) == 3
    await store.redis.execute_command(
        "CONFIG SET", "maxmemory-policy", "allkeys-lru", target_nodes=other
    )
    try:
        with pytest.raises(RedisRefused) as refused:
            await check_redis(store)
        assert f"node {other.host}:{other.port}" in str(refused.value)
        assert "allkeys-lru" in str(refused.value)
    finally:
        await store.redis.execute_command(
            "CONFIG SET", "maxmemory-policy", "noeviction", target_nodes=other
        )
    await check_redis(store)  # all three noeviction again: starts


async def test_start_up_waits_out_redis_going_away_before_the_layout_probe(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process started during a failover (scripts loaded, then the primary gone) waits
    for Redis at the layout probe instead of exiting. Fails with the probe called once,
    unguarded (a replacement worker started during a failover exits 1)."""
    calls = 0
    probe = Store.legacy_left

    async def flaky(self: Store) -> str | None:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise RedisConnectionError("Connection refused: the primary is gone")
        return await probe(self)

    monkeypatch.setattr(Store, "legacy_left", flaky)
    settings = Settings(redis_url=redis_server.url, key_prefix="up" + uuid.uuid4().hex[:8])
    store = await open_store(settings, asyncio.Event())
    assert store is not None and calls == 3
    await store.close()
    # stopped while it waits: no Store, nothing left open
    calls = -100
    stop = asyncio.Event()
    stop.set()
    assert await open_store(settings, stop) is None
