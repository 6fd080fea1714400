"""Fixtures for every tier (plain helpers are in ``tests/helpers/``; tests/README.md).

* ``redis_server``: one real ``redis-server`` per test session (free port, temp dir),
  from the binary when there is one, else testcontainers when Docker answers; with
  neither, the tests that need it FAIL saying what to install (never a silent skip).
* ``make_store`` / ``store``: a :class:`relay.queue.store.Store` on that server, each test in
  its own key prefix (no flushing), so tests never see each other's keys.
* ``fake_store``: the same Store on fakeredis, which runs the same Lua scripts.
* ``receiver``: a local aiohttp receiver on 127.0.0.1 that records every request.
* ``backend`` / ``st`` (``tests/helpers/store.py``): a contract test on both backends.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import fakeredis
import pytest
from aiohttp import web

from relay.queue.store import Store, connect
from relay.redisproc import RedisCluster, RedisServer, free_port, redis_binary
from tests.helpers import (
    ClusterHandle,
    Received,
    Receiver,
    StoreFactory,
    make_settings,
)

# the store contract fixtures (`st` on fakeredis and real Redis), for every tier
pytest_plugins = ["tests.helpers.store"]

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
    """A private PostgreSQL (tests/helpers/pg.py) for the session; FAILS when none can start."""
    from tests.helpers.pg import INSTALL_HINT as PG_HINT
    from tests.helpers.pg import PgServer, pg_bindir

    bindir = pg_bindir()
    if bindir is None:
        pytest.fail(PG_HINT, pytrace=False)
    server = PgServer(bindir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


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
