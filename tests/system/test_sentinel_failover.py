"""Redis Sentinel: relay finds the primary through Sentinel and follows a failover.

A real topology the test starts (``tests/helpers/sentinel.py``: 1 primary, 2 replicas, 3
Sentinels, every node ``appendfsync always``). An API and a worker (each with its own
client from :func:`relay.queue.base.connect`) deliver to a local receiver while test
clients publish with an Idempotency-Key each; mid-stream the primary is SIGKILLed (after
``WAIT 2 1000`` confirmed the replicas have everything acknowledged so far, since
without ``RELAY_ACK_REPLICAS`` the last acknowledged writes could be lost otherwise).
Sentinel promotes a replica; with no restart, publishing resumes (503s during the
failover are retried with the same key), every acknowledged event is delivered, events
acknowledged after the kill exactly once, and a duplicate only for an event first
delivered before the failover was over (a claim or outcome written to the old primary
after the WAIT). The worker's wake subscription and the API's endpoint-change
subscription are found on the new primary.

Fails with ``connect()`` ignoring ``RELAY_REDIS_SENTINELS`` (the client dials the URL's
host and port, the first primary): after the kill every publish answers 503 until the
deadline (``publishing did not resume``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from relay.delivery.worker import Worker
from relay.queue.store import Store, connect
from relay.redisproc import HOST, redis_binary
from relay.settings import Settings, SettingsError
from tests.helpers import Receiver, make_settings
from tests.helpers.sentinel import SentinelTopology

pytestmark = pytest.mark.realredis

BEFORE = 120  # events acknowledged before the kill
AFTER = 120  # events published from the kill on
CLIENTS = 8


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[SentinelTopology]:
    if redis_binary() is None:
        pytest.fail("redis-server not found on PATH", pytrace=False)
    with SentinelTopology(tmp_path) as topo:
        yield topo


class Publisher:
    """Test clients: POST /v1/events with an Idempotency-Key, retried until 201/200."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.acked: dict[str, float] = {}  # event id -> when acknowledged
        self.unavailable = 0

    async def one(self, n: int, deadline: float) -> None:
        key = f"k-{n}-{uuid.uuid4().hex[:6]}"
        body = {"type": "order.paid", "payload": {"n": n}}
        while time.monotonic() < deadline:
            try:
                async with self.api(
                    "POST", "/v1/events", json=body, headers={"Idempotency-Key": key}
                ) as resp:
                    if resp.status in (200, 201):
                        self.acked[(await resp.json())["id"]] = time.monotonic()
                        return
                    assert resp.status == 503, await resp.text()
                    self.unavailable += 1
            except TimeoutError:
                self.unavailable += 1
            await asyncio.sleep(0.05)
        raise AssertionError(f"publishing did not resume: event {n} never acknowledged")

    async def run(self, numbers: range, within: float) -> None:
        deadline = time.monotonic() + within
        queue = list(numbers)

        async def client() -> None:
            while queue:
                await self.one(queue.pop(0), deadline)

        await asyncio.gather(*(client() for _ in range(CLIENTS)))


def _numsub(port: int, channel: str) -> int:
    with redis.Redis(HOST, port, decode_responses=True, socket_timeout=1) as c:
        return int(dict(c.pubsub_numsub(channel))[channel])


async def test_relay_follows_a_sentinel_failover_with_no_restart(
    topology: SentinelTopology, receiver: Receiver, make_api: Any
) -> None:
    first = topology.primary()
    settings = make_settings(
        redis_url=first.url,  # host and port ignored: Sentinel names the primary
        redis_sentinels=tuple(topology.sentinels),
        lease_seconds=5.0,
        retry_schedule=(0.2, 0.5, 1.0),
    )
    api_store = Store(connect(settings), settings)
    worker_store = Store(connect(settings), settings)
    await api_store.start()
    await worker_store.start()
    stop = asyncio.Event()
    task = None
    try:
        api = await make_api(api_store)
        async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/hook"}) as resp:
            assert resp.status == 201, await resp.text()
        task = asyncio.create_task(Worker(worker_store, settings).run(stop))
        pub = Publisher(api)
        await pub.run(range(BEFORE), within=20.0)
        # everything acknowledged so far is on both replicas: the kill can lose none of it
        assert await asyncio.to_thread(topology.replicas_have_everything) == 2
        killed_at = time.monotonic()
        old = await asyncio.to_thread(topology.kill_primary)
        failover = asyncio.create_task(asyncio.to_thread(topology.wait_failover, old.port))
        await pub.run(range(BEFORE, BEFORE + AFTER), within=25.0)
        new_port = await failover
        failover_done = time.monotonic()
        assert new_port != old.port

        async def all_received() -> bool:
            seen = {r.headers["webhook-id"] for r in receiver.requests}
            return set(pub.acked) <= seen

        deadline = time.monotonic() + 20.0
        while not await all_received():
            assert time.monotonic() < deadline, "not every acknowledged event was delivered"
            await asyncio.sleep(0.05)

        # the subscriptions followed the primary (their pools reconnect through Sentinel)
        wake = worker_store.keys.shard(0).wake
        changed = api_store.keys.endpoints_changed
        for channel in (wake, changed):
            end = time.monotonic() + 10.0
            while await asyncio.to_thread(_numsub, new_port, channel) < 1:
                assert time.monotonic() < end, f"nobody subscribed to {channel} on the new primary"
                await asyncio.sleep(0.1)
    finally:
        stop.set()
        if task is not None:
            await asyncio.wait_for(task, 15.0)
        await api_store.close()
        await worker_store.close()

    received = Counter(r.headers["webhook-id"] for r in receiver.requests)
    first_seen: dict[str, float] = {}
    for r in receiver.requests:
        first_seen.setdefault(r.headers["webhook-id"], r.at)
    assert set(pub.acked) <= set(received)
    after_kill = {e for e, at in pub.acked.items() if at >= killed_at}
    assert after_kill, "no event was acknowledged after the kill"
    assert [e for e in after_kill if received[e] != 1] == []
    loop_now, mono_now = asyncio.get_running_loop().time(), time.monotonic()
    done_loop = failover_done - mono_now + loop_now  # receiver times are loop times
    unexplained = [e for e, n in received.items() if n > 1 and first_seen[e] >= done_loop]
    assert unexplained == []


