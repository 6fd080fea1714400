"""A client on a customer's Redis, for the Redis Streams destination kind.

Not relay's own Redis: the server an endpoint's ``redis://`` url names. The only
command it sends after ``PING`` is ``XADD ... MAXLEN ~ N``. Redis's error replies
(``NOAUTH``, ``WRONGTYPE``, ``OOM``, ``READONLY``) become :class:`StreamRefused`.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError


class StreamRefused(Exception):
    """The customer's Redis answered with an error reply."""


class StreamClient:
    """Connections to one customer Redis (a pool: one per send in flight at most)."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        db: int,
        username: str | None,
        password: str | None,
        tls: bool,
        seconds: float,
    ) -> None:
        self._client = aioredis.Redis(
            host=host,
            port=port,
            db=db,
            username=username,
            password=password,
            ssl=tls,
            socket_connect_timeout=seconds,
            socket_timeout=seconds,
            retry=Retry(NoBackoff(), 0),  # a failed command is the attempt's answer
            client_name="relay",
        )

    async def ping(self) -> None:
        try:
            await self._client.ping()
        except ResponseError as exc:
            raise StreamRefused(f"PING: {exc}") from None

    async def xadd(self, stream: str, fields: dict[str, Any], maxlen: int) -> str:
        """The new entry's id; the stream trimmed to about ``maxlen`` entries."""
        try:
            entry = await self._client.xadd(stream, fields, maxlen=maxlen, approximate=True)  # type: ignore[arg-type]
        except ResponseError as exc:
            raise StreamRefused(f"XADD {stream}: {exc}") from None
        return entry.decode() if isinstance(entry, bytes) else str(entry)

    async def aclose(self) -> None:
        await self._client.aclose()
