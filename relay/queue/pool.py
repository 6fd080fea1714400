"""redis-py's blocking connection pool, without its machinery where it decides nothing.

``BlockingConnectionPool`` hands out every connection through an ``asyncio.Condition``
and a timeout (``asyncio.timeout``: a timer per command), and takes it back through the
condition, the pool's lock and an event dispatch (a re-authentication hook), a large
part of what a command costs through the pool (``bench/pool.py``). When a connection is
free and no caller waits for one,
none of it changes what happens: the connection is taken, checked (``ensure_connection``,
as always) and given back as the plain pool does it. Whenever a caller waits, the pool's
lock is held (a disconnect, a reconnect under way), maintenance is on, a connection must
reconnect or re-authenticate, or redis-py's own metrics are collected, the pool's own
methods run, unchanged (``tests/redis/test_pool.py``).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.observability import recorder


def _collecting() -> bool:
    """Whether redis-py's own metrics are on (its pool then records every checkout)."""
    try:
        return recorder._get_or_create_collector() is not None
    except Exception:  # whatever went wrong, take the pool's own path
        return True


class BlockingPool(aioredis.BlockingConnectionPool):
    """``BlockingConnectionPool``: past ``max_connections`` a caller waits for a
    connection (up to ``timeout``) instead of failing; with a fast path for a free one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fast = not _collecting()

    def _uncontended(self) -> bool:
        return (
            self._fast
            and not self._condition._waiters  # type: ignore[attr-defined]
            and not self._lock.locked()
            and not self._in_maintenance
        )

    async def get_connection(  # type: ignore[override]
        self, command_name: Any = None, *keys: Any, **options: Any
    ) -> AbstractConnection:
        if not (self._available_connections and self._uncontended()):
            return await super().get_connection()
        connection = self._available_connections.pop()
        self._in_use_connections.add(connection)
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def release(self, connection: AbstractConnection) -> None:
        if (
            not self._uncontended()
            or connection.should_reconnect()
            or getattr(connection, "_re_auth_token", None) is not None
        ):
            await super().release(connection)
            return
        self._in_use_connections.remove(connection)
        self._available_connections.append(connection)
