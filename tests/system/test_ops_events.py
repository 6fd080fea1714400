"""Operational events under several worker processes: each transition exactly once.

Three ``python -m relay worker`` processes share one real Redis with an operator's
endpoint in the ops app (``relay-ops``, ``endpoint.*`` and ``delivery.dead``) at a
local receiver, and three endpoints of app ``shop``:

* X answers 500 (slowly, so many sends overlap) until its breaker has opened, then 200:
  exactly one ``endpoint.failing`` (as many as the breaker's own ``opened`` counter) and
  exactly one ``endpoint.recovered``;
* Y answers 500 until it is auto-disabled (``RELAY_DISABLE_AFTER`` 2 s), then 200, and is
  re-enabled through ``PATCH /v1/endpoints/{id}``: one ``endpoint.disabled`` (auto), one
  ``endpoint.enabled``;
* D answers 429 (neutral to the breaker), so its N deliveries go dead after their two
  attempts: ``delivery.dead`` summaries whose counts add up to N, at most one per window.

Every request to the ops endpoint verifies with the ``standardwebhooks`` package.

Fails:
* with the ``endpoint.failing`` append removed from ``settle.lua`` and emitted from Python
  instead (RPUSH to the endpoint's outbox whenever a settle returns ``state == "open"``
  with ``failures >= threshold``): X produces several ``endpoint.failing`` events for
  one opening;
* with the window removed (the relay calling ``ops_cut`` with a window of 0, so a tally
  is cut whenever a relay ticks): D's summaries come less than a window apart.
The relays of several processes taking the same entries is the race that the
Idempotency-Key derived from the entry id closes; ``tests/redis/test_ops_relay.py`` shows it
deterministically (here the window is too narrow to show it).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from relay.domain.schema import EventIn, endpoint_record
from relay.publishing import Publisher
from relay.queue.store import Store
from tests.helpers import waiting

pytestmark = pytest.mark.realredis

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 3
DEAD_N = 30
WINDOW_MS = 500


async def start_workers(store: Store, redis_url: str, tmp_path: Path) -> list[Any]:
    env = {
        **os.environ,
        "RELAY_REDIS_URL": redis_url,
        "RELAY_KEY_PREFIX": store.settings.key_prefix,
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_WORKER_CONCURRENCY": "16",
        "RELAY_RETRY_SCHEDULE": "50ms",
        "RELAY_RETRY_JITTER": "0",
        "RELAY_BREAKER_THRESHOLD": "3",
        "RELAY_BREAKER_COOLDOWN": "300ms",
        "RELAY_BREAKER_COOLDOWN_MAX": "300ms",
        "RELAY_DISABLE_AFTER": "2s",
        "RELAY_OPS_DEAD_WINDOW": f"{WINDOW_MS}ms",
        "RELAY_SWEEP_INTERVAL": "1s",
        "RELAY_LOG_LEVEL": "warning",
    }
    procs = []
    for n in range(PROCESSES):
        log = (tmp_path / f"worker-{n}.log").open("wb")
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable, "-m", "relay", "worker", env=env, cwd=ROOT, stderr=log
            )
        )
    wake = store.keys.shard(0).wake
    deadline = time.monotonic() + 30
    while dict(await store.redis.pubsub_numsub(wake)).get(wake, 0) < PROCESSES:
        assert all(p.returncode is None for p in procs), "a worker process exited"
        assert time.monotonic() < deadline, "worker processes did not come up"
        await asyncio.sleep(0.05)
    return procs


async def stop_workers(procs: list[Any]) -> list[int]:
    for p in procs:
        if p.returncode is None:
            p.send_signal(signal.SIGTERM)
    try:
        return [await asyncio.wait_for(p.wait(), 30) for p in procs]
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()


def ops_events(receiver: Any, secret: str) -> list[dict[str, Any]]:
    """The ops endpoint's events, one per webhook-id, each signature verified."""
    seen: dict[str, dict[str, Any]] = {}
    for r in receiver.for_path("/ops"):
        Webhook(secret).verify(r.body, r.headers)
        seen[r.headers["webhook-id"]] = orjson.loads(r.body)
    return list(seen.values())


def of(events: list[dict[str, Any]], kind: str, endpoint_id: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind and e["data"]["endpoint_id"] == endpoint_id]


until = partial(waiting.until, within=30.0, every=0.05)


async def quiet(store: Store) -> bool:
    """Nothing left to happen: no delivery waiting, every outbox and tally empty."""
    counts = (await store.stats())["counts"]
    if any(counts.get(s) for s in ("pending", "queued", "delivering", "held")):
        return False
    keys = store.keys
    sk = keys.shard(0)
    eps = [e["id"] for e in await store.list_endpoints()]
    boxes = [keys.ops, sk.ops, *(keys.endpoint_state(e).ops for e in eps)]
    lengths = await store.ops_lengths(boxes)
    return not any(lengths) and await store.redis.zcard(sk.dead_tally_index) == 0


