"""The SSRF guard through the real worker: loopback destinations refused, nothing sent.

A receiver listens on one port at 127.0.0.1, 127.1.2.3 and [::1], so every endpoint URL
below would reach it if the guard let the request go; the second test proves that by
sending the same URLs with private networks allowed (all on loopback). Only loopback
addresses are ever connected to: ``0.0.0.0`` appears only with the guard on, where no
connection is made. The other forbidden ranges (private, link-local, 169.254.169.254,
multicast, IPv6 unique-local) are covered as a pure function and through a stub resolver
with a connector that fails on any connection attempt, in ``test_ssrf.py``.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from relay.queue.store import Store
from relay.redisproc import free_port
from tests.helpers.pacing import add_endpoint, publish, until

pytestmark = pytest.mark.realredis

LOOPBACK_BINDS = ("127.0.0.1", "127.1.2.3", "::1")
GUARDED_HOSTS = (
    "127.0.0.1",
    "127.1.2.3",
    "localhost",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "0.0.0.0",
)


@pytest.fixture
async def everywhere() -> AsyncIterator[tuple[int, list[str]]]:
    """(port, request paths): one receiver on every loopback address used below."""
    seen: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        if request.path == "/redirect":  # to another loopback address, same receiver
            raise web.HTTPFound(f"http://127.1.2.3:{request.url.port}/target")
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    for _ in range(20):  # a port free on all three addresses
        port = free_port()
        try:
            for host in LOOPBACK_BINDS:
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((host, port))
                await web.SockSite(runner, sock).start()
            break
        except OSError:
            await runner.cleanup()
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            await runner.setup()
    else:
        raise RuntimeError("no port free on every loopback address")
    try:
        yield port, seen
    finally:
        await runner.cleanup()


async def _deliver_all(store: Store, urls: dict[str, str]) -> dict[str, dict[str, Any]]:
    """One delivery to each URL; run a worker until each has left delivering/pending."""
    ids = {}
    for name, url in urls.items():
        ep = await add_endpoint(store, url)
        ids[name] = await publish(store, ep["id"])

    async def finished() -> bool:
        rows = await store.get_deliveries(store.keys.shard(0), list(ids.values()))
        return all(r["status"] in ("dead", "succeeded") for r in rows)

    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        await until(finished, within=20)
    finally:
        stop.set()
        await task
    out = {}
    for name, d in ids.items():
        got = await store.get_delivery(d)
        assert got is not None
        out[name] = got
    return out


async def test_worker_refuses_loopback_destinations(
    make_store: Any, everywhere: tuple[int, list[str]]
) -> None:
    port, seen = everywhere
    store = await make_store(allow_private_networks=False)
    urls = {h: f"http://{h}:{port}/{i}" for i, h in enumerate(GUARDED_HOSTS)}
    urls["redirect"] = f"http://127.0.0.1:{port}/redirect"
    rows = await _deliver_all(store, urls)
    assert seen == []  # not one request reached the receiver
    for name, got in rows.items():
        assert got["status"] == "dead", name
        log = got["attempt_log"]
        assert len(log) == got["attempts"] == got["max_attempts"], name
        assert {e["error"] for e in log} == {"ssrf_refused"}, (name, log)
        assert all(e["status_code"] is None for e in log)
        assert "refused" in log[0]["detail"] and "RELAY_ALLOW_PRIVATE_NETWORKS" in log[0]["detail"]
        assert got["last_error"] == "ssrf_refused"
    assert "loopback" in rows["[::ffff:127.0.0.1]"]["attempt_log"][0]["detail"]
    assert "unspecified" in rows["0.0.0.0"]["attempt_log"][0]["detail"]


async def test_same_urls_reach_the_receiver_when_private_networks_are_allowed(
    make_store: Any, everywhere: tuple[int, list[str]]
) -> None:
    """The tripwire for the test above: its URLs do lead to the receiver. Redirects are
    still not followed: the 302 is the attempt's answer and /target gets nothing."""
    port, seen = everywhere
    store = await make_store(allow_private_networks=True, retry_schedule=(0.05,))
    loopback_only = [h for h in GUARDED_HOSTS if h != "0.0.0.0"]  # never connect there
    urls = {h: f"http://{h}:{port}/{i}" for i, h in enumerate(loopback_only)}
    urls["redirect"] = f"http://127.0.0.1:{port}/redirect"
    rows = await _deliver_all(store, urls)
    for i, h in enumerate(loopback_only):
        assert rows[h]["status"] == "succeeded", (h, rows[h]["attempt_log"])
        assert seen.count(f"/{i}") == 1
    redirected = rows["redirect"]
    assert [e["status_code"] for e in redirected["attempt_log"]] == [302, 302]
    assert redirected["status"] == "dead"
    assert seen.count("/redirect") == 2 and "/target" not in seen