def test_sentinel_settings_from_the_environment() -> None:
    env = {
        "RELAY_REDIS_SENTINELS": "10.0.0.1:26379, sentinel-b:26380,sentinel-c",
        "RELAY_REDIS_SENTINEL_MASTER": "mymaster",
        "RELAY_REDIS_SENTINEL_PASSWORD": "s3cret",
        "RELAY_REDIS_URL": "redis://app:pw@ignored:1/3",
    }
    s = Settings.from_env(env)
    assert s.redis_sentinels == (("10.0.0.1", 26379), ("sentinel-b", 26380), ("sentinel-c", 26379))
    assert s.redis_sentinel_master == "mymaster"
    assert "s3cret" not in repr(s) and "pw" not in s.redis_shown
    assert "Sentinel 10.0.0.1:26379" in s.redis_shown
    assert s.redis_url_given  # `relay dev` starts no private Redis beside Sentinel
    assert Settings.from_env({}).redis_sentinel_master == "relay"
    for bad in ({"RELAY_REDIS_SENTINELS": "host:port"}, {"RELAY_REDIS_SENTINELS": "h:0"}):
        with pytest.raises(SettingsError, match="RELAY_REDIS_SENTINELS"):
            Settings.from_env(bad)
    with pytest.raises(SettingsError, match="RELAY_REDIS_CLUSTER"):
        Settings.from_env({"RELAY_REDIS_SENTINELS": "h:1", "RELAY_REDIS_CLUSTER": "1"})


async def test_connect_through_sentinel_keeps_the_url_options() -> None:
    """db, username, password and ?socket_timeout= come from RELAY_REDIS_URL; the host
    and port from Sentinel (nothing is dialled until a command runs)."""
    settings = make_settings(
        redis_url="redis://app:pw@ignored:1/3?socket_timeout=2",
        redis_sentinels=(("127.0.0.1", 1),),
        redis_sentinel_master="mymaster",
        redis_sentinel_password="sp",
    )
    client = connect(settings)
    try:
        pool = client.connection_pool
        kw = pool.connection_kwargs
        assert pool.service_name == "mymaster" and pool.is_master
        assert (kw["db"], kw["username"], kw["password"]) == (3, "app", "pw")
        assert kw["decode_responses"] is True and kw["socket_timeout"] == 2.0
        assert "host" not in kw or kw["host"] != "ignored"
        assert pool.sentinel_manager.sentinel_kwargs["password"] == "sp"
        assert pool.max_connections == 256
    finally:
        await client.aclose()


async def test_masterdown_closes_the_connection_for_a_fresh_look_up(tmp_path: Path) -> None:
    """A node that answers MASTERDOWN is not the primary now: like READONLY (which
    redis-py already handles), the answer becomes a connection error with the
    connection closed, so the client's retry asks Sentinel again (unguarded: the
    MasterDownError comes back and the connection stays on that node)."""
    from relay.queue.base import _SentinelConnection
    from relay.redisproc import RedisServer, free_port

    stale = RedisServer(data_dir=tmp_path, appendonly=False)
    stale.start()
    with redis.Redis(HOST, stale.port) as c:  # a replica of nothing, serving no stale data
        c.config_set("replica-serve-stale-data", "no")
        c.replicaof(HOST, free_port())
    asked = []

    class Pool:  # what the connection asks of its SentinelConnectionPool
        is_master = True
        check_connection = False

        async def get_master_address(self) -> tuple[str, int | None]:
            asked.append(stale.port)
            return HOST, stale.port

    conn = _SentinelConnection(connection_pool=Pool())
    try:
        await conn.connect()
        await conn.send_command("GET", "k")
        with pytest.raises(redis.ConnectionError, match="MASTERDOWN"):
            await conn.read_response()
        assert not conn.is_connected
        await conn.connect()  # the next connection asks for the primary again
        assert asked == [stale.port, stale.port]
    finally:
        await conn.disconnect()
        stale.stop()
