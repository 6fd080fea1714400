"""Replica-acknowledged writes (``RELAY_ACK_REPLICAS``, ``RELAY_ACK_TIMEOUT``).

A primary and a replica started here (``--replicaof``). With RELAY_ACK_REPLICAS=1 a
publish is 201 only once the replica has the event (read on the replica right after the
answer); with the replica frozen (SIGSTOP) the publish, an endpoint create and a replay
are 503 ``replication_timeout`` after about RELAY_ACK_TIMEOUT; once it runs again the
retry with the same Idempotency-Key answers the first event (200, the idempotent hit)
and exactly one event exists, on both. With RELAY_ACK_REPLICAS=0 no WAIT is sent
(INFO commandstats). Worker writes never wait: the worker runs with the replica frozen.

With the script calls sent without their WAIT, every test here but ``test_settings``
fails (answered while the replica is frozen; ``assert 201 == 503``; ``assert 0 == 1``
WAIT calls). The idempotent hit's own write (``SET ... KEEPTTL`` in ``publish.lua``) is
not shown necessary here: on Redis 7.0 a WAIT on a connection whose own writes are all
replicated still waits for the frozen replica, so the retry through a second API
replica is 503 with or without that write.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web

from relay.delivery.worker import Worker
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer
from relay.settings import Settings, SettingsError
from tests.helpers import make_settings

pytestmark = pytest.mark.realredis

ACK_TIMEOUT = 0.5


class Pair:
    def __init__(self, primary: RedisServer, replica: RedisServer) -> None:
        self.primary = primary
        self.replica = replica
        self.p = redis.Redis(port=primary.port or 0, decode_responses=True)
        self.r = redis.Redis(port=replica.port or 0, decode_responses=True)

    def freeze(self) -> None:
        os.kill(self.replica.pid or 0, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.replica.pid or 0, signal.SIGCONT)

    def wait_synced(self, timeout: float = 10.0) -> None:
        """The replica's link is up and the primary lists it online."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            link = self.r.info("replication").get("master_link_status")
            if link == "up" and self.p.info("replication").get("connected_slaves", 0) >= 1:
                if self.p.execute_command("WAIT", 1, 1000) >= 1:
                    return
            time.sleep(0.05)
        raise AssertionError("replica never came up")

    def wait_calls(self) -> int:
        return int(self.p.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    base: Path = tmp_path_factory.mktemp("replication")
    primary = RedisServer(data_dir=base / "primary", appendonly=False)
    primary.start()
    replica = RedisServer(
        data_dir=base / "replica",
        appendonly=False,
        extra_args=("--replicaof", "127.0.0.1", str(primary.port)),
    )
    replica.start()
    both = Pair(primary, replica)
    try:
        both.wait_synced()
        yield both
    finally:
        both.thaw()
        replica.stop()
        primary.stop()


@pytest.fixture
async def stores(pair: Pair) -> Any:
    """``stores(**settings)``: a started Store on the primary, closed after the APIs on it
    (request this fixture before ``make_api``)."""
    made: list[Store] = []

    async def factory(**overrides: Any) -> Store:
        settings = make_settings(redis_url=pair.primary.url, **overrides)
        store = Store(connect(settings), settings)
        await store.start()
        made.append(store)
        return store

    yield factory
    pair.thaw()
    for store in made:
        await store.close()


@pytest.fixture
async def acked(pair: Pair, stores: Any, make_api: Any) -> Any:
    """A Store (RELAY_ACK_REPLICAS=1) on the primary, and an API on it."""
    store = await stores(ack_replicas=1, ack_timeout=ACK_TIMEOUT)
    pair.thaw()
    pair.wait_synced()
    try:
        yield store, await make_api(store)
    finally:
        pair.thaw()


class Answer:
    def __init__(self, status: int, data: Any, headers: Any) -> None:
        self.status, self.data, self.headers = status, data, headers


async def call(api: Any, method: str, path: str, **kw: Any) -> Answer:
    async with api(method, path, **kw) as resp:
        data = await resp.json() if resp.content_type == "application/json" else None
        return Answer(resp.status, data, resp.headers)


def event_key(store: Store, event_id: str) -> str:
    sk = store.shard_keys_for(event_id)
    assert sk is not None
    return sk.event(event_id)


async def test_publish_is_on_the_replica_when_answered(
    pair: Pair, acked: Any, stores: Any, make_api: Any
) -> None:
    store, api = acked
    # the replica away for 0.4 s (under a 3 s RELAY_ACK_TIMEOUT): no answer until it has
    # the event (without the WAIT: 201 at once, while the replica cannot have it)
    patient = await make_api(
        await stores(ack_replicas=1, ack_timeout=3.0, key_prefix=store.settings.key_prefix)
    )
    pair.freeze()
    started = time.monotonic()
    pending = asyncio.ensure_future(
        call(patient, "POST", "/v1/events", json={"type": "t", "payload": "late"})
    )
    await asyncio.sleep(0.4)
    assert not pending.done(), "answered while the replica was frozen"
    pair.thaw()
    late = await pending
    assert late.status == 201, late.data
    assert 0.4 <= time.monotonic() - started < 3.0
    assert pair.r.exists(event_key(store, late.data["id"]))
    ep = await call(api, "POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/x"})
    assert ep.status == 201
    assert pair.r.hexists(store.keys.endpoints, ep.data["id"])  # on the replica already
    for n in range(20):
        resp = await call(api, "POST", "/v1/events", json={"type": "t", "payload": {"n": n}})
        assert resp.status == 201, resp.data
        event_id = resp.data["id"]
        assert pair.r.exists(event_key(store, event_id)), f"event {n} not on the replica"
        dlv = resp.data["deliveries"][0]["id"]
        sk = store.shard_keys_for(dlv)
        # layout v3: a delivery as published is its due entry (no hash until claimed)
        assert sk is not None and pair.r.zscore(sk.due, dlv) is not None


