"""The first hour with the CLI: finding `relay dev`'s Redis, saying which Redis
is in use, one-line errors for every bad setting, unknown ids exit 1.

Unguarded, ``RELAY_REDIS_URL=http://x relay stats`` raises ValueError from redis-py (a
traceback), ``relay dead --endpoint ep_nosuch`` exits 0 with an empty table, and ``relay
stats`` with no RELAY_REDIS_URL dials 127.0.0.1:6379 while ``relay dev`` runs on another
port.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

from relay.cli import main
from relay.redisproc import free_port
from relay.settings import Settings, SettingsError
from tests.helpers.cli import add_endpoint, cli, finish, publish

RELAY = [sys.executable, "-m", "relay"]
OPERATOR_COMMANDS = [
    ["stats"],
    ["dead"],
    ["dead", "--endpoint", "ep_x"],
    ["replay", "dlv_x"],
    ["replay", "--all-dead"],
    ["inspect", "dlv_x"],
    ["endpoints"],
    ["purge", "--succeeded-before", "1d"],
]
PROCESS_COMMANDS = [["api"], ["worker"], ["dev"]]


def invoke(env: dict[str, str | None], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env, prog_name="relay")


def assert_one_line_error(result: Result, code: int, *words: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    # click turned the error into its exit code: no exception escaped (no traceback)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty folder, so no `.relay/redis-url` of a real `relay dev` is seen;
    and never start a real api/worker/dev in-process (a setting that was wrongly
    accepted would otherwise run one against whatever answers on 127.0.0.1:6379)."""
    import relay.runner

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command started a process despite a bad setting")

    monkeypatch.setattr(relay.runner, "run", refuse)
    monkeypatch.setattr(relay.runner, "run_dev", refuse)
    monkeypatch.chdir(tmp_path)
    return tmp_path


BAD_SETTINGS: list[tuple[dict[str, str | None], str]] = [
    ({"RELAY_REDIS_URL": "http://x"}, "RELAY_REDIS_URL"),
    ({"RELAY_REDIS_URL": "redis://127.0.0.1:port/0"}, "RELAY_REDIS_URL"),
    ({"RELAY_REDIS_URL": "redis:///0"}, "RELAY_REDIS_URL"),
    ({"RELAY_SHARDS": "0"}, "RELAY_SHARDS"),
    ({"RELAY_SHARDS": "many"}, "RELAY_SHARDS"),
    ({"RELAY_KEY_PREFIX": "a:b"}, "RELAY_KEY_PREFIX"),
    ({"RELAY_PORT": "99999"}, "RELAY_PORT"),
    ({"RELAY_DEV_PRIVATE_REDIS": "maybe"}, "RELAY_DEV_PRIVATE_REDIS"),
]


@pytest.mark.parametrize("command", OPERATOR_COMMANDS + PROCESS_COMMANDS, ids=" ".join)
@pytest.mark.parametrize(
    "bad", BAD_SETTINGS, ids=lambda b: "-".join(f"{k}={v}" for k, v in b[0].items())
)
def test_bad_settings_are_one_line_exit_2(
    in_tmp: Path, command: list[str], bad: tuple[dict[str, str | None], str]
) -> None:
    env, named = bad
    assert_one_line_error(invoke({"RELAY_API_TOKENS": "t", **env}, *command), 2, named)


@pytest.mark.parametrize("command", OPERATOR_COMMANDS, ids=" ".join)
def test_unreachable_redis_is_one_line_naming_it(in_tmp: Path, command: list[str]) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = invoke({"RELAY_REDIS_URL": url}, *command)
    assert_one_line_error(result, 1, "cannot reach Redis", url, "RELAY_REDIS_URL")


