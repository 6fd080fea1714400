"""What `relay dev` checks before it starts anything: its folder is not another running
`relay dev`'s, its API port is free, the Redis it is given answers (within --redis-wait).
Each refusal is one line on stderr and a non-zero exit, and touches no file of another
instance. Real `relay` processes, run from a temporary folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from relay.redisproc import free_port

RELAY = [sys.executable, "-m", "relay"]


def clean_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(RELAY_LOG_FORMAT="json", **values)
    return env


def relay(
    cwd: Path, env: dict[str, str], *args: str, within: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RELAY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=within
    )


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture
def listener() -> Iterator[int]:
    """A port something already listens on (127.0.0.1)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock.getsockname()[1]


def _stats(cwd: Path, env: dict[str, str], within: float = 20.0) -> dict[str, object]:
    deadline = time.monotonic() + within
    while True:  # the API and worker may still be starting; the Redis already answers
        got = relay(cwd, env, "stats", "--json")
        if got.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got.returncode == 0, got.stderr
    stats: dict[str, object] = orjson.loads(got.stdout)
    return stats


def test_second_dev_in_the_same_folder_refuses_and_leaves_the_first(tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(RELAY_PORT=str(port))
    record = tmp_path / ".relay" / "redis-url"
    redis_log = tmp_path / ".relay" / "redis" / "redis.log"
    first = subprocess.Popen(
        [*RELAY, "dev", "--private-redis"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while not record.exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first relay dev never recorded its Redis"
            time.sleep(0.05)
        url = record.read_text()
        _stats(tmp_path, env)
        servers_started = redis_log.read_text().count("Ready to accept connections")

        began = time.monotonic()
        second = relay(tmp_path, env, "dev", "--private-redis")
        took = time.monotonic() - began

        assert second.returncode != 0
        assert "Traceback" not in second.stderr
        (line,) = lines_of(second.stderr)
        assert f"pid {first.pid}" in line and f":{port}" in line, line
        assert took < 20, took  # refused at once: nothing was started
        assert first.poll() is None, "the first relay dev stopped"
        assert record.read_text() == url  # its record untouched
        # no second redis-server ran on the first one's data folder
        assert redis_log.read_text().count("Ready to accept connections") == servers_started
        _stats(tmp_path, env)  # the operator commands still find the first's Redis
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    assert not record.exists()


def test_dev_on_a_busy_port_starts_nothing(tmp_path: Path, listener: int) -> None:
    env = clean_env(RELAY_PORT=str(listener))
    got = relay(tmp_path, env, "dev", "--private-redis")
    assert got.returncode != 0
    (line,) = lines_of(got.stderr)
    assert f"127.0.0.1:{listener}" in line and "in use" in line, line
    assert not (tmp_path / ".relay" / "redis").exists()  # no redis-server was started
    assert not (tmp_path / ".relay" / "redis-url").exists()


def test_dev_gives_up_on_an_unreachable_redis_naming_it(tmp_path: Path) -> None:
    closed = free_port()
    env = clean_env(
        RELAY_PORT=str(free_port()), RELAY_REDIS_URL=f"redis://:s3cret@127.0.0.1:{closed}/0"
    )
    shown = f"redis://:***@127.0.0.1:{closed}/0"
    try:
        got = relay(tmp_path, env, "dev", "--redis-wait", "1", within=30)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"relay dev still waiting after 30 s: {exc.stderr!r}") from None
    assert got.returncode != 0
    assert "Traceback" not in got.stderr and "s3cret" not in got.stderr
    said = lines_of(got.stderr)
    assert len(said) == 2, got.stderr  # waiting for it, then giving up
    assert "waiting" in said[0] and shown in said[0] and "--redis-wait" in said[0], said[0]
    assert "cannot reach Redis" in said[1] and shown in said[1] and "1s" in said[1], said[1]
    assert not (tmp_path / ".relay" / "redis-url").exists()

    at_once = relay(tmp_path, env, "dev", "--redis-wait", "0", within=30)
    assert at_once.returncode != 0
    (line,) = lines_of(at_once.stderr)
    assert "cannot reach Redis" in line and shown in line, line


def test_worker_waiting_for_redis_says_which(tmp_path: Path) -> None:
    closed = free_port()
    env = clean_env(RELAY_REDIS_URL=f"redis://:s3cret@127.0.0.1:{closed}/0")
    worker = subprocess.Popen(
        [*RELAY, "worker"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert worker.stderr is not None
        for _ in range(20):  # its first log lines: the first warning about Redis among them
            first = orjson.loads(worker.stderr.readline())
            if first["event"] == "redis.unavailable":
                break
    finally:
        worker.send_signal(signal.SIGTERM)
        _, rest = worker.communicate(timeout=30)
    assert first["event"] == "redis.unavailable", first
    assert first["redis"] == f"redis://:***@127.0.0.1:{closed}/0 (from RELAY_REDIS_URL)"
    assert "s3cret" not in rest and worker.returncode == 0, rest
