"""Request bodies the API cannot take, and the connection they arrive on.

Every body relay cannot decode (an unsupported ``Content-Encoding``, a broken or
truncated stream, bytes after its end) is 400 ``invalid_body`` with a message naming the
problem, and writes nothing. After any 4xx the connection is either still usable (the
body was read to its end) or the answer says ``Connection: close``: a pooled client's
next request never meets a reset.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from typing import Any

import aiohttp
import orjson
import pytest

from relay.queue.store import Store
from tests.helpers.api import assert_error, call, snapshot

pytestmark = pytest.mark.realredis

EVENT = b'{"type": "t", "payload": {"n": 1}}'
JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Store, Any]:
    store = await make_store(max_payload_bytes=20_000)
    return store, await make_api(store)


def raw_deflate(data: bytes) -> bytes:
    squeeze = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return squeeze.compress(data) + squeeze.flush()


GOOD = [
    ("gzip", gzip.compress(EVENT)),
    ("x-gzip", gzip.compress(EVENT)),
    ("GZIP", gzip.compress(EVENT)),
    ("gzip", gzip.compress(EVENT[:10]) + gzip.compress(EVENT[10:])),  # two members
    ("deflate", zlib.compress(EVENT)),
    ("deflate", raw_deflate(EVENT)),  # raw deflate, as some clients send it
    ("identity", EVENT),
    ("identity, gzip", gzip.compress(EVENT)),
]


@pytest.mark.parametrize(
    ("encoding", "data"), GOOD, ids=[f"{e}-{i}" for i, (e, _) in enumerate(GOOD)]
)
async def test_encoded_bodies_are_read(env: tuple[Store, Any], encoding: str, data: bytes) -> None:
    _, api = env
    headers = {**JSON, "Content-Encoding": encoding}
    status, body = await call(api, "POST", "/v1/events", data=data, headers=headers)
    assert status == 201, body
    assert body["type"] == "t"


BAD = [
    ("br", b"\x1b\x1f\x00\xf8\x25\x40", "Content-Encoding br is not supported"),
    ("zstd", b"(\xb5/\xfd\x00X\x01\x00\x00{}", "Content-Encoding zstd is not supported"),
    ("compress", EVENT, "Content-Encoding compress is not supported"),
    ("gzip, gzip", gzip.compress(gzip.compress(EVENT)), "one Content-Encoding"),
    ("gzip", b"not gzip at all", "not valid gzip"),
    ("deflate", b"not deflate at all", "not valid deflate"),
    ("deflate", zlib.compress(EVENT) + b"tail", "after the end of the deflate stream"),
    ("deflate", raw_deflate(EVENT) + b"xxxx", "after the end of the deflate stream"),
    ("deflate", zlib.compress(EVENT)[:-3], "deflate stream is cut short"),
    ("gzip", gzip.compress(EVENT)[:-3], "gzip stream is cut short"),
    ("gzip", gzip.compress(EVENT) + b"tail", "not valid gzip"),
]


@pytest.mark.parametrize(
    ("encoding", "data", "says"), BAD, ids=[f"{e}-{i}" for i, (e, _, _) in enumerate(BAD)]
)
async def test_undecodable_bodies_are_400_invalid_body(
    env: tuple[Store, Any], encoding: str, data: bytes, says: str
) -> None:
    """Before: br, zstd, raw deflate with trailing bytes and a cut deflate stream were
    400 ``bad_request`` "malformed HTTP request (request line or a header)"; the broken
    gzip and deflate streams a 400 that named no problem; ``gzip, gzip`` a 400
    ``invalid_json`` on the still-encoded bytes, and ``compress`` on a plain body 201
    (the coding it claims ignored)."""
    store, api = env
    before = await snapshot(store)
    headers = {**JSON, "Content-Encoding": encoding}
    status, body = await call(api, "POST", "/v1/events", data=data, headers=headers)
    assert_error(status, body, 400, "invalid_body")
    assert says in body["message"], body["message"]
    assert await snapshot(store) == before


async def test_unsupported_encoding_names_the_ones_accepted(env: tuple[Store, Any]) -> None:
    _, api = env
    headers = {**JSON, "Content-Encoding": "br"}
    async with api("POST", "/v1/events", data=b"\x1b\x00", headers=headers) as r:
        body = await r.json()
        assert r.status == 400
        assert r.headers["Accept-Encoding"] == "gzip, deflate"
    assert body["message"] == (
        "Content-Encoding br is not supported; send identity, gzip or deflate"
    )


async def test_a_decompressed_body_over_the_limit_is_413(env: tuple[Store, Any]) -> None:
    """A small gzip body that inflates past the request size limit is refused without
    inflating all of it."""
    store, api = env
    before = await snapshot(store)
    bomb = gzip.compress(b'{"type": "t", "payload": "' + b"0" * 50_000_000 + b'"}')
    assert len(bomb) < 100_000
    headers = {**JSON, "Content-Encoding": "gzip"}
    status, body = await call(api, "POST", "/v1/events", data=bomb, headers=headers)
    assert_error(status, body, 413, "payload_too_large")
    assert await snapshot(store) == before


async def _raw_exchange(port: int, parts: list[bytes], within: float = 5.0) -> bytes:
    """Send ``parts`` on one connection (a pause between them, so the server reads each
    alone) and return everything answered until the server closes or goes quiet."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = b""
    try:
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.1)
        async with asyncio.timeout(within):
            while chunk := await reader.read(65536):
                out += chunk
                if b"\r\n\r\n" in out and out.endswith(b"}"):
                    break
    except (TimeoutError, ConnectionError):
        pass
    finally:
        writer.close()
    return out


