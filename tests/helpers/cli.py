"""Running the operator CLI through click's CliRunner against the test Redis."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from click.testing import CliRunner, Result

from relay.cli import main
from relay.domain.schema import endpoint_record
from relay.queue.store import Outcome, Store
from tests.helpers import publish_event


def env_for(store: Store) -> dict[str, str]:
    return {
        "RELAY_REDIS_URL": store.settings.redis_url,
        "RELAY_KEY_PREFIX": store.settings.key_prefix,
        "RELAY_SHARDS": "1",
    }


async def cli(store: Store | dict[str, str], *args: str) -> Result:
    env = store if isinstance(store, dict) else env_for(store)
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, main, list(args), env=env, prog_name="relay")


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


async def add_endpoint(store: Store, app: str = "default") -> str:
    ep = endpoint_record(
        url="http://127.0.0.1:9/hook", app=app, event_types=["order.*"], rate_limit=5.0
    )
    await store.put_endpoint(ep)
    return str(ep["id"])


async def publish(store: Store, endpoint_ids: list[str]) -> tuple[str, list[str]]:
    event_id, dlv, _ = await publish_event(store, endpoint_ids, payload=b'{"total":42}')
    return event_id, dlv


async def finish(store: Store, outcomes: dict[str, str]) -> None:
    """Claim due deliveries and record outcomes[id] ("succeeded" | "dead"); others go back."""
    sk = store.keys.shard(0)
    while True:
        res = await store.claim(sk, limit=500, lease_ms=60_000, token_prefix="t", worker="w-cli")
        if not res.items:
            return
        done, back = [], []
        for c in res.items:
            if c.id in outcomes:
                code = 200 if outcomes[c.id] == "succeeded" else 500
                entry = orjson.dumps(
                    {
                        "attempt": 1,
                        "at": int(time.time() * 1000),
                        "status_code": code,
                        "worker": "w-cli",
                        "outcome": outcomes[c.id],
                    }
                )
                done.append(Outcome(c.id, c.token, outcomes[c.id], 0, code, "", entry))
            else:
                back.append((c.id, c.token))
        if done:
            await store.record(sk, done)
        if back:
            await store.release(sk, back)
            return
