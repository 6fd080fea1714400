"""Hardening, the API's side: without the guard each test proves, its answer is a 500, a
silent change of the data, or a leak; each docstring says which.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

import relay.endpoints.lifecycle
from relay.domain import eventrecord
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer, free_port
from tests.helpers import make_settings
from tests.helpers.api import assert_error, call, new_endpoint, snapshot

pytestmark = pytest.mark.realredis

TOKEN = "tok-Sup3rSecret-4711"
HEADER_MASK = "••••••"  # relay.domain.schema.HEADER_MASK, spelt out


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Store, Any]:
    store = await make_store(max_payload_bytes=20_000, api_tokens=(TOKEN,))
    return store, await make_api(store, token=TOKEN)


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


# ---------------------------------------------------------------- 2, 3: what JSON is taken


@pytest.mark.parametrize("levels", [254, 300, 1000])
async def test_deep_payload_is_422_not_500(env: tuple[Store, Any], levels: int) -> None:
    """Unguarded: 500 (orjson parses 1,024 levels, serializes 254)."""
    store, api = env
    before = await snapshot(store)
    raw = b'{"type": "t", "payload": ' + b"[" * levels + b"1" + b"]" * levels + b"}"
    status, data = await call(
        api, "POST", "/v1/events", data=raw, headers={"Content-Type": "application/json"}
    )
    assert_error(status, data, 422, "validation_error")
    assert "nested deeper than 64" in data["message"]
    assert await snapshot(store) == before


async def test_payload_within_the_depth_limit_is_accepted(env: tuple[Store, Any]) -> None:
    _, api = env
    status, _ = await call(api, "POST", "/v1/events", json={"type": "t", "payload": nested(62)})
    assert status == 201


@pytest.mark.parametrize(
    "number", [b"123456789012345678901234567890", b"-9223372036854775809", b"18446744073709551616"]
)
async def test_integer_beyond_64_bits_is_refused(env: tuple[Store, Any], number: bytes) -> None:
    """Unguarded: 201, and delivered as 1.2345678901234568e+29."""
    store, api = env
    before = await snapshot(store)
    raw = b'{"type": "t", "payload": {"n": ' + number + b"}}"
    status, data = await call(
        api, "POST", "/v1/events", data=raw, headers={"Content-Type": "application/json"}
    )
    assert_error(status, data, 422, "validation_error")
    assert "64 bits" in data["message"]
    assert await snapshot(store) == before


async def test_64_bit_integers_and_big_floats_stay_exact(env: tuple[Store, Any]) -> None:
    store, api = env
    payload = (
        b'{"a": 18446744073709551615, "b": -9223372036854775808, "c": 1e30,'
        b' "d": "1234567890123456789012"}'
    )
    raw = b'{"type": "t", "payload": ' + payload + b"}"
    status, event = await call(
        api, "POST", "/v1/events", data=raw, headers={"Content-Type": "application/json"}
    )
    assert status == 201
    raw = await store.redis.get(store.shard_keys_for(event["id"]).event(event["id"]))
    stored = eventrecord.unpack(raw, event["id"])[1]  # the body as signed and sent
    assert orjson.loads(stored)["data"] == orjson.loads(payload)
    assert b"18446744073709551615" in stored and b"-9223372036854775808" in stored


# ---------------------------------------------------------------- 7: Content-Encoding


async def test_body_claiming_gzip_that_is_not_is_400(env: tuple[Store, Any]) -> None:
    """Unguarded: 500."""
    store, api = env
    before = await snapshot(store)
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    status, data = await call(api, "POST", "/v1/events", data=b"not gzip at all", headers=headers)
    assert_error(status, data, 400, "invalid_body")
    assert await snapshot(store) == before
    good = gzip.compress(b'{"type": "t", "payload": 1}')
    status, _ = await call(api, "POST", "/v1/events", data=good, headers=headers)
    assert status == 201  # real gzip is still read


# ---------------------------------------------------------------- 6: rotation is bounded


async def test_rotation_is_rate_limited(env: tuple[Store, Any]) -> None:
    """Unguarded: every rotation 200 (a burst of them grows the endpoint record)."""
    _, api = env
    ep = await new_endpoint(api)
    status, _ = await call(api, "POST", f"/v1/endpoints/{ep['id']}/rotate-secret")
    assert status == 200
    async with api("POST", f"/v1/endpoints/{ep['id']}/rotate-secret") as r:
        assert r.status == 429
        assert 1 <= int(r.headers["Retry-After"]) <= 60
        assert_error(r.status, await r.json(), 429, "rotation_too_soon")


async def test_rotation_keeps_a_bounded_number_of_previous_secrets(
    env: tuple[Store, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unguarded: every old secret kept (and signing) for 24 h, however many rotations."""
    store, api = env
    monkeypatch.setattr(relay.endpoints.lifecycle, "ROTATION_INTERVAL_MS", 0, raising=False)
    ep = await new_endpoint(api)
    secrets = [ep["secret"]]
    for _ in range(6):
        status, data = await call(api, "POST", f"/v1/endpoints/{ep['id']}/rotate-secret")
        assert status == 200
        secrets.append(data["secret"])
    stored = await store.get_endpoint(ep["id"])
    assert stored is not None and stored["secret"] == secrets[-1]
    assert [p["secret"] for p in stored["previous_secrets"]] == secrets[-3:-1]


