"""Shared fixtures.

* ``redis_server``: one real ``redis-server`` per test session (free port, temp dir),
  from the binary when there is one, else testcontainers when Docker answers; with
  neither, the tests that need it FAIL saying what to install (never a silent skip).
* ``make_store`` / ``store``: a :class:`relay.queue.store.Store` on that server, each test in
  its own key prefix (no flushing), so tests never see each other's keys.
* ``fake_store``: the same Store on fakeredis, which runs the same Lua scripts.
* ``receiver``: a local aiohttp receiver on 127.0.0.1 that records every request.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from aiohttp import web

from relay.domain import ids, signing
from relay.queue.store import Store, connect
from relay.redisproc import RedisCluster, RedisServer, SlotControl, free_port, redis_binary
from relay.settings import Settings

INSTALL_HINT = (
    "no redis-server binary and no Docker for testcontainers: install Redis "
    "(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)"
)


@dataclass
class RedisHandle:
    url: str
    server: RedisServer | None = None


def _testcontainers_redis() -> tuple[str, Any] | None:
    try:
        from testcontainers.redis import RedisContainer  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        container = RedisContainer("redis:7").start()
    except Exception:
        return None
    host = container.get_container_host_ip()
    port = container.get_exposed_port(6379)
    return f"redis://{host}:{port}/0", container


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisHandle]:
    if redis_binary() is not None:
        data = tmp_path_factory.mktemp("redis")
        server = RedisServer(data_dir=data, appendonly=True, appendfsync="everysec")
        server.start()
        try:
            yield RedisHandle(server.url, server)
        finally:
            server.stop()
        return
    found = _testcontainers_redis()
    if found is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    url, container = found
    try:
        yield RedisHandle(url)
    finally:
        container.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A private PostgreSQL (tests/pg.py) for the session; FAILS when none can start."""
    from pg import INSTALL_HINT as PG_HINT
    from pg import PgServer, pg_bindir

    bindir = pg_bindir()
    if bindir is None:
        pytest.fail(PG_HINT, pytrace=False)
    server = PgServer(bindir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


class ClusterHandle(SlotControl):
    """The ``redis_cluster`` fixture: 3 masters, shard tags {s0} {s1} {s2} on 3 nodes.

    Slot control for tests comes from :class:`relay.redisproc.SlotControl`; its clients
    are synchronous: call them through ``asyncio.to_thread`` beside a running worker.
    """

    TAGS = ("{s0}", "{s1}", "{s2}")

    def __init__(self, cluster: RedisCluster) -> None:
        super().__init__(cluster)
        self.url = cluster.url

    def spread_shards(self) -> None:
        self.spread(self.TAGS)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """A real 3-master Redis Cluster for the session (``redis-server --cluster-enabled``)."""
    if redis_binary() is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    cluster = RedisCluster(data_dir=tmp_path_factory.mktemp("cluster"), masters=3)
    cluster.start()
    handle = None
    try:
        handle = ClusterHandle(cluster)
        handle.spread_shards()
        yield handle
    finally:
        if handle is not None:
            handle.close()
        cluster.stop()


@pytest.fixture
async def cluster_store(redis_cluster: ClusterHandle) -> AsyncIterator[StoreFactory]:
    """``await cluster_store(**settings)``: a started Store on ``redis_cluster``, 3 shards."""
    made: list[Store] = []
    prefix = "c" + uuid.uuid4().hex[:10]

    async def factory(**overrides: Any) -> Store:
        overrides.setdefault("key_prefix", prefix)
        overrides.setdefault("shards", 3)
        settings = make_settings(redis_url=redis_cluster.url, redis_cluster=True, **overrides)
        store = Store(connect(settings), settings)
        await store.start()
        made.append(store)
        return store

    yield factory
    for s in made:
        await s.close()


def make_settings(**overrides: Any) -> Settings:
    """Settings for tests: own key prefix, loopback allowed, fast retries."""
    values: dict[str, Any] = {
        "key_prefix": "t" + uuid.uuid4().hex[:10],
        "allow_private_networks": True,
        "retry_schedule": (0.05, 0.1),
        "retry_jitter": 0.0,
        "http_timeout": 5.0,
        "lease_seconds": 5.0,
        "api_tokens": ("test-token",),
        "shutdown_grace": 5.0,
        "worker_id": "w-" + uuid.uuid4().hex[:6],
    }
    values.update(overrides)
    return Settings(**values)


StoreFactory = Callable[..., Store]


@pytest.fixture
async def make_store(redis_server: RedisHandle) -> AsyncIterator[StoreFactory]:
    """``make_store(**settings)`` -> a started Store on the session's real Redis."""
    made: list[Store] = []
    prefix = "t" + uuid.uuid4().hex[:10]

    async def factory(**overrides: Any) -> Store:
        overrides.setdefault("key_prefix", prefix)
        settings = make_settings(redis_url=redis_server.url, **overrides)
        store = Store(connect(settings), settings)
        await store.start()
        made.append(store)
        return store

    yield factory  # type: ignore[misc]
    for s in made:
        await s.close()


@pytest.fixture
async def store(make_store: Any) -> Store:
    return await make_store()


@pytest.fixture
async def fake_store() -> AsyncIterator[Store]:
    settings = make_settings()
    store = Store(
        fakeredis.FakeAsyncRedis(decode_responses=True, encoding_errors="surrogateescape"), settings
    )
    await store.start()
    yield store
    await store.close()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """Records requests; ``responses[path]`` decides the answer (default 200)."""

    url: str
    requests: list[Received] = field(default_factory=list)
    responses: dict[str, Callable[[web.Request], Any]] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def for_path(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    async def wait_for(self, count: int, within: float = 10.0, path: str | None = None) -> None:
        async def enough() -> None:
            while len(self.for_path(path) if path else self.requests) < count:
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(enough(), within)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver(url="")
    loop = asyncio.get_running_loop()

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        rec.requests.append(Received(request.path, dict(request.headers), body, loop.time()))
        rec.arrived.set()
        answer = rec.responses.get(request.path)
        if answer is None:
            return web.Response(text="ok")
        result = answer(request)
        if asyncio.iscoroutine(result):
            result = await result
        return result  # type: ignore[no-any-return]

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    rec.url = f"http://127.0.0.1:{port}"
    yield rec
    await runner.cleanup()


def pytest_report_header(config: pytest.Config) -> str:
    binary = redis_binary()
    return f"redis-server: {binary or 'not found'}; docker: {shutil.which('docker') or 'no'}"


__all__ = ["Path", "Receiver", "RedisHandle", "event_ids", "make_settings", "publish_event"]


async def publish_event(
    store: Store,
    endpoint_ids: list[str],
    *,
    shard: int = 0,
    event_type: str = "order.paid",
    payload: bytes = b'{"n":1}',
    created_ms: int | None = None,
    idempotency: tuple[str, bytes] | None = None,
    app: str = "default",
) -> tuple[str, list[str], str | None]:
    """One event to ``endpoint_ids`` through ``Store.publish``, with ids as
    ``relay.publishing`` makes them (layout v3: the delivery ids derive from the event's,
    so the deliveries have no hash until their first claim). Returns the event id, the
    delivery ids and what ``Store.publish`` returned (the taken idempotency value, or None)."""
    now = created_ms or int(time.time() * 1000)
    event_id = ids.new_event_id(shard, now)
    deliveries = [(ids.delivery_id(event_id, i), e) for i, e in enumerate(endpoint_ids)]
    taken = await store.publish(
        shard=shard,
        event_id=event_id,
        event_type=event_type,
        app=app,
        body=signing.build_body(event_id, event_type, now, payload),
        created_ms=now,
        deliveries=deliveries,
        idempotency=idempotency,
    )
    return event_id, [d for d, _ in deliveries], taken


async def event_ids(store: Store, shard: int | None = None) -> list[str]:
    """The ids of the events kept in Redis that have deliveries (one shard, or all): the
    events index of layout v3, each checked against its event key."""
    shards = store.keys.all_shards() if shard is None else [store.keys.shard(shard)]
    found: set[str] = set()
    for sk in shards:
        events = set(await store.redis.zrange(sk.events, 0, -1))
        async with store.redis.pipeline(transaction=False) as pipe:
            for e in sorted(events):
                pipe.exists(sk.event(e))
            kept = await pipe.execute()
        found |= {e for e, k in zip(sorted(events), kept, strict=True) if k}
    return sorted(found)


@dataclass
class Api:
    """A running API app and a client session that sends the test token."""

    url: str
    session: Any
    store: Store
    app: Any = None  # the aiohttp application, for tests that look inside it

    def __call__(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.session.request(method, self.url + path, **kwargs)


@pytest.fixture
async def make_api() -> AsyncIterator[Callable[[Store], Any]]:
    import aiohttp

    from relay.api import create_app, server

    cleanups: list[Any] = []

    async def factory(store: Store, token: str = "test-token") -> Api:
        port = free_port()
        runner = await server.start(
            create_app(store.settings, store), store.settings, "127.0.0.1", port
        )
        session = aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"})
        cleanups.append((runner, session))
        return Api(f"http://127.0.0.1:{port}", session, store, runner.app)

    yield factory  # type: ignore[misc]
    for runner, session in cleanups:
        await session.close()
        await runner.cleanup()