async def test_frozen_replica_503_then_retry_answers_the_same_event(
    pair: Pair, acked: Any, stores: Any, make_api: Any
) -> None:
    store, api = acked
    prefix = store.settings.key_prefix
    ep = await call(api, "POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/x"})
    assert ep.status == 201
    event = {"type": "order.paid", "payload": {"order": 1}}
    key = {"Idempotency-Key": "ack-retry-1"}
    # another API replica whose pooled connection made (replicated) writes of its own
    other = await make_api(await stores(ack_replicas=1, ack_timeout=0.1, key_prefix=prefix))
    made = await call(other, "POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/y"})
    assert made.status == 201
    pair.freeze()
    started = time.monotonic()
    first = await call(api, "POST", "/v1/events", json=event, headers=key)
    took = time.monotonic() - started
    assert first.status == 503, first.data
    assert first.data["error"] == "replication_timeout"
    assert first.headers["Retry-After"] == "1"
    assert ACK_TIMEOUT * 0.8 <= took < ACK_TIMEOUT + 1.0, took
    # the client retries while the replica is still away: still not acknowledged, also
    # through the other API replica (its connection's last write is replicated already:
    # its WAIT covers the first answer's write only because the hit path writes too)
    again = await call(api, "POST", "/v1/events", json=event, headers=key)
    assert again.status == 503 and again.data["error"] == "replication_timeout"
    hit = await call(other, "POST", "/v1/events", json=event, headers=key)
    assert hit.status == 503 and hit.data["error"] == "replication_timeout", hit.data

    pair.thaw()
    retry = await call(api, "POST", "/v1/events", json=event, headers=key)
    assert retry.status == 200, retry.data  # the idempotent hit: the first answer
    sk = store.keys.shard(0)
    kept = list(pair.p.scan_iter(match=sk.event_prefix + "*"))
    assert len(kept) == 1  # exactly one event
    assert list(pair.r.scan_iter(match=sk.event_prefix + "*")) == kept  # the replica has it now
    event_id = kept[0].removeprefix(sk.event_prefix)
    assert retry.data["id"] == event_id
    assert pair.r.exists(event_key(store, event_id))


async def test_frozen_replica_endpoint_create_and_replay_503(
    pair: Pair, acked: Any, receiver: Any
) -> None:
    store, api = acked
    receiver.responses["/gone"] = lambda request: web.Response(status=410)
    ep = await call(api, "POST", "/v1/endpoints", json={"url": receiver.url + "/gone"})
    assert ep.status == 201
    published = await call(api, "POST", "/v1/events", json={"type": "t", "payload": 1})
    assert published.status == 201
    dlv = published.data["deliveries"][0]["id"]

    pair.freeze()
    # worker writes (claim, outcome) wait for no replica: it delivers with the replica away
    await asyncio.wait_for(Worker(store, store.settings).run(asyncio.Event(), burst=True), 10)
    assert (await store.get_delivery(dlv) or {})["status"] == "dead"

    started = time.monotonic()
    created = await call(api, "POST", "/v1/endpoints", json={"url": receiver.url + "/y"})
    assert created.status == 503 and created.data["error"] == "replication_timeout"
    assert time.monotonic() - started < ACK_TIMEOUT + 1.0
    replayed = await call(api, "POST", f"/v1/deliveries/{dlv}/replay")
    assert replayed.status == 503 and replayed.data["error"] == "replication_timeout"
    rotated = await call(api, "POST", f"/v1/endpoints/{ep.data['id']}/rotate-secret")
    assert rotated.status == 503 and rotated.data["error"] == "replication_timeout"
    pair.thaw()