async def test_each_transition_is_one_signed_ops_event_across_worker_processes(
    make_store: Any, make_api: Any, receiver: Any, redis_server: Any, tmp_path: Path
) -> None:
    store = await make_store()
    api = await make_api(store)
    ops = endpoint_record(
        url=receiver.url + "/ops", app="relay-ops", event_types=["endpoint.*", "delivery.dead"]
    )
    x, y, d = (endpoint_record(url=receiver.url + p, app="shop") for p in ("/x", "/y", "/d"))
    for ep in (ops, x, y, d):
        await store.put_endpoint(ep)
    failing = {"/x": True, "/y": True}

    async def flaky(request: web.Request) -> web.Response:
        await asyncio.sleep(0.03)  # sends overlap across the workers
        return web.Response(status=500 if failing[request.path] else 200)

    receiver.responses.update({"/x": flaky, "/y": flaky, "/d": lambda _r: web.Response(status=429)})
    procs = await start_workers(store, redis_server.url, tmp_path)
    try:
        pub = Publisher(store)

        async def send(ep: dict[str, Any], n: int) -> None:
            for i in range(n):
                await pub.publish(
                    EventIn(
                        type="order.paid", payload={"i": i}, app="shop", endpoint_ids=[ep["id"]]
                    )
                )

        await asyncio.gather(send(x, 20), send(y, 5), send(d, DEAD_N))

        async def seen(kind: str, ep: dict[str, Any]) -> bool:
            return bool(of(ops_events(receiver, ops["secret"]), kind, ep["id"]))

        await until(lambda: seen("endpoint.failing", x))
        failing["/x"] = False
        await until(lambda: seen("endpoint.recovered", x))
        await until(lambda: seen("endpoint.disabled", y))
        failing["/y"] = False
        async with api("PATCH", f"/v1/endpoints/{y['id']}", json={"enabled": True}) as r:
            assert r.status == 200
        await until(lambda: seen("endpoint.enabled", y))
        await until(lambda: quiet(store), within=60)
        # the ops events' own deliveries have gone out too (quiet: none pending)
    finally:
        codes = await stop_workers(procs)
    assert codes == [0] * PROCESSES, [(tmp_path / f"worker-{n}.log").read_text() for n in range(3)]

    events = ops_events(receiver, ops["secret"])
    assert all(e["data"]["app"] == "shop" for e in events)
    breaker_x = (await store.breaker_states([x["id"]]))[x["id"]]
    assert int(breaker_x["opened"]) == 1  # X's breaker opened once ...
    assert len(of(events, "endpoint.failing", x["id"])) == 1  # ... and said so once
    assert len(of(events, "endpoint.recovered", x["id"])) == 1
    assert breaker_x["state"] == "closed"

    disabled = of(events, "endpoint.disabled", y["id"])
    assert len(disabled) == 1
    assert disabled[0]["data"]["reason"].startswith("auto-disabled")
    assert len(of(events, "endpoint.enabled", y["id"])) == 1
    assert (await store.get_endpoint(y["id"]) or {})["enabled"] is True

    for ep in (d, x):  # every dead letter in exactly one summary
        dead = await store.list_deliveries(status="dead", endpoint_id=ep["id"], limit=500)
        dead_ids = {r["id"] for r in dead[0]}
        summaries = sorted(
            of(events, "delivery.dead", ep["id"]), key=lambda e: e["data"]["window_start"]
        )
        assert sum(s["data"]["count"] for s in summaries) == len(dead_ids)
        for s in summaries:
            assert {s["data"]["first_id"], s["data"]["last_id"]} <= dead_ids
            assert s["data"]["first_at"] <= s["data"]["last_at"] <= s["data"]["at"]
        # at most one summary per window: the next tally opens after this one was cut
        starts = [s["data"]["window_start"] for s in summaries]
        assert all(b - a >= WINDOW_MS for a, b in itertools.pairwise(starts))
    dead_d = (await store.list_deliveries(status="dead", endpoint_id=d["id"], limit=500))[0]
    assert len(dead_d) == DEAD_N
    assert sum(s["data"]["count"] for s in of(events, "delivery.dead", d["id"])) == DEAD_N
    assert not [e for e in events if e["data"]["endpoint_id"] == ops["id"]]  # none about itself

    # exactly once in Redis too: one event per outbox entry id, none twice
    ids = Counter(e["data"]["ops_id"] for e in events)
    assert [i for i, n in ids.items() if n > 1] == []
    # payloads are small and hold no secret or URL
    for e in events:
        text = orjson.dumps(e["data"]).decode()
        assert "whsec_" not in text and receiver.url not in text
