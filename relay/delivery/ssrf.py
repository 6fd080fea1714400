"""Outbound-request guard (SSRF) for the webhook sender and broker destinations.

Webhook URLs are user-supplied, so without a guard a tenant could make relay POST to
``http://169.254.169.254/``, ``http://localhost:6379/`` or anything else on our own
network. The check must be made on the *address actually connected to*, not on the URL:
checking a hostname once and then letting the HTTP client resolve it again is defeated by
DNS rebinding (first answer public, second answer ``10.0.0.5``).

aiohttp's ``TCPConnector`` connects only to the list of addresses returned by
``_resolve_host`` (the resolver's answer, the DNS cache, or the IP literal itself), so
filtering that list is the checkpoint: there is no second lookup to rebind. Two layers:

* ``GuardedResolver`` drops forbidden addresses from every answer before aiohttp caches it.
* ``GuardedConnector._resolve_host`` re-checks what aiohttp is about to connect to, which
  also covers IP-literal URLs (aiohttp never calls the resolver for those).

A refusal raises ``ForbiddenDestination`` (an ``OSError``). aiohttp wraps resolver-stage
``OSError``\\ s as ``ClientConnectorDNSError(key, exc) from exc``; callers detect a refusal
with ``find_forbidden(exc)`` (walks ``os_error``/``__cause__``/``__context__``) or via
``describe_error(exc)[0] == "ssrf_refused"``. Redirects must not be followed by callers
(``allow_redirects=False``): the guard would re-check them, but a webhook has no use for them.
Do not route through an HTTP proxy (``trust_env``): the proxy, not relay, would resolve.

Broker destinations (relay.delivery.destinations) resolve their host with
:func:`checked_address` and connect to the address it returns.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Sequence
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.tracing import Trace

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
ALLOW_HINT = "set RELAY_ALLOW_PRIVATE_NETWORKS=1 to allow"

# Checked in order, first match names the reason: cloud metadata (AWS/GCP/Azure/OpenStack
# IMDS, Alibaba, Azure wireserver, AWS IMDS over IPv6) precedes the ranges containing it.
_RULES: dict[str, str] = {
    "cloud metadata": "169.254.169.254/32 100.100.100.200/32 168.63.129.16/32 fd00:ec2::254/128",
    "unspecified": "0.0.0.0/32 ::/128",
    "this network (0.0.0.0/8)": "0.0.0.0/8",
    "loopback": "127.0.0.0/8 ::1/128",
    "private": "10.0.0.0/8 172.16.0.0/12 192.168.0.0/16",
    "shared address space (CGNAT)": "100.64.0.0/10",
    "link-local": "169.254.0.0/16 fe80::/10",
    "unique-local": "fc00::/7",
    "site-local": "fec0::/10",
    "documentation": "192.0.2.0/24 198.51.100.0/24 203.0.113.0/24 2001:db8::/32 3fff::/20",
    "benchmarking": "198.18.0.0/15 2001:2::/48",
    "multicast": "224.0.0.0/4 ff00::/8",
    "broadcast": "255.255.255.255/32",
    # IETF protocol assignments, old 6to4 relays, class E, local-use NAT64, discard-only
    "reserved": "192.0.0.0/24 192.88.99.0/24 240.0.0.0/4 64:ff9b:1::/48 100::/64",
}
_NETWORKS = tuple((ipaddress.ip_network(n), why) for why, ns in _RULES.items() for n in ns.split())
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_V4_COMPAT = ipaddress.IPv6Network("::/96")


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address a v6 address stands for (mapped, NAT64, 6to4, compat, Teredo)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "IPv4-mapped"
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "NAT64"
    if ip.sixtofour is not None:
        return ip.sixtofour, "6to4"
    if ip.teredo is not None:
        return ip.teredo[1], "Teredo"
    if ip in _V4_COMPAT and int(ip) > 1:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "IPv4-compatible"
    return None


def forbidden_reason(ip: str | IPAddress) -> str | None:
    """Why relay must not connect to ``ip``, or None if it is a public address.

    Raises ValueError if ``ip`` (a string) is not an IP address.
    """
    addr = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
    if isinstance(addr, ipaddress.IPv6Address) and addr.scope_id:  # "fe80::1%eth0"
        addr = ipaddress.IPv6Address(int(addr))
    for net, why in _NETWORKS:
        if addr in net:  # False across IP versions
            return why
    if isinstance(addr, ipaddress.IPv4Address):
        return None if addr.is_global else "reserved"
    embedded = _embedded_v4(addr)
    if embedded is not None:
        inner = forbidden_reason(embedded[0])
        if inner is not None:
            return f"{inner} ({embedded[1]})"
    if addr.ipv4_mapped is not None or addr in _NAT64:
        return None  # a public IPv4 address, spelled in IPv6
    if addr not in _GLOBAL_UNICAST_V6 or not addr.is_global:
        return "reserved"
    return None


class ForbiddenDestination(OSError):
    """Every address of the destination is in a forbidden range; nothing was sent."""

    def __init__(self, host: str, refused: Sequence[tuple[str, str]]) -> None:
        self.host = host
        self.refused = tuple(refused)  # (address, reason) pairs
        ips = ", ".join(ip for ip, _ in self.refused) or "no address"
        where = ips if host == ips else f"{host} ({ips})"
        reasons = ", ".join(dict.fromkeys(f"{why} address" for _, why in self.refused))
        message = f"destination {where} refused: {reasons} ({ALLOW_HINT})"
        super().__init__(message)
        self.strerror = message  # ClientConnectorError.__str__ shows strerror


def _reason_for(host: str) -> str:
    try:
        return forbidden_reason(host) or ""
    except ValueError:
        return "unparsable"


def check_results(host: str, results: list[ResolveResult]) -> list[ResolveResult]:
    """Drop forbidden addresses; raise ForbiddenDestination if none are left."""
    kept = [r for r in results if not _reason_for(r["host"])]
    if not results:  # an empty list would trip an assert in aiohttp; fail as DNS does
        raise OSError(f"{host}: resolver returned no addresses")
    if not kept:
        raise ForbiddenDestination(host, [(r["host"], _reason_for(r["host"])) for r in results])
    return kept


def find_forbidden(exc: BaseException) -> ForbiddenDestination | None:
    """The ForbiddenDestination behind ``exc`` (itself, its os_error, cause or context)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        cur = todo.pop()
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, ForbiddenDestination):
            return cur
        todo += [getattr(cur, "os_error", None), cur.__cause__, cur.__context__]
    return None


