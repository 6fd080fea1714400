"""The delivery worker against a real Redis and a local receiver.

Each test runs ``Worker.run`` as an asyncio task with a stop Event. Waiting loops only
wait (with a deadline); what is asserted are counts, states and recorded timestamps,
never how long something took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import structlog
from aiohttp import web
from standardwebhooks.webhooks import Webhook

import relay.delivery.worker
from relay import __version__
from relay.delivery import attempt, sender
from relay.delivery.worker import Worker
from relay.domain import eventrecord, ids, signing
from relay.queue.store import Claimed, Store
from relay.redisproc import free_port
from relay.settings import Settings
from tests.helpers.worker import add_endpoint, publish, until

pytestmark = pytest.mark.realredis


@asynccontextmanager
async def running(store: Store, count: int = 1) -> AsyncIterator[list[Worker]]:
    stop = asyncio.Event()
    workers = [Worker(store, store.settings) for _ in range(count)]
    tasks = [asyncio.create_task(w.run(stop)) for w in workers]
    try:
        yield workers
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def status_is(store: Store, delivery_id: str, *statuses: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        d = await store.get_delivery(delivery_id)
        return d if d is not None and d["status"] in statuses else None

    return await until(check)  # type: ignore[no-any-return]


def answer(status: int, **headers: str) -> Callable[[web.Request], web.Response]:
    return lambda _: web.Response(status=status, headers=headers)


# ---------------------------------------------------------------------- outcomes


async def test_2xx_succeeds_signed_with_every_header(make_store: Any, receiver: Any) -> None:
    store = await make_store()
    ep = await add_endpoint(store, receiver.url + "/ok", headers={"X-Team": "payments"})
    event_id, (d,) = await publish(store, ep["id"], payload={"amount": 12.5, "s": "é"})
    async with running(store):
        got = await status_is(store, d, "succeeded")
    (req,) = receiver.requests
    Webhook(ep["secret"]).verify(req.body, req.headers)
    h = {k.lower(): v for k, v in req.headers.items()}
    assert h["webhook-id"] == event_id
    assert abs(int(h["webhook-timestamp"]) - time.time()) < 300
    assert h["webhook-signature"].startswith("v1,")
    assert h["content-type"] == "application/json"
    assert h["user-agent"] == f"relay/{__version__}"
    assert h["x-relay-delivery-id"] == d and h["x-relay-attempt"] == "1"
    assert h["x-team"] == "payments"
    body = orjson.loads(req.body)
    assert body["id"] == event_id and body["type"] == "order.paid"
    assert body["data"] == {"amount": 12.5, "s": "é"} and body["timestamp"].endswith("Z")
    assert got["attempts"] == 1 and got["last_status_code"] == 200
    (entry,) = got["attempt_log"]
    assert entry["status_code"] == 200 and entry["outcome"] == "succeeded"
    assert entry["worker"] == store.settings.worker_id and entry["duration_ms"] >= 0


async def test_a_compressed_payload_arrives_byte_for_byte(make_store: Any, receiver: Any) -> None:
    """Layout v3 stores a payload of 256 bytes and more zlib-compressed, without its
    envelope; the claim reads it as bytes, and the body sent is made again from it: byte
    for byte the body relay.publishing built, signed over those bytes."""
    store = await make_store()
    ep = await add_endpoint(store, receiver.url + "/ok")
    items = [{"sku": f"SKU-{i:04d}", "name": "grüße \u2603", "qty": i} for i in range(40)]
    event_id, (d,) = await publish(store, ep["id"], payload={"items": items})
    raw = await store.redis.get(store.keys.shard(0).event(event_id))
    assert eventrecord.header_of(raw)["z"] == 1
    async with running(store):
        await status_is(store, d, "succeeded")
    (req,) = receiver.requests
    created = ids.created_ms(event_id)
    assert created is not None
    sent = signing.build_body(event_id, "order.paid", created, orjson.dumps({"items": items}))
    assert req.body == sent
    Webhook(ep["secret"]).verify(req.body, req.headers)


@asynccontextmanager
async def raw_server(extra: bytes = b"") -> AsyncIterator[tuple[int, list[list[str]]]]:
    """A bare HTTP/1.1 server on loopback that answers 200 (with the ``extra`` header
    lines) and keeps each request's header lines as sent; yields its port and them."""
    heads: list[list[str]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")[1:-2]
        heads.append(head)
        length = next(int(h.split(":")[1]) for h in head if h.lower().startswith("content-l"))
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\n" + extra + b"Connection: close\r\nContent-Length: 0\r\n\r\n"
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], heads
    finally:
        server.close()


