"""relay's connection pool (relay/queue/pool.py) against a real redis-server: the blocking
pool's guarantees hold (at most ``max_connections``, a waiting caller is served, a
connection marked to reconnect is closed when given back), and a free connection is
taken and given back without the pool's condition."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from relay.queue.pool import BlockingPool

pytestmark = pytest.mark.realredis


@pytest.fixture
async def pool_for(redis_server: Any) -> AsyncIterator[Callable[..., BlockingPool]]:
    made: list[BlockingPool] = []

    def make(**kwargs: Any) -> BlockingPool:
        pool = BlockingPool.from_url(redis_server.url, decode_responses=True, **kwargs)
        made.append(pool)
        return pool

    yield make
    for pool in made:
        await pool.disconnect()


async def test_waiting_callers_are_served_within_the_cap(pool_for: Any) -> None:
    pool = pool_for(max_connections=2, timeout=5)
    client = aioredis.Redis(connection_pool=pool)
    most = 0

    async def watch() -> None:
        nonlocal most
        while True:
            most = max(most, len(pool._in_use_connections))
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    try:
        # twelve commands that each hold a connection 50 ms: ten of them wait their turn
        # (a release that did not wake a waiter would leave them waiting until timeout)
        got = await asyncio.wait_for(
            asyncio.gather(*(client.blpop([f"pool-test-{i}"], 0.05) for i in range(12))),
            timeout=4,
        )
    finally:
        watcher.cancel()
    assert got == [None] * 12
    assert most == 2
    assert len(pool._available_connections) + len(pool._in_use_connections) == 2


async def test_a_free_connection_is_taken_without_the_condition(
    pool_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = pool_for(max_connections=4, timeout=5)
    client = aioredis.Redis(connection_pool=pool)
    await client.ping()  # the first command makes the connection, the pool's own way
    slow: list[str] = []
    real_get, real_release = (
        aioredis.BlockingConnectionPool.get_connection,
        (aioredis.BlockingConnectionPool.release),
    )

    async def counted_get(self: Any, *args: Any, **kwargs: Any) -> Any:
        slow.append("get")
        return await real_get(self, *args, **kwargs)

    async def counted_release(self: Any, connection: Any) -> None:
        slow.append("release")
        await real_release(self, connection)

    monkeypatch.setattr(aioredis.BlockingConnectionPool, "get_connection", counted_get)
    monkeypatch.setattr(aioredis.BlockingConnectionPool, "release", counted_release)
    for i in range(50):
        assert await client.echo(f"m{i}") == f"m{i}"
    assert slow == []
    assert len(pool._available_connections) == 1 and not pool._in_use_connections


async def test_a_connection_marked_to_reconnect_is_closed_on_release(pool_for: Any) -> None:
    pool = pool_for(max_connections=1, timeout=5)
    client = aioredis.Redis(connection_pool=pool)
    await client.ping()
    conn = await pool.get_connection()
    conn.mark_for_reconnect()
    await pool.release(conn)
    assert not conn.is_connected
    assert await client.ping() is True  # and it connects again when next taken
