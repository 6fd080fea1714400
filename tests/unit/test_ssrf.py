"""Tests for relay.delivery.ssrf.

Network rule: the only real connections made here go to a test server bound to 127.0.0.1.
Every other destination is exercised as a pure function or through ``StubResolver``, with
the ``no_connect`` tripwire failing the test if a connection is ever attempted.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client_reqrep import ConnectionKey, RequestInfo
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from relay.delivery.ssrf import (
    ForbiddenDestination,
    GuardedConnector,
    GuardedResolver,
    describe_error,
    find_forbidden,
    forbidden_reason,
    make_connector,
)

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.1.2.3", "loopback"),
    ("10.0.0.5", "private"),
    ("172.16.1.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "cloud metadata"),
    ("169.254.1.1", "link-local"),
    ("100.64.0.1", "shared address space (CGNAT)"),
    ("100.127.255.254", "shared address space (CGNAT)"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "this network (0.0.0.0/8)"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    ("192.0.2.1", "documentation"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("192.0.0.8", "reserved"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("fd00:ec2::254", "cloud metadata"),
    ("fc00::1", "unique-local"),
    ("fd12::1", "unique-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("febf:ffff::1", "link-local"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("ff0e::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("100::1", "reserved"),
    ("::ffff:127.0.0.1", "loopback (IPv4-mapped)"),
    ("::ffff:10.0.0.1", "private (IPv4-mapped)"),
    ("::ffff:169.254.169.254", "cloud metadata (IPv4-mapped)"),
    ("64:ff9b::10.0.0.1", "private (NAT64)"),
    ("64:ff9b::169.254.169.254", "cloud metadata (NAT64)"),
    ("64:ff9b::127.0.0.1", "loopback (NAT64)"),
    ("64:ff9b:1::a00:1", "reserved"),
    ("2002:7f00:1::1", "loopback (6to4)"),
    ("2002:a9fe:a9fe::", "cloud metadata (6to4)"),
    ("::10.0.0.1", "private (IPv4-compatible)"),
    ("::8.8.8.8", "reserved"),
    ("2001::1", "reserved (Teredo)"),  # client 255.255.255.254
    ("2001:0:4136:e378:8000:0:f7f7:f7f7", "reserved"),  # Teredo, client 8.8.8.8
    ("4000::1", "reserved"),  # outside 2000::/3 global unicast
]
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
]


@pytest.mark.parametrize(("ip", "reason"), REFUSED)
def test_forbidden_reason_refuses(ip: str, reason: str) -> None:
    assert forbidden_reason(ip) == reason
    if "%" not in ip:
        assert forbidden_reason(ipaddress.ip_address(ip)) == reason


@pytest.mark.parametrize("ip", PUBLIC)
def test_forbidden_reason_accepts_public(ip: str) -> None:
    assert forbidden_reason(ip) is None
    assert forbidden_reason(ipaddress.ip_address(ip)) is None


def test_forbidden_reason_rejects_non_ip() -> None:
    with pytest.raises(ValueError):
        forbidden_reason("rebind.test")


# --- stub resolver and no-connect tripwire ------------------------------------------------


def _result(host: str, ip: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    return ResolveResult(hostname=host, host=ip, port=port, family=family, proto=0, flags=0)


class StubResolver(AbstractResolver):
    """Canned answers for made-up names; never touches the network."""

    def __init__(self, answers: Mapping[str, list[str] | list[list[str]]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.calls.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "stub: unknown host")
        answer = self.answers[host]
        if answer and isinstance(answer[0], list):  # a sequence of answers, one per call
            ips: list[str] = answer.pop(0)  # type: ignore[assignment]
        else:
            ips = answer  # type: ignore[assignment]
        return [_result(host, ip, port) for ip in ips]

    async def close(self) -> None:
        pass


def _install_tripwire(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record and fail any connection attempt (aiohttp's funnel and the loop's primitives)."""
    attempts: list[Any] = []

    def trip(*args: Any, **kwargs: Any) -> Any:
        attempts.append((args, kwargs))
        raise AssertionError(f"connection attempted: {args!r} {kwargs!r}")

    async def atrip(*args: Any, **kwargs: Any) -> Any:
        return trip(*args, **kwargs)

    loop = asyncio.get_running_loop()
    monkeypatch.setattr(aiohttp.TCPConnector, "_wrap_create_connection", atrip)
    monkeypatch.setattr(loop, "create_connection", atrip)
    monkeypatch.setattr(loop, "sock_connect", atrip)
    return attempts


@pytest.fixture
async def no_connect(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[Any]]:
    attempts = _install_tripwire(monkeypatch)
    yield attempts
    assert attempts == [], "a connection was attempted"