async def send_each(urls: list[str], headers: list[dict[str, str] | None]) -> None:
    """One request to each url through one worker session, as the worker sends them."""
    session = sender.make_session(timeout=5, limit=4, allow_private=True)
    try:
        for n, (url, extra) in enumerate(zip(urls, headers, strict=True)):
            secret = signing.generate_secret()
            ep = {"id": f"ep_{n}", "url": url, "secret": secret, "headers": extra}
            got = await sender.send(
                session, endpoint=ep, event_id="evt_1", delivery_id="dlv_1", attempt=2, body=b"{}"
            )
            assert got.status == 200
    finally:
        await session.close()


async def test_the_headers_sent_are_relays_own_and_nothing_else() -> None:
    """Every header on the wire, in order, as a raw server reads them: relay's own (no
    second Content-Type or User-Agent from aiohttp), custom ones before them and never
    in their place. Fails with relay's content-type left out of signed_headers (aiohttp
    then adds one: application/octet-stream)."""
    custom = {"X-Team": "payments", "user-agent": "other", "Content-Type": "text/plain"}
    async with raw_server() as (port, heads):
        url = f"http://127.0.0.1:{port}/h"
        # as stored before validation refused relay's own header names
        await send_each([url, url], [None, custom])
    own = [
        "content-type: application/json",
        f"user-agent: relay/{__version__}",
        "webhook-id: evt_1",
        "webhook-timestamp",
        "webhook-signature",
        "x-relay-delivery-id: dlv_1",
        "x-relay-attempt: 2",
        "Accept: */*",
        "Accept-Encoding",
        "Content-Length: 2",
    ]
    for head, first in zip(heads, (["Host"], ["Host", "X-Team: payments"]), strict=True):
        assert len(head) == len(first) + len(own)
        for line, want in zip(head, first + own, strict=True):
            assert line.startswith(want), (line, want)


async def test_a_cookie_one_endpoint_sets_is_never_sent_to_another() -> None:
    """One session sends for every tenant: a receiver's Set-Cookie is not kept. Seen
    failing with aiohttp's default cookie jar (the second endpoint, another app's path on
    the same host, got ``Cookie: session=tenant-a``)."""
    async with raw_server(b"Set-Cookie: session=tenant-a; Path=/\r\n") as (port, heads):
        # a host name: aiohttp's default jar takes no cookie from a bare IP address
        base = f"http://localhost:{port}"
        await send_each([base + p for p in ("/tenant-a", "/tenant-b", "/tenant-a")], [None] * 3)
    assert len(heads) == 3
    assert not any(h.lower().startswith("cookie:") for head in heads for h in head), heads


async def test_500_retried_on_schedule_then_dead(make_store: Any, receiver: Any) -> None:
    store = await make_store(retry_schedule=(0.05, 0.1))
    receiver.responses["/fail"] = answer(500)
    ep = await add_endpoint(store, receiver.url + "/fail")
    _, (d,) = await publish(store, ep["id"])
    async with running(store):
        got = await status_is(store, d, "dead")
    reqs = receiver.for_path("/fail")
    assert [r.headers["x-relay-attempt"] for r in reqs] == ["1", "2", "3"]
    assert len({r.headers["webhook-id"] for r in reqs}) == 1
    # the next try is never earlier than the schedule says (jitter is 0 in tests)
    for earlier, later, delay in zip(reqs, reqs[1:], (0.05, 0.1), strict=False):
        assert later.at - earlier.at >= delay - 0.005
    assert got["attempts"] == 3 and got["last_status_code"] == 500
    assert got["last_error"] == "http_status"
    log = got["attempt_log"]
    assert [e["n"] for e in log] == [1, 2, 3]
    assert [e["attempt"] for e in log] == [1, 2, 3]
    assert [e["outcome"] for e in log] == ["retry", "retry", "dead"]
    assert {e["status_code"] for e in log} == {500}
    assert all(e["worker"] == store.settings.worker_id for e in log)
    assert all(isinstance(e["duration_ms"], float | int) for e in log)