class GuardedResolver(AbstractResolver):
    """Wraps a resolver and removes every forbidden address from its answers."""

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._inner = inner
        self._owns_inner = inner is None

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if self._inner is None:  # created lazily: ThreadedResolver needs a running loop
            self._inner = aiohttp.ThreadedResolver()
        return check_results(host, await self._inner.resolve(host, port, family))

    async def close(self) -> None:
        if self._inner is not None and self._owns_inner:
            await self._inner.close()


class GuardedConnector(aiohttp.TCPConnector):
    """TCPConnector that refuses forbidden destinations, IP literals included."""

    def __init__(self, *, resolver: AbstractResolver | None = None, **kwargs: Any) -> None:
        if not isinstance(resolver, GuardedResolver):
            resolver = GuardedResolver(resolver)
        kwargs.setdefault("ttl_dns_cache", 10)
        super().__init__(resolver=resolver, **kwargs)
        self._resolver_owner = True  # close the wrapper (it closes only what it created)

    async def _resolve_host(
        self, host: str, port: int, traces: Sequence[Trace] | None = None
    ) -> list[ResolveResult]:
        return check_results(host, await super()._resolve_host(host, port, traces=traces))


def make_connector(
    *, allow_private: bool, limit: int, resolver: AbstractResolver | None = None
) -> aiohttp.TCPConnector:
    """The sender's connector: guarded unless private networks are explicitly allowed."""
    if allow_private:
        return aiohttp.TCPConnector(limit=limit, ttl_dns_cache=10, resolver=resolver)
    return GuardedConnector(limit=limit, ttl_dns_cache=10, resolver=resolver)


async def checked_address(host: str, port: int, *, allow_private: bool) -> str:
    """The address to connect to for a broker destination's ``host``: resolved once,
    forbidden addresses dropped (ForbiddenDestination when none is left), so the
    connection goes to the address that was checked."""
    try:
        ip = ipaddress.ip_address(host)
        ips = [str(ip)]
    except ValueError:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        ips = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not ips:
        raise OSError(f"{host}: resolver returned no addresses")
    if allow_private:
        return ips[0]
    kept = [ip for ip in ips if not _reason_for(ip)]
    if not kept:
        raise ForbiddenDestination(host, [(ip, _reason_for(ip)) for ip in ips])
    return kept[0]


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def describe_error(exc: BaseException) -> tuple[str, str]:
    """Map a send exception to (error_class, detail) for the attempt log; never headers."""
    refused = find_forbidden(exc)
    if refused is not None:
        return "ssrf_refused", _one_line(str(refused))
    name = type(exc).__name__
    if isinstance(exc, aiohttp.ClientResponseError):  # str() is safe, but be explicit
        return "protocol", _one_line(f"{name}: {exc.status} {exc.message}")
    if isinstance(exc, (TimeoutError, aiohttp.ServerTimeoutError)):
        kind = "timeout"
    elif isinstance(exc, (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch, ssl.SSLError)):
        kind = "tls"
    elif isinstance(exc, (aiohttp.ClientConnectorDNSError, socket.gaierror)):
        kind = "dns"
    elif isinstance(exc, (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError, ConnectionError)):
        kind = "connection"
    elif isinstance(exc, aiohttp.ClientError):
        kind = "protocol"
    else:
        kind = "error"
    text = str(exc)
    return kind, _one_line(f"{name}: {text}" if text else name)