# ---------------------------------------------------------------- 8: rate_limit bounds


@pytest.mark.parametrize("rate", [1e-17, 0.001, 0, -1, 1e9])
async def test_rate_limit_out_of_bounds_is_422(env: tuple[Store, Any], rate: float) -> None:
    """Unguarded: 1e-17 and 0.001 are stored (admit.lua then fails, and the worker sends
    without any limit)."""
    store, api = env
    before = await snapshot(store)
    body = {"url": "http://127.0.0.1:9/h", "rate_limit": rate}
    assert_error(*await call(api, "POST", "/v1/endpoints", json=body), 422, "validation_error")
    assert await snapshot(store) == before


# ---------------------------------------------------------------- 9: contract hygiene


async def test_405_says_allow(env: tuple[Store, Any]) -> None:
    """Unguarded: no Allow header."""
    _, api = env
    async with api("PUT", "/v1/events") as r:
        assert_error(r.status, await r.json(), 405, "method_not_allowed")
        assert "POST" in r.headers["Allow"]


@pytest.mark.parametrize(
    "field",
    [
        {"enabled": "no"},
        {"enabled": 0},
        {"enabled": "false"},
        {"max_in_flight": "3"},
        {"rate_limit": "5"},
        {"description": 5},
    ],
)
async def test_types_are_strict(env: tuple[Store, Any], field: dict[str, Any]) -> None:
    """Unguarded: "no", 0 and "false" are taken as booleans, "3" as a number."""
    store, api = env
    before = await snapshot(store)
    body = {"url": "http://127.0.0.1:9/h", **field}
    assert_error(*await call(api, "POST", "/v1/endpoints", json=body), 422, "validation_error")
    ep = await new_endpoint(api)
    before = await snapshot(store)
    assert_error(
        *await call(api, "PATCH", f"/v1/endpoints/{ep['id']}", json=field), 422, "validation_error"
    )
    assert await snapshot(store) == before


async def test_recover_since_must_be_a_number_and_its_body_is_optional(
    env: tuple[Store, Any],
) -> None:
    """Unguarded: "since": "123" is taken as a time; and the body is optional, as the
    document says."""
    _, api = env
    ep = await new_endpoint(api)
    path = f"/v1/endpoints/{ep['id']}/recover"
    assert_error(*await call(api, "POST", path, json={"since": "123"}), 422, "validation_error")
    assert (await call(api, "POST", path))[0] == 202
    assert (await call(api, "POST", path, json={"since": 123}))[0] == 202
    _, doc = await call(api, "GET", "/openapi.json")
    assert doc["paths"]["/v1/endpoints/{id}/recover"]["post"]["requestBody"]["required"] is False
    assert doc["paths"]["/v1/endpoints"]["post"]["requestBody"]["required"] is True


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/a b",
        "http://127.0.0.1:9/a\x00b",
        "http://127.0.0.1:9/a\r\nX-Injected: 1",
        "http://127.0.0.1:9/a\tb",
        "http://127.0.0.1:9/a\x7fb",
    ],
)
async def test_urls_with_spaces_or_control_characters_are_refused(
    env: tuple[Store, Any], url: str
) -> None:
    """Unguarded: stored as given."""
    store, api = env
    before = await snapshot(store)
    body = {"url": url}
    assert_error(*await call(api, "POST", "/v1/endpoints", json=body), 422, "validation_error")
    ep = await new_endpoint(api)
    before = await snapshot(store)
    patch = await call(api, "PATCH", f"/v1/endpoints/{ep['id']}", json=body)
    assert_error(*patch, 422, "validation_error")
    assert await snapshot(store) == before


async def test_custom_header_values_are_masked_on_reads(env: tuple[Store, Any]) -> None:
    """Endpoint reads mask the values (receiver credentials); GET
    /v1/endpoints/{id}/headers shows them."""
    _, api = env
    headers = {"Authorization": "Bearer receiver-credential", "X-Team": "payments"}
    ep = await new_endpoint(api, headers=headers)
    masked = dict.fromkeys(headers, HEADER_MASK)
    assert ep["headers"] == masked
    assert (await call(api, "GET", f"/v1/endpoints/{ep['id']}"))[1]["headers"] == masked
    listed = (await call(api, "GET", "/v1/endpoints"))[1]["data"]
    assert [e["headers"] for e in listed if e["id"] == ep["id"]] == [masked]
    status, shown = await call(api, "GET", f"/v1/endpoints/{ep['id']}/headers")
    assert status == 200 and shown == {"headers": headers}
    # a read sent back as is would store the mask: refused
    back = await call(api, "PATCH", f"/v1/endpoints/{ep['id']}", json={"headers": masked})
    assert_error(*back, 422, "validation_error")