async def test_410_is_dead_at_once(make_store: Any, receiver: Any) -> None:
    store = await make_store()
    receiver.responses["/gone"] = answer(410)
    ep = await add_endpoint(store, receiver.url + "/gone")
    _, (d,) = await publish(store, ep["id"])
    async with running(store):
        got = await status_is(store, d, "dead")
    assert len(receiver.requests) == 1
    assert got["attempts"] == 1 and [e["outcome"] for e in got["attempt_log"]] == ["dead"]


@pytest.mark.parametrize("code", [429, 503])
async def test_retry_after_is_honoured_and_capped(
    make_store: Any, receiver: Any, code: int
) -> None:
    store = await make_store(retry_after_cap=1.5)
    answered: dict[str, float] = {}

    def limited(path: str, retry_after: str) -> Callable[[web.Request], web.Response]:
        def respond(request: web.Request) -> web.Response:
            if path in answered:
                return web.Response(text="ok")
            answered[path] = time.time()
            return web.Response(status=code, headers={"Retry-After": retry_after})

        return respond

    receiver.responses["/asks"] = limited("/asks", "1")
    receiver.responses["/greedy"] = limited("/greedy", "86400")
    asks = await add_endpoint(store, receiver.url + "/asks")
    greedy = await add_endpoint(store, receiver.url + "/greedy")
    _, (d_asks,) = await publish(store, asks["id"])
    _, (d_greedy,) = await publish(store, greedy["id"])
    async with running(store):
        pending = {}
        for d in (d_asks, d_greedy):

            async def retried(d: str = d) -> dict[str, Any] | None:
                got = await store.get_delivery(d)
                return got if got and got["attempt_log"] and got["status"] == "pending" else None

            pending[d] = await until(retried)
            pending[d]["read_at"] = time.time()
        done = [await status_is(store, d, "succeeded") for d in (d_asks, d_greedy)]
    # asked for 1 s: scheduled no sooner than 1 s after the 429/503 was answered ...
    assert pending[d_asks]["next_attempt_at"] >= answered["/asks"] * 1000 + 1000 - 2
    assert pending[d_asks]["attempt_log"][0]["status_code"] == code
    # ... and the next request came no sooner either
    first, second = receiver.for_path("/asks")
    assert second.at - first.at >= 1.0 - 0.005
    # asked for a day: capped at retry_after_cap (1.5 s) from when it was recorded
    assert pending[d_greedy]["next_attempt_at"] <= pending[d_greedy]["read_at"] * 1000 + 1500 + 2
    assert pending[d_greedy]["next_attempt_at"] >= answered["/greedy"] * 1000 + 1500 - 2
    assert [len(g["attempt_log"]) for g in done] == [2, 2]


async def test_connection_refused_is_logged_as_connection(make_store: Any) -> None:
    store = await make_store()
    ep = await add_endpoint(store, f"http://127.0.0.1:{free_port()}/closed")
    _, (d,) = await publish(store, ep["id"])
    async with running(store):
        got = await status_is(store, d, "dead")
    assert [e["error"] for e in got["attempt_log"]] == ["connection"] * 3
    assert {e["status_code"] for e in got["attempt_log"]} == {None}
    assert got["last_error"] == "connection" and got["last_status_code"] is None


async def test_timeout_is_logged_as_timeout(make_store: Any, receiver: Any) -> None:
    store = await make_store(http_timeout=0.3, retry_schedule=(60.0,))

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1.0)
        return web.Response(text="late")

    receiver.responses["/slow"] = slow
    ep = await add_endpoint(store, receiver.url + "/slow")
    _, (d,) = await publish(store, ep["id"])
    async with running(store):

        async def logged() -> dict[str, Any] | None:
            got = await store.get_delivery(d)
            return got if got and got["attempt_log"] else None

        got = await until(logged)
    (entry,) = got["attempt_log"]
    assert entry["error"] == "timeout" and entry["status_code"] is None
    assert got["status"] == "pending" and got["attempts"] == 1


async def test_redirects_are_not_followed(make_store: Any, receiver: Any) -> None:
    store = await make_store()
    receiver.responses["/moved"] = answer(302, Location=receiver.url + "/target")
    ep = await add_endpoint(store, receiver.url + "/moved")
    _, (d,) = await publish(store, ep["id"])
    async with running(store):
        got = await status_is(store, d, "dead")
    assert receiver.for_path("/target") == []
    assert len(receiver.for_path("/moved")) == 3
    assert [e["status_code"] for e in got["attempt_log"]] == [302, 302, 302]
    assert [e["outcome"] for e in got["attempt_log"]] == ["retry", "retry", "dead"]