# --- GuardedResolver ----------------------------------------------------------------------


RESOLVER_REFUSES = [
    *("10.0.0.5", "172.16.1.1", "192.168.1.1", "169.254.169.254", "224.0.0.1"),
    *("fd12::1", "fe80::1"),
]


@pytest.mark.parametrize("ip", RESOLVER_REFUSES)
async def test_guarded_resolver_refuses(ip: str, no_connect: list[Any]) -> None:
    resolver = GuardedResolver(StubResolver({"rebind.test": [ip]}))
    with pytest.raises(ForbiddenDestination) as info:
        await resolver.resolve("rebind.test", 443, socket.AF_UNSPEC)
    assert info.value.refused == ((ip, forbidden_reason(ip)),)
    assert f"rebind.test ({ip}) refused" in str(info.value)
    assert "RELAY_ALLOW_PRIVATE_NETWORKS=1" in str(info.value)


async def test_guarded_resolver_keeps_only_public(no_connect: list[Any]) -> None:
    mix = ["10.0.0.5", "93.184.216.34", "169.254.169.254", "fd12::1", "2606:4700:4700::1111"]
    resolver = GuardedResolver(StubResolver({"rebind.test": mix}))
    got = await resolver.resolve("rebind.test", 443, socket.AF_UNSPEC)
    assert [r["host"] for r in got] == ["93.184.216.34", "2606:4700:4700::1111"]


async def test_each_resolution_is_checked(no_connect: list[Any]) -> None:
    """A rebinding answer (public, then private) is caught on the second lookup."""
    stub = StubResolver({"rebind.test": [["93.184.216.34"], ["10.0.0.5"]]})
    connector = GuardedConnector(resolver=stub, use_dns_cache=False)
    try:
        first = await connector._resolve_host("rebind.test", 80)
        assert [r["host"] for r in first] == ["93.184.216.34"]
        with pytest.raises(ForbiddenDestination):
            await connector._resolve_host("rebind.test", 80)
    finally:
        await connector.close()
    assert stub.calls == ["rebind.test", "rebind.test"]


# --- full sessions, refused before connecting --------------------------------------------


async def _post(connector: aiohttp.BaseConnector, url: str) -> BaseException | int:
    async with aiohttp.ClientSession(connector=connector) as session:
        try:
            async with session.post(url, data=b"{}", headers={"Authorization": "x"}) as r:
                return r.status
        except Exception as exc:
            return exc


async def test_session_refuses_private_dns_answer(no_connect: list[Any]) -> None:
    stub = StubResolver({"rebind.test": ["10.1.2.3"]})
    exc = await _post(GuardedConnector(resolver=stub, limit=5), "http://rebind.test:9/")
    assert isinstance(exc, aiohttp.ClientConnectorDNSError)
    assert isinstance(exc.os_error, ForbiddenDestination)
    assert isinstance(exc.__cause__, ForbiddenDestination)
    assert find_forbidden(exc) is exc.os_error
    kind, detail = describe_error(exc)
    assert kind == "ssrf_refused"
    assert detail.startswith("destination rebind.test (10.1.2.3) refused: private address")
    assert stub.calls == ["rebind.test"]


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1:9/", "http://[fd00::1]:9/", "http://169.254.169.254/"]
)
async def test_session_refuses_ip_literals(url: str, no_connect: list[Any]) -> None:
    stub = StubResolver({})
    exc = await _post(GuardedConnector(resolver=stub), url)
    assert isinstance(exc, BaseException)
    assert describe_error(exc)[0] == "ssrf_refused", exc
    assert stub.calls == []  # aiohttp never asks the resolver about literals


def test_make_connector_kinds() -> None:
    async def build() -> None:
        guarded = make_connector(allow_private=False, limit=7)
        plain = make_connector(allow_private=True, limit=7)
        assert isinstance(guarded, GuardedConnector) and guarded.limit == 7
        assert type(plain) is aiohttp.TCPConnector and plain.limit == 7
        await guarded.close()
        await plain.close()

    asyncio.run(build())


# --- real loopback server -----------------------------------------------------------------


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, dict[str, int]]]:
    hits = {"/": 0, "/redirect": 0, "/other": 0}
    port = 0

    def handler(path: str) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.StreamResponse:
            hits[path] += 1
            if path == "/redirect":
                raise web.HTTPFound(f"http://127.0.0.1:{port}/other")
            return web.Response(text="ok")

        return handle

    app = web.Application()
    for path in hits:
        app.router.add_post(path, handler(path))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)  # loopback only
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield port, hits
    finally:
        await runner.cleanup()