def _head(encoding: str, length: int) -> bytes:
    return (
        b"POST /v1/events HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer test-token\r\n"
        b"Content-Type: application/json\r\nContent-Encoding: "
        + encoding.encode()
        + b"\r\nContent-Length: %d\r\n\r\n" % length
    )


@pytest.mark.parametrize("split", [False, True], ids=["one-packet", "body-apart"])
async def test_bytes_after_a_raw_deflate_stream_are_400_invalid_body(
    env: tuple[Store, Any], split: bool
) -> None:
    """Before: 400 "malformed HTTP request" when the body came with the head, and no
    answer at all (the request waited for ever) when it came apart."""
    _, api = env
    data = raw_deflate(EVENT) + b"xxxx"
    head = _head("deflate", len(data))
    out = await _raw_exchange(
        int(api.url.rsplit(":", 1)[1]), [head, data] if split else [head + data]
    )
    assert out.startswith(b"HTTP/1.1 400"), out[:300]
    assert orjson.loads(out.split(b"\r\n\r\n", 1)[1])["error"] == "invalid_body"


def _counting_session(token: str = "test-token") -> tuple[aiohttp.ClientSession, list[int]]:
    """One pooled connection at most; the list counts the connections it opened."""
    opened: list[int] = []

    async def on_create(*_: Any) -> None:
        opened.append(1)

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(on_create)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=1),
        headers={"Authorization": f"Bearer {token}"},
        trace_configs=[trace],
    )
    return session, opened


REFUSED = [
    ("gzip", b"not gzip at all", 400),
    ("br", b"\x1b\x00", 400),
    ("deflate", zlib.compress(EVENT) + b"tail", 400),
    ("identity", b'{"type": "t", "payload": ', 400),  # malformed JSON
    ("identity", b'{"type": 7}', 422),
    ("identity", b'{"type": "t", "payload": "' + b"x" * 200_000 + b'"}', 413),
]


@pytest.mark.parametrize(
    ("encoding", "data", "expected"),
    REFUSED,
    ids=[f"{e}-{s}-{i}" for i, (e, _, s) in enumerate(REFUSED)],
)
async def test_a_pooled_client_survives_a_refused_body(
    env: tuple[Store, Any], encoding: str, data: bytes, expected: int
) -> None:
    """One client session with one pooled connection: a refused body, then a good
    request, which succeeds. The connection is kept unless the answer said
    ``Connection: close``. Before: after a body that did not decode the server dropped
    the connection unannounced, and the next request failed (ClientOSError, reset)."""
    _, api = env
    session, opened = _counting_session()
    async with session:
        headers = {**JSON, "Content-Encoding": encoding}
        async with session.post(api.url + "/v1/events", data=data, headers=headers) as r:
            assert r.status == expected, await r.text()
            closes = r.headers.get("Connection", "").lower() == "close"
            await r.read()
        async with session.post(api.url + "/v1/events", data=EVENT, headers=JSON) as r:
            assert r.status == 201, await r.text()
        assert len(opened) == (2 if closes else 1)


async def test_a_parser_error_answer_says_connection_close(env: tuple[Store, Any]) -> None:
    """aiohttp's parser refuses a header line with a DEL byte and closes the connection:
    the answer says so. Before: an HTTP/1.0 answer with no Connection header."""
    _, api = env
    port = int(api.url.rsplit(":", 1)[1])
    out = await _raw_exchange(
        port, [b"GET /healthz HTTP/1.1\r\nHost: relay\r\nBad\x7fName: 1\r\n\r\n"]
    )
    head = out.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 400") or head.startswith(b"http/1.0 400"), out
    assert b"\r\nconnection: close" in head, out


async def test_an_error_before_the_body_arrived_says_connection_close(
    env: tuple[Store, Any],
) -> None:
    """A 401 answered while the body is still on its way: the server will not wait for
    the rest of it for ever, so the answer says ``Connection: close``. Before: no
    Connection header, and the connection closed unannounced once the body was late."""
    _, api = env
    port = int(api.url.rsplit(":", 1)[1])
    head = (
        b"POST /v1/events HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer wrong\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    out = await _raw_exchange(port, [head + b'{"type": '], within=2.0)
    answer = out.split(b"\r\n\r\n", 1)[0].lower()
    assert answer.startswith(b"http/1.1 401"), out
    assert b"\r\nconnection: close" in answer, out


async def test_an_error_after_the_whole_body_keeps_the_connection(
    env: tuple[Store, Any],
) -> None:
    """The same 401 with the body complete keeps the connection (no Connection: close)."""
    _, api = env
    session, opened = _counting_session(token="wrong")
    async with session:
        for _ in range(2):
            async with session.post(api.url + "/v1/events", data=EVENT, headers=JSON) as r:
                assert r.status == 401
                assert r.headers.get("Connection", "").lower() != "close"
    assert len(opened) == 1