# ---------------------------------------------------------------- 5, 9: before any handler


async def raw_request(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    return answer


def split(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, payload = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, payload


@pytest.mark.parametrize(
    "header",
    [
        b"Authorization: Bearer " + TOKEN.encode() + b"\x7f",
        b"Authorization: Bearer " + TOKEN.encode() + b"\x00x",
        b"Authorization: Bearer " + TOKEN.encode() + b"x" * 9000,
        b"X-Other\x7f: Bearer " + TOKEN.encode(),
    ],
)
async def test_the_token_never_reaches_a_log_and_the_answer_is_json(
    env: tuple[Store, Any],
    header: bytes,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Unguarded: aiohttp logs the raw header line (token included) and answers text/plain."""
    _, api = env
    caplog.set_level(logging.DEBUG)
    request = b"GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\n\r\n"
    status, headers, payload = split(await raw_request(api.url, request))
    await asyncio.sleep(0.05)  # let the server log what it logs
    out = capsys.readouterr()
    logged = caplog.text + out.out + out.err
    assert TOKEN not in logged and TOKEN[:12] not in logged
    assert TOKEN not in payload.decode("latin-1")
    assert "api.bad_request" in logged  # it was logged, without what the client sent
    assert 400 <= status < 500
    assert headers["content-type"].startswith("application/json")
    data = orjson.loads(payload)
    assert set(data) == {"error", "message"}


# ---------------------------------------------------------------- 4: a Redis refusing writes


@pytest.fixture
async def own_redis(tmp_path: Path, make_api: Any) -> Any:
    server = RedisServer(data_dir=tmp_path, appendonly=False)
    server.start()
    settings = make_settings(redis_url=server.url)
    store = Store(connect(settings), settings)
    await store.start()
    try:
        yield server, store, await make_api(store)
    finally:
        await store.close()
        server.stop()


async def assert_unavailable(api: Any, method: str, path: str, **kw: Any) -> None:
    async with api(method, path, **kw) as r:
        assert r.status == 503, (method, path, r.status, await r.read())
        assert r.headers["Retry-After"] == "1"
        if path != "/readyz":
            assert_error(r.status, await r.json(), 503, "unavailable")


WRITES = [
    ("POST", "/v1/events", {"json": {"type": "order.paid", "payload": {}}}),
    ("POST", "/v1/endpoints", {"json": {"url": "http://127.0.0.1:9/h"}}),
]


async def test_read_only_redis_is_503_and_not_ready(own_redis: Any) -> None:
    """After REPLICAOF (a failover's demoted primary): publish and endpoint writes answer
    503, and /readyz says not ready (unguarded: 500, and ready)."""
    server, _, api = own_redis
    ep = await new_endpoint(api)
    admin = redis.Redis(port=server.port)
    admin.replicaof("127.0.0.1", free_port())  # a primary that is not there: read-only
    try:
        for method, path, kw in WRITES:
            await assert_unavailable(api, method, path, **kw)
        patch = {"json": {"description": "x"}}
        await assert_unavailable(api, "PATCH", f"/v1/endpoints/{ep['id']}", **patch)
        await assert_unavailable(api, "GET", "/readyz")
        async with api("GET", "/v1/stats") as r:
            assert r.status in (200, 503)  # reads may still be served by a replica
    finally:
        admin.replicaof("NO", "ONE")
        admin.close()
    async with api("GET", "/readyz") as r:
        assert r.status == 200


async def test_busy_redis_is_503_and_not_ready(own_redis: Any) -> None:
    """A script running past busy-reply-threshold: 503 (unguarded: every route 500)."""
    server, _, api = own_redis
    admin = redis.Redis(port=server.port)
    admin.config_set("busy-reply-threshold", 50)
    spin = "local t = redis.call('TIME')[1] while redis.call('TIME')[1] - t < 3 do end return 1"
    busy = threading.Thread(target=lambda: redis.Redis(port=server.port).eval(spin, 0))
    busy.start()
    try:
        await asyncio.sleep(0.3)  # past the threshold: Redis answers BUSY now
        for method, path, kw in [*WRITES, ("GET", "/v1/stats", {}), ("GET", "/readyz", {})]:
            await assert_unavailable(api, method, path, **kw)
    finally:
        await asyncio.to_thread(busy.join)
        admin.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        async with api("GET", "/readyz") as r:
            if r.status == 200:
                break
        await asyncio.sleep(0.05)
    async with api("POST", "/v1/events", json={"type": "t", "payload": 1}) as r:
        assert r.status == 201