async def test_no_wait_sent_without_ack_replicas(pair: Pair, stores: Any, make_api: Any) -> None:
    store = await stores()
    assert store.settings.ack_replicas == 0
    api = await make_api(store)
    pair.p.config_resetstat()
    ep = await call(api, "POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/x"})
    assert ep.status == 201
    key = {"Idempotency-Key": "no-wait"}
    for _ in range(2):
        resp = await call(api, "POST", "/v1/events", json={"type": "t", "payload": 1}, headers=key)
        assert resp.status in (200, 201)
    assert pair.wait_calls() == 0
    # the counter does count: the same publish through RELAY_ACK_REPLICAS=1 sends one WAIT
    acking = await make_api(await stores(ack_replicas=1, key_prefix=store.settings.key_prefix))
    pair.p.config_resetstat()
    resp = await call(acking, "POST", "/v1/events", json={"type": "t", "payload": 1}, headers=key)
    assert resp.status == 200
    assert pair.wait_calls() == 1


async def test_a_confirmed_call_after_script_flush_loads_the_script(pair: Pair, acked: Any) -> None:
    """The script and its WAIT in one pipeline: NOSCRIPT there loads the script (the
    helper a claim's undecoded call uses too) and sends both again."""
    store, api = acked
    pair.p.script_flush()
    resp = await call(api, "POST", "/v1/events", json={"type": "t", "payload": 1})
    assert resp.status == 201, resp.data
    assert pair.p.script_exists(store.scripts.publish.sha) == [True]
    assert pair.r.exists(event_key(store, resp.data["id"]))


def test_settings() -> None:
    s = Settings.from_env({"RELAY_ACK_REPLICAS": "2", "RELAY_ACK_TIMEOUT": "250ms"})
    assert (s.ack_replicas, s.ack_timeout) == (2, 0.25)
    d = Settings.from_env({})
    assert (d.ack_replicas, d.ack_timeout) == (0, 1.0)
    on_cluster = Settings.from_env({"RELAY_ACK_REPLICAS": "1", "RELAY_REDIS_CLUSTER": "1"})
    assert (on_cluster.ack_replicas, on_cluster.redis_cluster) == (1, True)
    for env in (
        {"RELAY_ACK_REPLICAS": "-1"},
        {"RELAY_ACK_REPLICAS": "x"},
        {"RELAY_ACK_TIMEOUT": "0"},
        {"RELAY_ACK_TIMEOUT": "10s"},
    ):
        with pytest.raises(SettingsError):
            Settings.from_env(env)


async def test_resuming_held_deliveries_is_confirmed_too(pair: Pair, acked: Any) -> None:
    """Re-enabling an endpoint resumes its held deliveries (``resume.lua``): a client's
    write, confirmed like the endpoint write before it, so a failover right after the
    answer cannot leave them parked behind an enabled endpoint. One WAIT for the
    endpoint, one per shard for the resume; fails with the resume unconfirmed
    (``assert 1 == 2``)."""
    store, api = acked
    ep = await call(api, "POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/h"})
    assert ep.status == 201
    eid = ep.data["id"]
    published = await call(api, "POST", "/v1/events", json={"type": "t", "payload": 1})
    assert published.status == 201
    dlv = published.data["deliveries"][0]["id"]
    disabled = await call(api, "PATCH", f"/v1/endpoints/{eid}", json={"enabled": False})
    assert disabled.status == 200
    # the worker finds the endpoint disabled and parks the delivery (it sends nothing)
    await asyncio.wait_for(Worker(store, store.settings).run(asyncio.Event(), burst=True), 10)
    assert (await store.get_delivery(dlv) or {})["status"] == "held"

    pair.p.config_resetstat()
    enabled = await call(api, "PATCH", f"/v1/endpoints/{eid}", json={"enabled": True})
    assert enabled.status == 200
    assert (await store.get_delivery(dlv) or {})["status"] == "pending"
    assert pair.wait_calls() == 1 + store.settings.shards
