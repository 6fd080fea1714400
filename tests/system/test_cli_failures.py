"""Expected failures of every `relay` command are one line on stderr and a non-zero exit,
never a traceback: a port taken, a bad flag value, a folder that is a file, a database
that does not answer. Real `relay` processes, from a temporary folder; the operator
commands' unreachable Redis is in test_cli_first_hour.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.redisproc import free_port

RELAY = [sys.executable, "-m", "relay"]


def run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    full.update(RELAY_LOG_FORMAT="json", **env)
    try:
        return subprocess.run(
            [*RELAY, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"relay {' '.join(args)} still running after 60 s: {exc.stderr!r}"
        ) from None


def one_line(got: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one line a failed command printed, besides its JSON log lines."""
    assert got.returncode != 0, got.stderr
    assert "Traceback" not in got.stderr, got.stderr
    said = [x for x in got.stderr.splitlines() if x.strip() and not x.startswith("{")]
    assert len(said) == 1, got.stderr
    for word in words:
        assert word in said[0], said[0]
    return said[0]


@pytest.fixture
def busy() -> Iterator[int]:
    """A port something already listens on (127.0.0.1)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock.getsockname()[1]


@pytest.fixture
def redis_env(redis_server: Any) -> dict[str, str]:
    """The session's Redis, under a key prefix of this test's own."""
    return {"RELAY_REDIS_URL": redis_server.url, "RELAY_KEY_PREFIX": "t" + uuid.uuid4().hex[:10]}


# ---------------------------------------------------------------- relay receiver


def test_receiver_on_a_busy_port(tmp_path: Path, busy: int) -> None:
    got = run(tmp_path, "receiver", "--port", str(busy))
    one_line(got, f"127.0.0.1:{busy}", "in use")
    assert "demo receiver on" not in got.stdout, "a banner for a port it never took"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--secret", "whsec_short"], "--secret"),
        (["--public-key", "whpk_nope"], "--public-key"),
        (["--status", "99"], "--status"),
    ],
    ids=["secret", "public-key", "status"],
)
def test_receiver_bad_flags(tmp_path: Path, args: list[str], named: str) -> None:
    got = run(tmp_path, "receiver", "--port", str(free_port()), *args)
    assert got.returncode == 2, got.stderr  # a usage error
    assert "Traceback" not in got.stderr and named in got.stderr.splitlines()[-1], got.stderr


# ---------------------------------------------------------------- relay api, worker, dev


@pytest.mark.realredis
def test_api_on_a_busy_port(tmp_path: Path, busy: int, redis_env: dict[str, str]) -> None:
    got = run(tmp_path, "api", RELAY_PORT=str(busy), RELAY_API_TOKENS="t", **redis_env)
    one_line(got, f"127.0.0.1:{busy}", "in use", "RELAY_PORT")


@pytest.mark.realredis
def test_worker_metrics_on_a_busy_port(
    tmp_path: Path, busy: int, redis_env: dict[str, str]
) -> None:
    got = run(tmp_path, "worker", "--metrics-port", str(busy), **redis_env)
    one_line(got, f"127.0.0.1:{busy}", "in use", "RELAY_METRICS_PORT")


def test_dev_data_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    got = run(tmp_path, "dev", "--data-dir", "afile", RELAY_PORT=str(free_port()))
    one_line(got, "afile")


# ---------------------------------------------------------------- relay outbox


@pytest.mark.parametrize("args", [["--init"], ["--stats"], ["--replay-dead", "all"]], ids=str)
def test_outbox_with_postgres_unreachable(tmp_path: Path, args: list[str]) -> None:
    dsn = f"postgresql://app:pw@127.0.0.1:{free_port()}/shop"
    got = run(tmp_path, "outbox", *args, RELAY_OUTBOX_DSN=dsn)
    line = one_line(got, "RELAY_OUTBOX_DSN", "Connection refused")
    assert "pw" not in line.replace("port", "")


@pytest.mark.realredis
def test_outbox_metrics_on_a_busy_port(
    tmp_path: Path, busy: int, redis_env: dict[str, str]
) -> None:
    dsn = f"postgresql://app@127.0.0.1:{free_port()}/shop"
    got = run(tmp_path, "outbox", "--metrics-port", str(busy), RELAY_OUTBOX_DSN=dsn, **redis_env)
    one_line(got, f"127.0.0.1:{busy}", "in use", "RELAY_METRICS_PORT")
