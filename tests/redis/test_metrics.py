"""``/metrics``: parses with prometheus-client's own parser, and the series move.

Counters are process-wide (every test in the session adds to them), so the tests compare
a scrape before with a scrape after; the Redis-backed gauges belong to each test's own
key prefix and are compared as values.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from relay.delivery.worker import Worker
from relay.domain.schema import endpoint_record
from relay.ops import metrics
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer, free_port
from relay.runner import run_worker
from tests.helpers import make_settings, publish_event

pytestmark = pytest.mark.realredis

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

REQUIRED = {
    # DESIGN.md
    "relay_deliveries",
    "relay_delivery_duration_seconds",
    "relay_queue_due",
    "relay_queue_processing",
    "relay_dead_letters",
    "relay_reclaimed",
    # per attempt, per endpoint, per claim
    "relay_attempts",
    "relay_endpoint_breaker_state",
    "relay_claim_batch_size",
    "relay_lease_extensions",
}


def parse(text: str) -> tuple[set[str], Samples]:
    families = list(text_string_to_metric_families(text))
    samples: Samples = {}
    for family in families:
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return {f.name for f in families}, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(url: str) -> tuple[set[str], Samples]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return parse(await resp.text())


async def add_endpoint(store: Store, url: str) -> str:
    ep = endpoint_record(url=url)
    await store.put_endpoint(ep)
    return str(ep["id"])


async def publish(store: Store, endpoint_id: str) -> str:
    _, (delivery_id,), _ = await publish_event(store, [endpoint_id], payload=b"{}")
    return delivery_id


async def test_metrics_parse_and_list_every_series(make_store: Any, make_api: Any) -> None:
    store = await make_store()
    await add_endpoint(store, "http://127.0.0.1:9/")
    api = await make_api(store)
    names, samples = await scrape(api.url + "/metrics")
    assert names >= REQUIRED
    assert value(samples, "relay_redis_up") == 1
    assert value(samples, "relay_endpoints") == 1


async def test_series_move_as_deliveries_happen(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    """One delivery succeeds slowly (lease extensions), one gets 410 (dead, breaker open),
    one was claimed by a "worker" that died (reclaimed, then delivered)."""
    store = await make_store(lease_seconds=1.0, breaker_threshold=1)
    api = await make_api(store)
    url = api.url + "/metrics"

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(2.5)  # longer than the 1 s lease: the heartbeat extends it
        return web.Response(text="ok")

    receiver.responses["/slow"] = slow
    receiver.responses["/gone"] = lambda request: web.Response(status=410)
    ok = await add_endpoint(store, receiver.url + "/ok")
    slow_ep = await add_endpoint(store, receiver.url + "/slow")
    gone = await add_endpoint(store, receiver.url + "/gone")
    sk = store.keys.shard(0)

    ghost = await publish(store, ok)
    claimed = await store.claim(sk, limit=1, lease_ms=1, token_prefix="ghost", worker="ghost")
    assert [c.id for c in claimed.items] == [ghost]  # its worker "dies": never reports
    await publish(store, slow_ep)
    await publish(store, gone)

    _, before = await scrape(url)
    assert value(before, "relay_queue_due") == 2
    assert value(before, "relay_queue_processing") == 1
    assert value(before, "relay_dead_letters") == 0
    assert value(before, "relay_endpoint_breaker_state", endpoint=gone) == 0

    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        await receiver.wait_for(1, path="/slow")
        _, during = await scrape(url)
        assert value(during, "relay_queue_processing") >= 1
        for _ in range(200):  # until everything is recorded (at most ~20 s)
            counts = (await store.stats())["counts"]
            if counts["succeeded"] == 2 and counts["dead"] == 1:
                break
            await asyncio.sleep(0.1)
        assert counts["succeeded"] == 2 and counts["dead"] == 1
    finally:
        stop.set()
        await task
    _, after = await scrape(url)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("relay_deliveries_total", outcome="succeeded") == 2
    assert moved("relay_deliveries_total", outcome="dead") == 1
    assert moved("relay_attempts_total", code_class="2xx") == 2
    assert moved("relay_attempts_total", code_class="4xx") == 1
    assert moved("relay_delivery_duration_seconds_count") == 3
    assert moved("relay_delivery_duration_seconds_bucket", le="+Inf") == 3
    assert moved("relay_claim_batch_size_sum") == 3  # ghost again, slow, gone
    assert moved("relay_reclaimed_total") == 1
    assert moved("relay_lease_extensions_total") >= 1
    assert value(after, "relay_queue_due") == 0
    assert value(after, "relay_queue_processing") == 0
    assert value(after, "relay_dead_letters") == 1
    assert value(after, "relay_endpoint_breaker_state", endpoint=gone) == 2  # open
    assert value(after, "relay_endpoint_breaker_state", endpoint=ok) == 0
    assert ("relay_endpoint_breaker_state", (("endpoint", slow_ep),)) in after


async def test_worker_serves_its_own_metrics(make_store: Any) -> None:
    """RELAY_METRICS_PORT: `relay worker` (here in-process, as the runner runs it) serves
    /metrics."""
    port = free_port()
    store = await make_store(metrics_port=port, host="127.0.0.1")
    await publish(store, await add_endpoint(store, "http://127.0.0.1:9/"))
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(store, stop))
    try:
        for _ in range(100):  # the exporter starts with the worker
            try:
                names, samples = await scrape(f"http://127.0.0.1:{port}/metrics")
                break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
        assert names >= REQUIRED
        assert value(samples, "relay_redis_up") == 1
    finally:
        stop.set()
        await task
    with pytest.raises(aiohttp.ClientConnectionError):  # and stops with it
        await scrape(f"http://127.0.0.1:{port}/metrics")


async def test_metrics_port_setting() -> None:
    from relay.settings import Settings, SettingsError

    assert Settings.from_env({}).metrics_port == 0
    assert Settings.from_env({"RELAY_METRICS_PORT": "9108"}).metrics_port == 9108
    with pytest.raises(SettingsError):
        Settings.from_env({"RELAY_METRICS_PORT": "70000"})


async def test_breaker_gauge_is_capped(make_store: Any, make_api: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(metrics, "BREAKER_CAP", 3)
    store = await make_store()
    for _ in range(5):
        await add_endpoint(store, "http://127.0.0.1:9/")
    api = await make_api(store)
    _, samples = await scrape(api.url + "/metrics")
    exported = [k for k in samples if k[0] == "relay_endpoint_breaker_state"]
    assert len(exported) == 3
    assert value(samples, "relay_endpoints") == 5


async def test_metrics_still_answer_when_redis_is_away(make_api: Any, tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path, appendonly=False)
    server.start()
    settings = make_settings(redis_url=server.url)
    store = Store(connect(settings), settings)
    try:
        api = await make_api(store)
        server.stop()
        names, samples = await scrape(api.url + "/metrics")
        assert value(samples, "relay_redis_up") == 0
        assert "relay_deliveries" in names  # the process's own series are still there
    finally:
        server.stop()
        await store.close()


def test_the_tallies_expose_what_prometheus_client_would() -> None:
    """``metrics.Attempts`` (plain tallies, collected at scrape time) writes the exposition
    prometheus-client's own Counter and Histogram write for the same sends, their
    ``_created`` times aside: bucket edges (a duration on a bound counts in that bound's
    bucket), the +Inf bucket, any status's class (fails with ``bisect_right``)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    tally = metrics.Attempts()
    ours = CollectorRegistry()
    ours.register(tally)
    docs = {m.name: m.documentation for m in tally.collect()}
    theirs = CollectorRegistry()
    deliveries = Counter("relay_deliveries", docs["relay_deliveries"], ["outcome"], registry=theirs)
    attempts = Counter("relay_attempts", docs["relay_attempts"], ["code_class"], registry=theirs)
    name = "relay_delivery_duration_seconds"
    duration = Histogram(name, docs[name], buckets=metrics.DURATION_BUCKETS, registry=theirs)
    sends = [
        ("succeeded", 200, 0.003),
        ("retry", 503, 0.2),
        ("dead", None, 10.0),
        ("succeeded", 204, 0.005),
        ("retry", 429, 31.0),
        ("succeeded", 299, 0.0),
        ("dead", 404, 1.0),
        ("retry", 600, 2.5),
        ("retry", 302, 0.0051),
    ]
    for outcome, status, took in sends:
        tally.observe(outcome, status, took)
        deliveries.labels(outcome).inc()
        attempts.labels("error" if status is None else f"{status // 100}xx").inc()
        duration.observe(took)

    def text(registry: CollectorRegistry) -> list[str]:
        lines = generate_latest(registry).decode().splitlines()
        return [line for line in lines if "_created" not in line]

    assert text(ours) == text(theirs)
    assert "relay_delivery_duration_seconds_created" in generate_latest(ours).decode()
