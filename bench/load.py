"""Load generators: a lean keep-alive HTTP/1.1 client for publishing, and the raw-client limit.

Publishing uses plain asyncio streams with a prebuilt request head rather than aiohttp's
client: on a 2-core machine the load generator shares the CPU with the API, Redis and
the receiver, and a cheaper client leaves more of it to the system being measured
(the same reason one reaches for wrk). Every response is checked (status 201 expected).

The limit uses aiohttp's client, exactly as relay, arq and saq do when they deliver.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from bench.common import HOST
from bench.payloads import EVENT_TYPE, SECRET, headers, payload, signed_body
from relay.domain import signing


class Conn:
    """One keep-alive connection to the relay API."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.head = (
            f"POST /v1/events HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        ).encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(HOST, self.port)

    async def post(self, body: bytes) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(self.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def event_body(endpoint_ids: list[str] | None = None) -> bytes:
    doc: dict[str, Any] = {"type": EVENT_TYPE, "payload": payload()}
    if endpoint_ids:
        doc["endpoint_ids"] = endpoint_ids
    return orjson.dumps(doc)


async def publish(
    port: int, token: str, n: int, clients: int, body: Callable[[], bytes] = event_body
) -> dict[str, Any]:
    """Publish ``n`` events over ``clients`` connections as fast as they are answered."""
    conns = [Conn(port, token) for _ in range(clients)]
    await asyncio.gather(*(c.open() for c in conns))
    left = n
    deliveries = 0
    errors: list[str] = []

    async def run(conn: Conn) -> None:
        nonlocal left, deliveries
        while left > 0 and not errors:
            left -= 1
            status, answer = await conn.post(body())
            if status != 201:
                errors.append(f"{status} {answer[:200]!r}")
                return
            deliveries += answer.count(b'"dlv_')

    started = time.time()
    try:
        await asyncio.gather(*(run(c) for c in conns))
    finally:
        for c in conns:
            c.close()
    ended = time.time()
    if errors:
        raise RuntimeError(f"publish failed: {errors[0]}")
    return {
        "events": n,
        "deliveries": deliveries,
        "clients": clients,
        "started": started,
        "seconds": round(ended - started, 3),
        "per_s": round(n / (ended - started), 1),
    }


async def steady(port: int, token: str, rate: float, seconds: float) -> dict[str, Any]:
    """Open-loop publishing at ``rate`` events/s: each send starts on schedule, not after
    the previous answer, so a slow answer cannot hide queueing delay."""
    total = int(rate * seconds)
    pool: asyncio.Queue[Conn] = asyncio.Queue()
    for _ in range(16):
        c = Conn(port, token)
        await c.open()
        pool.put_nowait(c)
    answer_ms: list[float] = []
    errors: list[str] = []

    async def one() -> None:
        conn = await pool.get()
        t = time.time()
        status, answer = await conn.post(orjson.dumps({"type": EVENT_TYPE, "payload": payload(t)}))
        answer_ms.append((time.time() - t) * 1000)
        pool.put_nowait(conn)
        if status != 201:
            errors.append(f"{status} {answer[:200]!r}")

    t0 = time.monotonic() + 0.05
    tasks = []
    for i in range(total):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    wall = time.monotonic() - t0
    while not pool.empty():
        pool.get_nowait().close()
    if errors:
        raise RuntimeError(f"publish failed: {errors[0]}")
    return {"events": total, "offered_per_s": round(total / wall, 1), "answer_ms": answer_ms}


async def limit(url: str, n: int, concurrency: int) -> dict[str, Any]:
    """The ceiling: sign and POST ``n`` requests with aiohttp at ``concurrency``, no queue."""
    key = [signing.secret_bytes(SECRET)]
    data = signed_body()
    left = n
    bad: list[int] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def run(worker: int) -> None:
            nonlocal left
            i = 0
            while left > 0 and not bad:
                left -= 1
                i += 1
                hdrs = headers(key, f"evt_limit_{worker}_{i}", data, "bench-limit")
                async with session.post(url, data=data, headers=hdrs) as resp:
                    await resp.read()
                    if resp.status != 200:
                        bad.append(resp.status)

        started = time.time()
        await asyncio.gather(*(run(w) for w in range(concurrency)))
    if bad:
        raise RuntimeError(f"limit run got HTTP {bad[0]}")
    return {"started": started, "client_seconds": round(time.time() - started, 3)}
