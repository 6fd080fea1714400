"""The operator CLI against the real Redis fixture, through click's CliRunner.

The data is made with the Store (publish, claim, record); the commands find it through
the environment CliRunner sets (RELAY_REDIS_URL, RELAY_KEY_PREFIX), exactly as
``relay`` run by hand would. Each command runs in a thread (it calls asyncio.run).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import click
import pytest
from click.testing import CliRunner

from relay.cli import main
from relay.queue.store import Store
from relay.redisproc import free_port
from tests.helpers.cli import add_endpoint, as_json, cli, finish, publish

pytestmark = pytest.mark.realredis


@pytest.fixture
async def st(make_store: Any) -> Store:
    return await make_store()


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


# ---------------------------------------------------------------------- help


def test_help_is_complete() -> None:
    runner = CliRunner()
    top = runner.invoke(main, ["--help"])
    assert top.exit_code == 0
    for name, command in main.commands.items():
        assert name in top.stdout
        assert command.help and command.get_short_help_str(), name
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0, name
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"relay {name} {param.opts[0]} has no help"
            else:  # arguments are described in the command's text
                assert (param.metavar or param.name or "").split("]")[0].strip("[") in (
                    result.stdout
                ), f"relay {name}: argument {param.name} is not described"
    for name in ("stats", "dead", "replay", "endpoints", "inspect", "purge"):
        assert "Example" in runner.invoke(main, [name, "--help"]).stdout, name


# ---------------------------------------------------------------------- commands


async def test_stats(st: Store) -> None:
    ep = await add_endpoint(st)
    _, (a, _) = await publish(st, [ep, ep])
    await finish(st, {a: "succeeded"})

    data = as_json(await cli(st, "stats", "--json"))
    assert data["counts"] == {
        "scheduled": 0,
        "pending": 1,
        "queued": 0,
        "held": 0,
        "delivering": 0,
        "succeeded": 1,
        "dead": 0,
    }
    table = await cli(st, "stats")
    assert table.exit_code == 0
    assert any(
        line.split() == ["deliveries", "succeeded", "1"] for line in table.stdout.splitlines()
    )


async def test_dead_lists_newest_first_and_filters(st: Store) -> None:
    a, b = await add_endpoint(st), await add_endpoint(st)
    made = []
    for ep in (a, b, a):
        made += (await publish(st, [ep]))[1]
        await finish(st, {made[-1]: "dead"})

    rows = as_json(await cli(st, "dead", "--json"))
    assert [r["id"] for r in rows] == made[::-1]
    rows = as_json(await cli(st, "dead", "--endpoint", a, "--json"))
    assert [r["id"] for r in rows] == [made[2], made[0]]
    table = await cli(st, "dead", "--limit", "1")
    assert table.exit_code == 0
    assert made[2] in table.stdout and made[1] not in table.stdout
    assert "raise --limit" in table.stderr
    bad = await cli(st, "dead", "--limit", "0")
    assert bad.exit_code == 2 and "--limit" in bad.stderr


async def test_replay_by_id(st: Store) -> None:
    ep = await add_endpoint(st)
    _, (gone, ok, waiting) = await publish(st, [ep, ep, ep])
    await finish(st, {gone: "dead", ok: "succeeded"})

    assert as_json(await cli(st, "replay", gone, ok, "--json")) == {gone: "ok", ok: "ok"}
    for d in (gone, ok):
        assert (await st.get_delivery(d) or {})["status"] == "pending"

    again = await cli(st, "replay", gone, "dlv_nope")
    assert again.exit_code == 1
    assert "not replayed: pending" in again.stdout and "not replayed: not found" in again.stdout
    assert "2 of 2 not replayed" in again.stderr
    assert (await cli(st, "replay", waiting)).exit_code == 1
    none = await cli(st, "replay")
    assert none.exit_code == 2 and "delivery IDs" in none.stderr


async def test_replay_all_dead_walks_every_page(st: Store) -> None:
    a, b = await add_endpoint(st), await add_endpoint(st)
    dead_a: list[str] = []
    dead_b: list[str] = []
    for _ in range(600):  # more than one page (500) for endpoint a
        dead_a += (await publish(st, [a]))[1]
    for _ in range(5):
        dead_b += (await publish(st, [b]))[1]
    await finish(st, dict.fromkeys(dead_a + dead_b, "dead"))

    result = await cli(st, "replay", "--all-dead", "--endpoint", a)
    assert result.exit_code == 0, result.output
    assert "replayed 600 dead deliveries" in result.stdout
    assert "replaying dead deliveries" in result.stderr  # the progress bar, on stderr
    assert await st.redis.zcard(st.keys.shard(0).dead) == 5  # b's are still dead

    assert as_json(await cli(st, "replay", "--all-dead", "--json")) == {
        "replayed": 5,
        "not_replayable": 0,
    }
    assert await st.redis.zcard(st.keys.shard(0).dead) == 0


async def test_replay_all_dead_since(st: Store) -> None:
    ep = await add_endpoint(st)
    _, old = await publish(st, [ep, ep])
    await finish(st, dict.fromkeys(old, "dead"))
    await asyncio.sleep(0.01)  # the next deaths get a later millisecond
    _, new = await publish(st, [ep, ep])
    await finish(st, dict.fromkeys(new, "dead"))
    boundary = min([(await st.get_delivery(d) or {})["finished_at"] for d in new])
    assert max([(await st.get_delivery(d) or {})["finished_at"] for d in old]) < boundary

    got = as_json(await cli(st, "replay", "--all-dead", "--since", iso(boundary), "--json"))
    assert got["replayed"] == 2
    assert sorted(await st.redis.zrange(st.keys.shard(0).dead, 0, -1)) == sorted(old)
    # relative: everything that died in the last hour
    assert (
        as_json(await cli(st, "replay", "--all-dead", "--since", "1h", "--json"))["replayed"] == 2
    )


async def test_replay_usage_errors(st: Store) -> None:
    bad_time = await cli(st, "replay", "--all-dead", "--since", "yesterday")
    assert bad_time.exit_code == 2 and "ISO 8601" in bad_time.stderr
    both = await cli(st, "replay", "--all-dead", "dlv_x")
    assert both.exit_code == 2 and "not both" in both.stderr
    stray = await cli(st, "replay", "dlv_x", "--since", "2h")
    assert stray.exit_code == 2 and "--all-dead" in stray.stderr


async def test_endpoints(st: Store) -> None:
    a = await add_endpoint(st)
    b = await add_endpoint(st, app="other")
    rows = as_json(await cli(st, "endpoints", "--json"))
    assert sorted(r["id"] for r in rows) == sorted([a, b])
    assert all("secret" not in r and "previous_secrets" not in r for r in rows)
    assert {r["breaker"]["state"] for r in rows} == {"closed"}
    assert [r["id"] for r in as_json(await cli(st, "endpoints", "--app", "other", "--json"))] == [b]
    table = await cli(st, "endpoints")
    assert a in table.stdout and "closed" in table.stdout and "whsec_" not in table.stdout


async def test_inspect(st: Store) -> None:
    ep = await add_endpoint(st)
    event_id, (d, other) = await publish(st, [ep, ep])
    await finish(st, {d: "dead"})

    data = as_json(await cli(st, "inspect", d, "--json"))
    assert data["kind"] == "delivery" and data["status"] == "dead"
    assert [e["status_code"] for e in data["attempt_log"]] == [500]
    table = await cli(st, "inspect", d)
    assert table.exit_code == 0
    assert "w-cli" in table.stdout and "500" in table.stdout and event_id in table.stdout

    event = as_json(await cli(st, "inspect", event_id, "--json"))
    assert event["kind"] == "event" and event["payload"] == {"total": 42}
    assert {x["id"]: x["status"] for x in event["deliveries"]} == {d: "dead", other: "pending"}
    assert other in (await cli(st, "inspect", event_id)).stdout

    for unknown in ("dlv_01M8NRGJEW00N08E236MWQ75WB", "evt_01M8NRGJEW00N08E236MWQ75WB", "x"):
        missing = await cli(st, "inspect", unknown)
        assert missing.exit_code == 1 and f"{unknown} not found" in missing.stderr


async def test_purge(st: Store) -> None:
    ep = await add_endpoint(st)
    made = [(await publish(st, [ep]))[1][0] for _ in range(3)]
    _, (kept_dead,) = await publish(st, [ep])
    _, (kept_pending,) = await publish(st, [ep])
    await finish(st, {**dict.fromkeys(made, "succeeded"), kept_dead: "dead"})

    nothing = as_json(await cli(st, "purge", "--succeeded-before", "1h", "--json"))
    assert (nothing["deliveries"], nothing["events"]) == (0, 0)

    later = iso(int(time.time() * 1000) + 60_000)
    result = await cli(st, "purge", "--succeeded-before", later)
    assert result.exit_code == 0, result.output
    assert "removed 3 succeeded deliveries and 3 events" in result.stdout
    assert "purging" in result.stderr
    for d in made:
        assert await st.get_delivery(d) is None
    assert (await st.get_delivery(kept_dead) or {})["status"] == "dead"
    assert (await st.get_delivery(kept_pending) or {})["status"] == "pending"

    bad = await cli(st, "purge", "--succeeded-before", "soon")
    assert bad.exit_code == 2 and "ISO 8601" in bad.stderr
    missing = await cli(st, "purge")
    assert missing.exit_code == 2 and "--succeeded-before" in missing.stderr


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize("command", [["stats"], ["dead"], ["inspect", "dlv_x"], ["endpoints"]])
async def test_redis_unreachable_is_one_clear_line(command: list[str]) -> None:
    env = {"RELAY_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "RELAY_KEY_PREFIX": "x"}
    result = await cli(env, *command)
    assert result.exit_code == 1
    assert "cannot reach Redis" in result.stderr
    assert "Traceback" not in result.output


async def test_bad_setting_is_a_usage_error() -> None:
    result = await cli({"RELAY_SHARDS": "0"}, "stats")
    assert result.exit_code == 2 and "RELAY_SHARDS" in result.stderr