LOCAL_STUB = {"localhost": ["127.0.0.1", "::1"]}  # what /etc/hosts says, without asking it


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.1.2.3", "localhost", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0"],
)
async def test_guard_refuses_loopback(
    host: str, server: tuple[int, dict[str, int]], no_connect: list[Any]
) -> None:
    port, hits = server
    connector = make_connector(allow_private=False, limit=5, resolver=StubResolver(LOCAL_STUB))
    exc = await _post(connector, f"http://{host}:{port}/")
    assert isinstance(exc, BaseException)
    assert describe_error(exc)[0] == "ssrf_refused", exc
    assert hits["/"] == 0


async def test_tripwire_is_live(
    server: tuple[int, dict[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tripwire really stops a connection (here, one the guard would allow)."""
    port, hits = server
    attempts = _install_tripwire(monkeypatch)
    exc = await _post(make_connector(allow_private=True, limit=5), f"http://127.0.0.1:{port}/")
    assert isinstance(exc, AssertionError) and len(attempts) == 1
    assert hits["/"] == 0


async def test_allow_private_reaches_loopback(server: tuple[int, dict[str, int]]) -> None:
    port, hits = server
    connector = make_connector(allow_private=True, limit=5, resolver=StubResolver({}))
    assert await _post(connector, f"http://127.0.0.1:{port}/") == 200
    assert hits["/"] == 1


async def test_redirect_is_not_followed(server: tuple[int, dict[str, int]]) -> None:
    port, hits = server
    connector = make_connector(allow_private=True, limit=5, resolver=StubResolver({}))
    async with aiohttp.ClientSession(connector=connector) as session:
        url = f"http://127.0.0.1:{port}/redirect"
        async with session.post(url, data=b"{}", allow_redirects=False) as resp:
            assert resp.status == 302
            assert resp.headers["Location"] == f"http://127.0.0.1:{port}/other"
    assert hits == {"/": 0, "/redirect": 1, "/other": 0}


# --- describe_error -----------------------------------------------------------------------

KEY = ConnectionKey("hook.test", 443, True, True, None, None, None)


def _response_error() -> aiohttp.ClientResponseError:
    headers = CIMultiDictProxy(CIMultiDict({"Authorization": "Bearer s3cret"}))
    info = RequestInfo(URL("https://hook.test/"), "POST", headers)
    return aiohttp.ClientResponseError(info, (), status=500, message="Internal Server Error")


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda: ForbiddenDestination("10.0.0.5", [("10.0.0.5", "private")]), "ssrf_refused"),
        (lambda: TimeoutError(), "timeout"),
        (lambda: aiohttp.ServerTimeoutError("read timeout"), "timeout"),
        (lambda: aiohttp.ConnectionTimeoutError("connect timeout"), "timeout"),
        (lambda: aiohttp.ClientSSLError(KEY, OSError(1, "bad cert")), "tls"),
        (lambda: ssl.SSLError(1, "handshake"), "tls"),
        (lambda: aiohttp.ClientConnectorDNSError(KEY, socket.gaierror(-2, "nx")), "dns"),
        (lambda: socket.gaierror(-2, "Name or service not known"), "dns"),
        (
            lambda: aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "no")),
            "connection",
        ),
        (lambda: ConnectionResetError(104, "reset"), "connection"),
        (lambda: aiohttp.ServerDisconnectedError(), "connection"),
        (lambda: aiohttp.ClientPayloadError("truncated"), "protocol"),
        (_response_error, "protocol"),
        (lambda: ValueError("boom"), "error"),
    ],
)
def test_describe_error_classes(make: Callable[[], BaseException], kind: str) -> None:
    got, detail = describe_error(make())
    assert got == kind
    assert detail and "\n" not in detail and len(detail) <= 300


def test_describe_error_finds_refusal_in_chain() -> None:
    refusal = ForbiddenDestination("rebind.test", [("10.0.0.5", "private")])
    try:
        try:
            raise refusal
        except OSError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as outer:
        assert describe_error(outer) == ("ssrf_refused", str(refusal))
    wrapped = aiohttp.ClientConnectorDNSError(KEY, refusal)
    assert "refused: private address" in str(wrapped)  # strerror carries the message
    assert describe_error(wrapped)[0] == "ssrf_refused"


def test_describe_error_detail_is_short_and_headerless() -> None:
    kind, detail = describe_error(_response_error())
    assert kind == "protocol" and "500" in detail and "s3cret" not in detail
    _, long = describe_error(RuntimeError("x\n" * 1000))
    assert len(long) == 300 and "\n" not in long