async def _not_redis(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    await writer.drain()
    writer.close()


@pytest.mark.parametrize("command", [["stats"], ["dead"], ["endpoints"]], ids=" ".join)
async def test_something_else_on_the_port_is_one_line(in_tmp: Path, command: list[str]) -> None:
    server = await asyncio.start_server(_not_redis, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        result = await asyncio.to_thread(
            invoke, {"RELAY_REDIS_URL": f"redis://127.0.0.1:{port}/0"}, *command
        )
    finally:
        server.close()
    assert_one_line_error(result, 1, f"127.0.0.1:{port}")


def test_bad_url_from_a_real_shell_prints_no_traceback(in_tmp: Path) -> None:
    env = {**os.environ, "RELAY_REDIS_URL": "http://x"}
    got = subprocess.run([*RELAY, "stats"], env=env, capture_output=True, text=True, timeout=60)
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == [
        "Error: RELAY_REDIS_URL='http://x': must start with redis://, rediss:// or unix://"
    ]


# ---------------------------------------------------------------- relay dev's record


def test_operator_settings_read_dev_record(tmp_path: Path) -> None:
    record = tmp_path / "redis-url"
    assert Settings.for_operator({}, dev_dir=tmp_path).redis_url_source == "default"
    record.write_text("redis://127.0.0.1:41234/0\n")
    got = Settings.for_operator({}, dev_dir=tmp_path)
    assert (got.redis_url, got.redis_url_source) == ("redis://127.0.0.1:41234/0", str(record))
    # RELAY_REDIS_URL wins over the record
    given = Settings.for_operator({"RELAY_REDIS_URL": "redis://h:1/2"}, dev_dir=tmp_path)
    assert (given.redis_url, given.redis_url_source) == ("redis://h:1/2", "RELAY_REDIS_URL")
    record.write_text("nonsense\n")
    with pytest.raises(SettingsError, match="redis-url"):
        Settings.for_operator({}, dev_dir=tmp_path)
    assert Settings.from_env({"RELAY_DEV_PRIVATE_REDIS": "1"}).dev_private_redis


def test_stale_dev_record_says_which_redis_was_tried(in_tmp: Path) -> None:
    (in_tmp / ".relay").mkdir()
    url = f"redis://127.0.0.1:{free_port()}/0"
    (in_tmp / ".relay" / "redis-url").write_text(url + "\n")
    result = invoke({"RELAY_REDIS_URL": None}, "stats")
    assert_one_line_error(result, 1, "cannot reach Redis", url, ".relay/redis-url", "relay dev")


def test_dev_says_it_uses_a_redis_that_answered(redis_server: Any, tmp_path: Path) -> None:
    from relay.runner import _which_redis

    settings = Settings(redis_url=redis_server.url)  # as if the default URL answered
    server, line = _which_redis(settings, tmp_path)
    assert server is None
    assert redis_server.url in line and "already answered" in line
    assert "--private-redis" in line and "PRIVATE_REDIS=1" in line


def _wait_for(path: Path, proc: subprocess.Popen[str], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_dev_private_redis_is_found_by_the_cli_and_forgotten_at_stop(
    in_tmp: Path, how: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(RELAY_PORT=str(free_port()), RELAY_LOG_FORMAT="json")
    args = [*RELAY, "dev"]
    if how == "flag":
        args.append("--private-redis")
    else:
        env["RELAY_DEV_PRIVATE_REDIS"] = "1"
    record = in_tmp / ".relay" / "redis-url"
    dev = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True, cwd=in_tmp)
    try:
        _wait_for(record, dev)
        url = record.read_text().strip()
        assert url.startswith("redis://127.0.0.1:") and not url.startswith(
            "redis://127.0.0.1:6379/"
        )
        deadline = time.monotonic() + 20
        while True:  # the API and worker are starting; the Redis already answers
            got = subprocess.run(
                [*RELAY, "stats", "--json"], env=env, capture_output=True, text=True, cwd=in_tmp
            )
            if got.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert got.returncode == 0, got.stderr
        assert orjson.loads(got.stdout)["counts"]["pending"] == 0
    finally:
        dev.send_signal(signal.SIGINT)
        _, err = dev.communicate(timeout=30)
    assert dev.returncode == 0, err
    assert f"relay dev: Redis {url}: a private redis-server started here (asked for" in err
    assert "recorded in .relay/redis-url" in err
    assert not record.exists()  # forgotten when dev stops: the CLI is back to the default


def test_private_redis_with_a_given_url_is_refused(in_tmp: Path) -> None:
    result = invoke({"RELAY_REDIS_URL": "redis://127.0.0.1:1/0"}, "dev", "--private-redis")
    assert_one_line_error(result, 2, "RELAY_REDIS_URL is set")


# ---------------------------------------------------------------- unknown ids exit 1


@pytest.mark.realredis
async def test_unknown_endpoint_exits_1(make_store: Any) -> None:

    st = await make_store()
    ep = await add_endpoint(st)
    _, (d,) = await publish(st, [ep])
    await finish(st, {d: "dead"})

    for args in (
        ["dead", "--endpoint", "ep_nosuch"],
        ["replay", "--all-dead", "--endpoint", "ep_nosuch"],
    ):
        result = await cli(st, *args)
        assert result.exit_code == 1, (args, result.output)
        assert "endpoint ep_nosuch not found" in result.stderr
    # a known endpoint with nothing dead is an empty answer, exit 0
    other = await add_endpoint(st)
    assert (await cli(st, "dead", "--endpoint", other, "--json")).stdout.strip() == "[]"
    # a deleted endpoint's dead letters are still listed
    await st.delete_endpoint(await st.get_endpoint(ep) or {})
    rows = orjson.loads((await cli(st, "dead", "--endpoint", ep, "--json")).stdout)
    assert [r["id"] for r in rows] == [d]
    table = await cli(st, "dead")
    assert "last result" in table.stdout.splitlines()[0]