async def test_deleted_endpoint_goes_dead(make_store: Any, receiver: Any) -> None:
    store = await make_store()
    ep = await add_endpoint(store, receiver.url + "/deleted")
    _, (d,) = await publish(store, ep["id"])
    assert await store.delete_endpoint(ep)
    async with running(store):
        got = await status_is(store, d, "dead")
    assert receiver.requests == []
    assert got["last_error"] == "endpoint_deleted" and got["attempts"] == 1
    assert [e["error"] for e in got["attempt_log"]] == ["endpoint_deleted"]


# ---------------------------------------------------------------------- leases, replay, wake


async def test_lease_is_extended_while_a_send_is_in_flight(make_store: Any, receiver: Any) -> None:
    """A send that outlives its lease (1.5 s) is kept by the heartbeat: two workers are
    running, and neither reclaims nor re-sends it. Fails with ``Leases.heartbeat``
    monkeypatched to a coroutine that only sleeps. (The lease leaves a loaded machine's
    event loop room to run the heartbeat, every third of it, in time.)"""
    store = await make_store(lease_seconds=1.5)

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(4.0)
        return web.Response(text="ok")

    receiver.responses["/slow"] = slow
    ep = await add_endpoint(store, receiver.url + "/slow")
    _, (d,) = await publish(store, ep["id"])
    async with running(store, count=2) as workers:
        got = await status_is(store, d, "succeeded")
        await asyncio.sleep(0.1)  # give a (wrong) second send the chance to show up
    assert len(receiver.requests) == 1
    assert got["attempts"] == 1 and len(got["attempt_log"]) == 1
    assert sum(w.stats.reclaimed for w in workers) == 0
    assert sum(w.stats.lease_extensions for w in workers) >= 2
    assert (await store.stats())["reclaimed_total"] == 0


async def test_replayed_dead_delivery_is_delivered_again(make_store: Any, receiver: Any) -> None:
    store = await make_store()
    receiver.responses["/flaky"] = answer(410)
    ep = await add_endpoint(store, receiver.url + "/flaky")
    _, (d,) = await publish(store, ep["id"])
    async with running(store):
        await status_is(store, d, "dead")
        del receiver.responses["/flaky"]
        assert await store.replay([d]) == {d: "ok"}
        got = await status_is(store, d, "succeeded")
    assert [r.headers["x-relay-attempt"] for r in receiver.requests] == ["1", "1"]
    assert [e["status_code"] for e in got["attempt_log"]] == [410, 200]
    assert got["replays"] == 1


