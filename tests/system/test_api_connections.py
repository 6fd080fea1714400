"""What one client can hold of the API: a real ``relay api`` process, real sockets.

A request head (and a request body) must arrive within its timeout, else the connection
is closed; one client address holds at most ``RELAY_MAX_CONNECTIONS_PER_CLIENT``
connections, the rest are closed at once while other addresses are served; and the
process raises its open-files limit to the hard limit. The slow clients connect from
127.0.0.2 (loopback, a second address), the well-behaved one from 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from relay.redisproc import free_port

pytestmark = pytest.mark.realredis

TOKEN = "tok-connections"
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
PER_CLIENT = 8
OPEN_FILES = 160  # soft and hard: fewer than the slow connections of the slowloris test
SLOW = "127.0.0.2"  # the slow clients' source address
OTHER = "127.0.0.1"
CLOSED_WITHIN = HEADER_TIMEOUT + 4.0  # generous: unbounded, the connection stays for an hour


@dataclass
class ApiProcess:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path


def _start_api(redis_url: str, log: Path, nofile: tuple[int, int] | None, **env: str) -> ApiProcess:
    port = free_port()
    environ = {
        **os.environ,
        "RELAY_REDIS_URL": redis_url,
        "RELAY_KEY_PREFIX": "c" + uuid.uuid4().hex[:10],
        "RELAY_HOST": "127.0.0.1",
        "RELAY_PORT": str(port),
        "RELAY_API_TOKENS": TOKEN,
        "RELAY_LOG_LEVEL": "warning",
        **env,
    }

    def limit_files() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    out = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay", "api"],
        env=environ,
        stdout=out,
        stderr=subprocess.STDOUT,
        preexec_fn=limit_files,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return ApiProcess(port, proc, log)
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"relay api did not answer /healthz: {log.read_text()}")


def _stop(api: ApiProcess) -> None:
    api.proc.terminate()
    try:
        api.proc.wait(10)
    except subprocess.TimeoutExpired:
        api.proc.kill()
        api.proc.wait()


@pytest.fixture(scope="module")
def api(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiProcess]:
    """``relay api`` with short timeouts, a small per-client cap and few open files
    (soft and hard limit alike, as ``ulimit -n``)."""
    proc = _start_api(
        redis_server.url,
        tmp_path_factory.mktemp("api") / "api.log",
        (OPEN_FILES, OPEN_FILES),
        RELAY_HEADER_TIMEOUT=f"{HEADER_TIMEOUT}s",
        RELAY_BODY_TIMEOUT=f"{BODY_TIMEOUT}s",
        RELAY_MAX_CONNECTIONS_PER_CLIENT=str(PER_CLIENT),
    )
    yield proc
    _stop(proc)


async def _connect(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def _read_answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP answer with a Content-Length: (head, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


async def _closed_after(reader: asyncio.StreamReader, within: float) -> float | None:
    """Seconds until the server closed the connection (EOF or reset), None if it did not
    within ``within``; any bytes it sent first are read and dropped."""
    start = time.monotonic()
    try:
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return None
    except ConnectionError:
        pass
    return time.monotonic() - start


async def _trickle(writer: asyncio.StreamWriter, data: bytes, every: float = 0.2) -> None:
    """Send ``data`` a byte at a time, one every ``every`` seconds, until the connection
    breaks (the server closed it)."""
    for i in range(len(data)):
        try:
            writer.write(data[i : i + 1])
            await writer.drain()
        except ConnectionError:
            return
        await asyncio.sleep(every)


async def _healthz(port: int, source: str = OTHER, within: float = 2.0) -> bytes:
    async with asyncio.timeout(within):
        reader, writer = await _connect(port, source)
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
            head, body = await _read_answer(reader)
        finally:
            writer.close()
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


SLOW_HEAD = b"GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Slow: " + b"a" * 200


async def test_a_slow_request_head_is_closed_after_the_header_timeout(api: ApiProcess) -> None:
    """A new connection that keeps sending its head a byte at a time is closed once the
    header timeout has passed. Before: it stayed open (aiohttp's 3630 s keep-alive)."""
    reader, writer = await _connect(api.port, SLOW)
    trickle = asyncio.create_task(_trickle(writer, SLOW_HEAD))
    try:
        took = await _closed_after(reader, CLOSED_WITHIN)
    finally:
        trickle.cancel()
        writer.close()
    assert took is not None, f"a slow request head kept its connection over {CLOSED_WITHIN} s"


async def test_a_keep_alive_connection_must_send_its_next_head_in_time(api: ApiProcess) -> None:
    """After an answer, the next request head on the same connection has the same bound.
    Before: the connection stayed open."""
    reader, writer = await _connect(api.port, SLOW)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
        head, _ = await _read_answer(reader)
        assert head.startswith(b"HTTP/1.1 200")
        assert b"connection: close" not in head.lower()  # kept alive
        trickle = asyncio.create_task(_trickle(writer, SLOW_HEAD))
        took = await _closed_after(reader, CLOSED_WITHIN)
        trickle.cancel()
    finally:
        writer.close()
    assert took is not None, "the second, slow head kept its connection"


def _post_head(length: int | None, token: str = TOKEN) -> bytes:
    size = b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length
    return (
        b"POST /v1/events HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n"
        + b"Authorization: Bearer "
        + token.encode()
        + b"\r\n"
        + size
        + b"\r\n\r\n"
    )


async def test_a_slow_request_body_is_answered_408_and_closed(api: ApiProcess) -> None:
    """A complete head, then a body a byte at a time: 408 ``request_timeout`` with
    ``Connection: close`` once the body timeout has passed. Before: the request waited
    for its body as long as the client kept sending (no answer within the bound)."""
    body = b'{"type": "slow", "payload": "' + b"x" * 500 + b'"}'
    reader, writer = await _connect(api.port, SLOW)
    writer.write(_post_head(len(body)))
    trickle = asyncio.create_task(_trickle(writer, body))
    try:
        async with asyncio.timeout(BODY_TIMEOUT + 4.0):
            head, answer = await _read_answer(reader)
    except TimeoutError:
        pytest.fail(f"no answer to a slow body within {BODY_TIMEOUT + 4.0} s")
    finally:
        trickle.cancel()
        writer.close()
    assert head.startswith(b"HTTP/1.1 408"), head
    assert b"connection: close" in head.lower(), head
    assert orjson.loads(answer)["error"] == "request_timeout"


async def test_a_broken_chunked_body_is_answered(api: ApiProcess) -> None:
    """A chunked body whose framing breaks after the head was taken: aiohttp's parser
    drops the request's body stream without an error, so the request would wait for it
    for ever; the body timeout answers it (with ``Connection: close``). Before: no answer
    at all while the client waited."""
    reader, writer = await _connect(api.port, SLOW)
    try:
        writer.write(_post_head(None))
        await writer.drain()
        await asyncio.sleep(0.2)  # the head is taken alone, the handler waits for the body
        writer.write(b'5\r\n{"typ\r\nzz\r\n')  # "zz" is no chunk size
        async with asyncio.timeout(BODY_TIMEOUT + 4.0):
            head, _ = await _read_answer(reader)
    except TimeoutError:
        pytest.fail("a broken chunked body left its request without an answer")
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 4"), head
    assert b"connection: close" in head.lower(), head


async def test_connections_over_the_per_client_cap_are_closed_at_once(api: ApiProcess) -> None:
    """One address holds at most RELAY_MAX_CONNECTIONS_PER_CLIENT connections: the next
    one from it is closed unanswered, another address is served, and a slot freed is
    taken again. Before: every connection was kept."""
    held = []
    try:
        for _ in range(PER_CLIENT):  # each answered once, then kept alive
            reader, writer = await _connect(api.port, SLOW)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
            head, _ = await _read_answer(reader)
            assert head.startswith(b"HTTP/1.1 200")
            held.append((reader, writer))
        reader, writer = await _connect(api.port, SLOW)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
        try:
            leftover = await asyncio.wait_for(reader.read(65536), 2.0)
        except TimeoutError:
            pytest.fail("a connection over the per-client cap was kept open")
        except ConnectionError:
            leftover = b""
        finally:
            writer.close()
        assert leftover == b"", leftover  # closed without an answer
        assert orjson.loads(await _healthz(api.port, OTHER)) == {"status": "ok"}
        held.pop()[1].close()  # one slot freed: the address is served again
        deadline = time.monotonic() + 5
        while True:
            try:
                await _healthz(api.port, SLOW)
                break
            except (AssertionError, ConnectionError, asyncio.IncompleteReadError, TimeoutError):
                assert time.monotonic() < deadline, "a freed slot was not taken again"
                await asyncio.sleep(0.1)
    finally:
        for _, writer in held:
            writer.close()
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{api.port}/metrics") as r:
            scraped = await r.text()
    refused = [
        float(line.split()[1])
        for line in scraped.splitlines()
        if line.startswith("relay_api_connections_refused_total ")
    ]
    assert refused and refused[0] >= 1, "the refused connection is not counted"


async def test_slowloris_does_not_starve_other_clients(api: ApiProcess) -> None:
    """More slow connections than the process has open files, reopened as they are
    closed: /healthz from another address stays answered (each within 2 s), and every
    slow connection is closed. Before: the process ran out of files and stopped
    accepting, /healthz went unanswered."""
    stop = asyncio.Event()
    closed: list[float] = []
    kept: list[int] = []

    async def attacker() -> None:
        while not stop.is_set():
            try:
                reader, writer = await _connect(api.port, SLOW)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            trickle = asyncio.create_task(_trickle(writer, SLOW_HEAD, every=0.5))
            took = await _closed_after(reader, CLOSED_WITHIN)
            trickle.cancel()
            writer.close()
            if took is None:
                kept.append(1)
                return
            closed.append(took)
            await asyncio.sleep(0.1)

    attackers = [asyncio.create_task(attacker()) for _ in range(OPEN_FILES + 40)]
    try:
        await asyncio.sleep(1.0)  # every slot taken that can be
        answered = 0
        end = time.monotonic() + HEADER_TIMEOUT + 2.0  # past the first timeouts
        while time.monotonic() < end:
            try:
                await _healthz(api.port, OTHER)
            except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
                pytest.fail(f"/healthz failed under slow connections: {exc!r}")
            answered += 1
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.gather(*attackers, return_exceptions=True)
    assert answered >= 5
    assert kept == [], f"{len(kept)} slow connections stayed open over {CLOSED_WITHIN} s"
    assert len(closed) >= OPEN_FILES  # the refused ones, at once, and the timed-out ones


def _open_files_limit(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no 'Max open files' line")


@pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads /proc/PID/limits")
def test_the_api_raises_its_open_files_limit_to_the_hard_limit(
    redis_server: Any, tmp_path: Path
) -> None:
    """A soft limit under the hard one is raised at start. Before: left at 128."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.fail(f"this test needs a hard open-files limit over 256, not {hard}")
    proc = _start_api(redis_server.url, tmp_path / "api.log", (128, hard))
    try:
        soft_now, hard_now = _open_files_limit(proc.proc.pid)
    finally:
        _stop(proc)
    assert hard_now == hard or hard == resource.RLIM_INFINITY
    assert soft_now == hard_now, (soft_now, hard_now)
