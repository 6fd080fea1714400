"""The customer's brokers for the destination tests: each a private server on a free
loopback port in a temp dir, never the machine's own services, with a kit that reads what
arrived in it, stops and starts it, and makes the urls the tests create endpoints with.

A kit's ``dest`` names one test's own place in the broker: a stream (Redis), a subject
prefix with its JetStream stream (NATS), a queue bound to an exchange (RabbitMQ).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from relay.redisproc import RedisServer, free_port

PASSWORD = "s3cret-Broker-Pw"  # a broker password the tests look for in answers and logs


@dataclass
class Got:
    """One message as a consumer reads it: its three webhook values and its body."""

    headers: dict[str, str]
    body: bytes


class RedisKit:
    """A customer Redis (``redis-server`` with ``requirepass``), streams as destinations."""

    kind = "redis"

    def __init__(self, data_dir: Path) -> None:
        self.server = RedisServer(data_dir=data_dir, appendonly=True, appendfsync="everysec")
        self.port = 0

    def start(self) -> None:
        self.server.start()
        self.port = self.server.port or 0
        self._admin_sync("CONFIG", "SET", "requirepass", PASSWORD)

    def _admin_sync(self, *args: str) -> None:
        import redis

        with redis.Redis("127.0.0.1", self.port) as client:
            client.execute_command(*args)

    def client(self) -> aioredis.Redis:
        return aioredis.Redis(host="127.0.0.1", port=self.port, password=PASSWORD)

    def url(self, dest: str, *, password: str = PASSWORD, port: int | None = None) -> str:
        return f"redis://:{password}@127.0.0.1:{port or self.port}/0?stream={dest}&maxlen=100000"

    async def prepare(self, dest: str) -> None:
        """Nothing: ``XADD`` makes the stream."""

    async def misconfigure(self, dest: str) -> str:
        """A url the broker refuses: the stream's key holds a string (WRONGTYPE)."""
        async with self.client() as client:
            await client.set(dest, "not a stream")
        return self.url(dest)

    async def messages(self, dest: str) -> list[Got]:
        async with self.client() as client:
            entries = await client.xrange(dest)
        out = []
        for _, fields in entries:
            text = {k.decode(): v for k, v in fields.items()}
            body = text.pop("body")
            out.append(Got({k: v.decode() for k, v in text.items()}, body))
        return out

    async def down(self) -> None:
        await asyncio.to_thread(self.server.stop)

    async def up(self) -> None:
        # not in a thread: redis-server dies with the thread that started it (PDEATHSIG)
        self.start()

    def stop(self) -> None:
        self.server.stop()


def unused_port() -> int:
    """A loopback port nothing listens on (for unreachable destinations)."""
    return free_port()


Kit = Any  # RedisKit, NatsKit or RabbitKit: the same methods
