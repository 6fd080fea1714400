"""Why is it waiting? A pending or held delivery says why it is not going out
now, on the API's read and list, the dashboard's read and ``relay inspect``; an endpoint
whose breaker cooldown has passed reads ``half_open``, not ``open``; rotation says until
when the old secret signs.

The delivery read's ``waiting`` field, the endpoint read's ``half_open`` after the
cooldown and the rotate answer's expiry are each asserted here.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from relay.cli import main
from relay.domain.schema import endpoint_record
from relay.endpoints.health import Health, waiting_reason
from relay.queue.store import Store
from tests.helpers import publish_event

pytestmark = pytest.mark.realredis

NOW = 1_800_000_000_000


async def get(api: Any, path: str, status: int = 200) -> Any:
    async with api("GET", path) as r:
        assert r.status == status, await r.text()
        return await r.json()


async def setup(make_store: Any, make_api: Any, **endpoint: Any) -> tuple[Store, Any, str, str]:
    store = await make_store(breaker_threshold=2, breaker_cooldown=30.0)
    api = await make_api(store)
    ep = endpoint_record(url="http://127.0.0.1:9/hook", app="default", **endpoint)
    await store.put_endpoint(ep)
    _, (delivery,), _ = await publish_event(store, [ep["id"]], payload=b"{}")
    return store, api, ep["id"], delivery


async def test_breaker_open_is_the_reason_everywhere(make_store: Any, make_api: Any) -> None:
    store, api, ep, d = await setup(make_store, make_api)
    fresh = await get(api, f"/v1/deliveries/{d}")
    assert fresh["waiting"] is None  # due now: nothing holds it

    # two failures in a row (threshold 2): the breaker opens for 30 s
    await Health(store).settle(ep, [("t1", "0"), ("t2", "0")])
    breaker = (await get(api, f"/v1/endpoints/{ep}"))["breaker"]
    assert breaker["state"] == "open"
    expected = {"reason": "breaker_open", "until": breaker["open_until"]}

    assert (await get(api, f"/v1/deliveries/{d}"))["waiting"] == expected
    listed = await get(api, f"/v1/deliveries?endpoint_id={ep}")
    assert [r["waiting"] for r in listed["data"]] == [expected]
    assert (await get(api, f"/v1/ui/deliveries/{d}"))["delivery"]["waiting"] == expected
    ui_list = await get(api, "/v1/ui/deliveries")
    assert [r["waiting"] for r in ui_list["data"]] == [expected]

    env = {
        "RELAY_REDIS_URL": store.settings.redis_url,
        "RELAY_KEY_PREFIX": store.settings.key_prefix,
    }
    runner = CliRunner()
    table = await asyncio.to_thread(runner.invoke, main, ["inspect", d], env=env)
    assert table.exit_code == 0, table.output
    assert any(
        line.split()[:2] == ["waiting", "breaker_open"] for line in table.stdout.splitlines()
    )
    data = await asyncio.to_thread(runner.invoke, main, ["inspect", d, "--json"], env=env)
    assert orjson.loads(data.stdout)["waiting"] == expected


async def test_cooldown_passed_reads_half_open(make_store: Any, make_api: Any) -> None:
    store, api, ep, d = await setup(make_store, make_api)
    await Health(store).settle(ep, [("t1", "0"), ("t2", "0")])
    breaker_key = store.keys.endpoint_state(ep).breaker
    await store.redis.hset(breaker_key, "open_until", int(time.time() * 1000) - 1000)
    assert await store.redis.hget(breaker_key, "state") == "open"  # as stored
    shown = await get(api, f"/v1/endpoints/{ep}")
    assert shown["breaker"]["state"] == "half_open"  # as it acts: the next send probes
    listed = await get(api, "/v1/endpoints")
    assert [e["breaker"]["state"] for e in listed["data"]] == ["half_open"]
    assert (await get(api, f"/v1/deliveries/{d}"))["waiting"] is None  # due: the probe


async def test_held_reads_endpoint_disabled(make_store: Any, make_api: Any) -> None:
    store, api, ep, d = await setup(make_store, make_api)
    sk = store.keys.shard(0)
    claim = await store.claim(sk, limit=10, lease_ms=60_000, token_prefix="t", worker="w")
    endpoint = await store.get_endpoint(ep) or {}
    await store.put_endpoint({**endpoint, "enabled": False})
    await Health(store).hold(sk, ep, [(c.id, c.token) for c in claim.items])
    got = await get(api, f"/v1/deliveries/{d}")
    assert got["status"] == "held"
    assert got["waiting"] == {"reason": "endpoint_disabled", "until": None}


async def test_rotation_says_until_when_the_old_secret_signs(
    make_store: Any, make_api: Any
) -> None:
    _, api, ep, _ = await setup(make_store, make_api)
    assert (await get(api, f"/v1/endpoints/{ep}"))["previous_secret_expires_at"] is None
    before = int(time.time() * 1000)
    async with api("POST", f"/v1/endpoints/{ep}/rotate-secret") as r:
        assert r.status == 200
        rotated = await r.json()
    day = 24 * 3600 * 1000
    assert before + day <= rotated["previous_secret_expires_at"] <= before + day + 60_000
    shown = await get(api, f"/v1/endpoints/{ep}")
    assert shown["previous_secret_expires_at"] == rotated["previous_secret_expires_at"]


def _pending(**fields: Any) -> dict[str, Any]:
    return {"status": "pending", "attempts": 0, "next_attempt_at": NOW + 60_000, **fields}


@pytest.mark.parametrize(
    ("delivery", "endpoint", "state", "reason"),
    [
        (_pending(), {"max_in_flight": 2}, ({}, 0, 2), "in_flight_cap"),
        (_pending(), {"rate_limit": 5.0}, ({}, NOW + 500, 0), "rate_limited"),
        (_pending(attempts=1, last_status_code=500), {}, ({}, 0, 0), "retry_backoff"),
        (_pending(), {}, ({}, 0, 0), "scheduled"),
        (_pending(), {}, ({"state": "half_open"}, 0, 0), "breaker_probing"),
        (_pending(), {"enabled": False}, ({}, 0, 0), "endpoint_disabled"),
        (_pending(), None, None, "endpoint_deleted"),
        # a retry due an hour after the breaker reopens waits for its schedule
        (
            _pending(attempts=1, last_error="timeout", next_attempt_at=NOW + 3_600_000),
            {},
            ({"state": "open", "open_until": str(NOW + 30_000)}, 0, 0),
            "retry_backoff",
        ),
    ],
)
def test_waiting_reasons(
    delivery: dict[str, Any], endpoint: dict[str, Any] | None, state: Any, reason: str
) -> None:
    got = waiting_reason(delivery, endpoint, state, NOW)
    assert got is not None and got["reason"] == reason


def test_not_waiting() -> None:
    assert waiting_reason(_pending(next_attempt_at=NOW - 1), {}, ({}, 0, 0), NOW) is None
    for status in ("delivering", "succeeded", "dead"):
        assert waiting_reason(_pending(status=status), {}, ({}, 0, 0), NOW) is None