async def test_idle_worker_wakes_on_publish(
    make_store: Any, receiver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the idle cap and the lease made huge, only the pub/sub wake can get these
    three deliveries out before the deadline. Fails (TimeoutError in wait_for) with
    ``Worker._listen`` monkeypatched to subscribe but ignore every message."""
    monkeypatch.setattr(relay.delivery.worker, "IDLE_CAP", 3600.0)
    store = await make_store(lease_seconds=3600.0)
    ep = await add_endpoint(store, receiver.url + "/wake")
    wake = store.keys.shard(0).wake
    published = []
    async with running(store):

        async def subscribed() -> bool:
            return dict(await store.redis.pubsub_numsub(wake)).get(wake, 0) >= 1

        await until(subscribed)
        for n in range(3):
            await asyncio.sleep(0.1)  # let the worker go idle
            event_id, _ = await publish(store, ep["id"])
            published.append(event_id)
            await receiver.wait_for(n + 1, within=8.0)
    assert [r.headers["webhook-id"] for r in receiver.requests] == published


async def test_an_endpoint_changed_by_another_replica_is_used_from_the_next_batch(
    make_store: Any, receiver: Any
) -> None:
    """The worker keeps endpoints cached while subscribed to their change channel: a
    PATCH through another replica (here a second Store) reaches it by that message, and
    the next delivery goes to the new URL; without a change, no batch reads them."""
    store, other = await make_store(), await make_store()
    ep = await add_endpoint(store, receiver.url + "/before")
    async with running(store) as (worker,):
        await until(_async(lambda: worker.endpoints.subscribed))
        await publish(store, ep["id"])
        await receiver.wait_for(1, path="/before")
        await publish(store, ep["id"])
        await receiver.wait_for(2, path="/before")
        assert worker.endpoints.hits >= 1  # the second batch read no endpoint
        generation = worker.endpoints._generation
        await other.update_endpoint(ep["id"], lambda e: {**e, "url": receiver.url + "/after"})
        await until(_async(lambda: worker.endpoints._generation > generation))
        await publish(store, ep["id"])
        await receiver.wait_for(1, path="/after")
    assert len(receiver.for_path("/before")) == 2


def _async(check: Callable[[], Any]) -> Callable[[], Any]:
    async def run() -> Any:
        return check()

    return run


# ---------------------------------------------------------------------- logs


async def test_logs_carry_ids_and_no_secrets(make_store: Any, receiver: Any) -> None:
    store = await make_store()
    receiver.responses["/fail"] = answer(500)
    ok = await add_endpoint(store, receiver.url + "/ok", headers={"Authorization": "Bearer hush"})
    bad = await add_endpoint(store, receiver.url + "/fail")
    event_id, (d_ok, d_bad) = await publish(store, ok["id"], bad["id"])
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        async with running(store):
            await status_is(store, d_ok, "succeeded")
            await status_is(store, d_bad, "dead")
    attempts = [e for e in logs if e["event"] == "delivery.attempt"]
    assert len(attempts) == 4
    by_delivery = {e["delivery_id"] for e in attempts}
    assert by_delivery == {d_ok, d_bad}
    for e in attempts:
        assert e["event_id"] == event_id
        assert e["endpoint_id"] == (ok["id"] if e["delivery_id"] == d_ok else bad["id"])
        assert "status" in e and "attempt" in e
    text = orjson.dumps(logs, default=str).decode()
    signatures = {r.headers["webhook-signature"] for r in receiver.requests}
    for secret in (ok["secret"], bad["secret"]):
        assert secret not in text and secret.removeprefix("whsec_") not in text
    for sig in signatures:
        for part in sig.split():
            assert part.split(",", 1)[1] not in text
    assert "hush" not in text


# ---------------------------------------------------------------------- one attempt (pure)


def test_attempt_classifies_answers_and_builds_the_log_entry() -> None:
    settings = Settings.from_env({"RELAY_RETRY_SCHEDULE": "5s,5m", "RELAY_RETRY_JITTER": "0"})
    c = Claimed("dlv_1", "tok", 1, 3, "evt_1", "ep_1", "{}")

    def answer(status: int | None, retry_after: str | None = None) -> sender.Response:
        error = "connection" if status is None else ""  # no HTTP answer: a transport error
        return sender.Response(status, error, "", retry_after, 0.01, "ok")

    assert [attempt.verdict(answer(s)) for s in (200, 299, 429, 503, 410, None)] == [
        "1",
        "1",
        "-",
        "0",
        "0",
        "0",
    ]
    acked = sender.Response(None, "", "XADD events 1-0", None, 0.01, "")  # a broker's ack
    assert attempt.verdict(acked) == "1"
    assert attempt.decide(c, acked, settings).outcome == "succeeded"
    refused = sender.Response(None, "refused", "no stream", None, 0.01, "")
    assert attempt.decide(c, refused, settings).delay == 5.0
    assert attempt.decide(c, answer(200), settings).outcome == "succeeded"
    assert attempt.decide(c, answer(410), settings).outcome == "dead"
    assert attempt.decide(c, answer(500), settings).delay == 5.0
    later = attempt.decide(c, answer(429, "60"), settings, clock=lambda: 0.0)
    assert (later.outcome, later.delay) == ("retry", 60.0)
    done = attempt.outcome(
        c, "retry", 5000, 500, "http_status", "x" * 600, worker="w1", at_ms=7, duration=0.0123
    )
    assert (done.id, done.token, done.outcome, done.delay_ms) == ("dlv_1", "tok", "retry", 5000)
    assert orjson.loads(done.entry) == {
        "attempt": 1,
        "at": 7,
        "duration_ms": 12.3,
        "status_code": 500,
        "error": "http_status",
        "detail": "x" * sender.BODY_CAP,
        "outcome": "retry",
        "worker": "w1",
    }
