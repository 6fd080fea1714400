"""OpenTelemetry traces: on only through OTEL_* variables, and joined across processes.

The API runs in this process with the SDK's ``InMemorySpanExporter``; the worker runs
as a real ``python -m relay worker`` subprocess configured only by ``OTEL_*`` variables,
exporting OTLP over HTTP to a tiny collector on 127.0.0.1 that this test runs and that
decodes the protobuf. The spans of both must form one trace: the caller's
``traceparent`` -> ``POST /v1/events`` -> ``EVALSHA publish`` and ``relay.attempt``
(in the other process) -> the ``traceparent`` the receiver got.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from relay import tracing
from relay.delivery.worker import Worker
from relay.domain import eventrecord
from relay.redisproc import free_port
from relay.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[2]
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01", "tracestate": "acme=t61rcWkgMzE"}
SECRET_MARK = "do-not-trace-me-4242"  # in payloads and custom headers: never in a span


# ------------------------------------------------------------------ the on/off rule


@pytest.mark.parametrize(
    ("env", "exporters"),
    [
        ({}, ()),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",)),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ("otlp", "console")),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:1"}, ()),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, ()),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:1"}, ()),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, ("otlp",)),
    ],
)
def test_tracing_is_on_only_when_otel_variables_ask(
    env: dict[str, str], exporters: tuple[str, ...]
) -> None:
    assert Settings.from_env(env).tracing_exporters == exporters


def test_service_name_and_refusals() -> None:
    assert Settings.from_env({}).tracing_service == "relay"
    assert Settings.from_env({"OTEL_SERVICE_NAME": "hooks"}).tracing_service == "hooks"
    attrs = {"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=r2"}
    assert Settings.from_env(attrs).tracing_service == "r2"
    with pytest.raises(SettingsError, match="OTEL_TRACES_EXPORTER"):
        Settings.from_env({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(SettingsError, match="http/protobuf"):
        Settings.from_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    # the OTLP headers may hold a collector's token: never in the settings' repr
    env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s3cr3t"}
    assert "s3cr3t" not in repr(Settings.from_env(env))


def test_tracing_off_loads_no_tracing_sdk() -> None:
    """With no OTEL_* set, the API, the worker and the runner load without the tracing
    SDK, its exporters or its propagator. (redis-py 8 itself imports
    ``opentelemetry.sdk.metrics`` when it is installed, for metrics that stay off until
    an application initialises them; relay never does.)"""
    code = (
        "import sys, relay.runner, relay.api, relay.delivery.worker\n"
        "from relay import tracing\n"
        "from relay.settings import Settings\n"
        "assert not tracing.setup(Settings.from_env({})) and not tracing.on\n"
        "mods = ('opentelemetry.sdk.trace', 'opentelemetry.exporter',"
        " 'opentelemetry.trace.propagation.tracecontext')\n"
        "print(sorted(m for m in sys.modules if m.startswith(mods)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ fixtures


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.setup(Settings(), provider=provider)
    yield exporter
    tracing.shutdown()


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1: decodes ``ExportTraceServiceRequest``."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.arrived = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        req = ExportTraceServiceRequest()
        req.ParseFromString(raw)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                self.spans.extend(ss.spans)
        self.arrived.set()
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def wait_for(self, name: str, count: int, within: float = 20.0) -> list[Any]:
        async def enough() -> None:
            while len(self.named(name)) < count:
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(enough(), within)
        return self.named(name)

    def named(self, name: str) -> list[Any]:
        return [s for s in self.spans if s.name == name]


@pytest.fixture
async def collector() -> AsyncIterator[Collector]:
    col = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", col.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    col.url = f"http://127.0.0.1:{port}/v1/traces"
    yield col
    await runner.cleanup()


def attrs_of(span: Any) -> dict[str, Any]:
    """A protobuf span's attributes as a plain dict."""
    out: dict[str, Any] = {}
    for kv in span.attributes:
        out[kv.key] = getattr(kv.value, kv.value.WhichOneof("value"))
    return out


def only(found: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [s for s in found if s.name == name]
    assert len(named) == 1, [s.name for s in found]
    return named[0]


def no_secrets(values: list[Any]) -> None:
    for v in values:
        assert SECRET_MARK not in str(v)
        assert "whsec_" not in str(v) and "test-token" not in str(v)


async def make_endpoint(api: Any, url: str) -> dict[str, Any]:
    # a custom traceparent header: with tracing on, relay's own replaces it
    custom = {"X-Custom": SECRET_MARK, "Traceparent": f"00-{'1' * 32}-{'2' * 16}-01"}
    async with api("POST", "/v1/endpoints", json={"url": url, "headers": custom}) as r:
        assert r.status == 201
        return dict(await r.json())


async def publish(api: Any, headers: dict[str, str]) -> dict[str, Any]:
    body = {"type": "order.paid", "payload": {"card": SECRET_MARK}}
    async with api("POST", "/v1/events", json=body, headers=headers) as r:
        assert r.status == 201, await r.text()
        return dict(await r.json())


# ------------------------------------------------------------------ in one process


async def test_publish_span_continues_the_caller_and_scripts_are_children(
    spans: InMemorySpanExporter, make_store: Any, make_api: Any, receiver: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    ep = await make_endpoint(api, receiver.url + "/hook")
    event = await publish(api, CALLER)
    found = spans.get_finished_spans()
    pub = only(found, tracing.PUBLISH)
    assert pub.kind == SpanKind.SERVER
    assert pub.context.trace_id == int(CALLER_TRACE, 16)
    assert pub.parent is not None and pub.parent.span_id == int(CALLER_SPAN, 16)
    assert pub.parent.is_remote
    assert pub.context.trace_state.get("acme") == "t61rcWkgMzE"
    assert pub.attributes is not None
    assert pub.attributes["relay.event.id"] == event["id"]
    assert pub.attributes["relay.deliveries"] == 1
    assert pub.attributes["http.response.status_code"] == 201
    script = only(found, "EVALSHA publish")
    assert script.parent is not None and script.parent.span_id == pub.context.span_id
    assert script.context.trace_id == pub.context.trace_id
    assert script.attributes is not None and script.attributes["db.system.name"] == "redis"

    # the publish span's context is in the event's header, for a worker anywhere
    sk = store.shard_keys_for(event["id"])
    assert sk is not None
    tp = eventrecord.header_of(await store.redis.get(sk.event(event["id"])))["tp"]
    assert tp == f"00-{CALLER_TRACE}-{pub.context.span_id:016x}-01\nacme=t61rcWkgMzE"

    # an in-process worker: the attempt is a child of the publish span
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, store.settings).run(stop, burst=True))
    await receiver.wait_for(1)
    await task
    attempt = only(spans.get_finished_spans(), tracing.ATTEMPT)
    assert attempt.parent is not None and attempt.parent.span_id == pub.context.span_id
    assert attempt.context.trace_id == pub.context.trace_id
    got = receiver.requests[0].headers
    # (not the endpoint's custom header of that name: relay's own replaced it)
    assert got["traceparent"] == f"00-{CALLER_TRACE}-{attempt.context.span_id:016x}-01"
    assert got["tracestate"] == "acme=t61rcWkgMzE"
    assert attempt.attributes is not None
    assert attempt.attributes["relay.endpoint.id"] == ep["id"]
    assert attempt.attributes["relay.outcome"] == "succeeded"
    # the outcome's group-committed write: a span linked to the attempt, its script a child
    record = only(spans.get_finished_spans(), tracing.RECORD)
    assert [link.context.span_id for link in record.links] == [attempt.context.span_id]
    script = only(spans.get_finished_spans(), "EVALSHA record")
    assert script.parent is not None and script.parent.span_id == record.context.span_id
    # the claim loop's own calls (claim, admission) run in no span: they start none
    # (the API's endpoint cache was empty: its read is a script call of the publish too)
    names = {s.name for s in spans.get_finished_spans()}
    assert names == {
        tracing.PUBLISH,
        "EVALSHA endpoints_for_app",
        "EVALSHA publish",
        tracing.ATTEMPT,
        tracing.RECORD,
        "EVALSHA record",
    }
    for s in spans.get_finished_spans():
        no_secrets([*(s.attributes or {}).values(), s.name])


async def test_refused_publish_is_a_4xx_span_and_stores_nothing(
    spans: InMemorySpanExporter, make_store: Any, make_api: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    async with api("POST", "/v1/events", json={"type": "", "payload": 1}, headers=CALLER) as r:
        assert r.status == 422
    pub = only(spans.get_finished_spans(), tracing.PUBLISH)
    assert pub.attributes is not None and pub.attributes["http.response.status_code"] == 422
    assert pub.status.is_unset  # a client's mistake is not a server error
    assert [s.name for s in spans.get_finished_spans()] == [tracing.PUBLISH]


async def test_tracing_off_stores_no_trace_field(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    assert not tracing.on
    store = await make_store()
    api = await make_api(store)
    await make_endpoint(api, receiver.url + "/hook")
    event = await publish(api, CALLER)
    sk = store.shard_keys_for(event["id"])
    assert sk is not None
    assert "tp" not in eventrecord.header_of(await store.redis.get(sk.event(event["id"])))
    stop = asyncio.Event()
    await Worker(store, store.settings).run(stop, burst=True)
    # the caller's headers are not forwarded (relay's own trace is not running); an
    # endpoint's custom header of that name goes as it is
    got = receiver.requests[0].headers
    assert got["traceparent"] == f"00-{'1' * 32}-{'2' * 16}-01"


# ------------------------------------------------------------------ across processes


async def test_attempt_spans_in_a_worker_process_join_the_publish_trace(
    spans: InMemorySpanExporter,
    make_store: Any,
    make_api: Any,
    receiver: Any,
    collector: Collector,
    redis_server: Any,
    tmp_path: Path,
) -> None:
    store = await make_store()
    api = await make_api(store)
    ep = await make_endpoint(api, receiver.url + "/hook")
    answers = iter([500])  # the first attempt fails, the retry succeeds
    receiver.responses["/hook"] = lambda _r: web.Response(status=next(answers, 200))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RELAY_"))}
    env.update(
        {
            "RELAY_REDIS_URL": redis_server.url,
            "RELAY_KEY_PREFIX": store.settings.key_prefix,
            "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
            "RELAY_RETRY_SCHEDULE": "50ms,50ms",
            "RELAY_RETRY_JITTER": "0",
            "RELAY_LOG_LEVEL": "warning",
            # only the standard variables configure tracing
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.url,
            "OTEL_SERVICE_NAME": "relay-worker-test",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "NO_PROXY": "127.0.0.1,localhost",  # the exporter (requests) honours *_PROXY
        }
    )
    log = (tmp_path / "worker.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "relay", "worker", env=env, cwd=ROOT, stderr=log
    )
    try:
        wake = store.keys.shard(0).wake
        deadline = time.monotonic() + 30
        while dict(await store.redis.pubsub_numsub(wake)).get(wake, 0) < 1:
            assert proc.returncode is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline, "the worker process did not come up"
            await asyncio.sleep(0.05)
        event = await publish(api, CALLER)
        await receiver.wait_for(2, within=20)
        attempts = await collector.wait_for(tracing.ATTEMPT, 2)
        records = await collector.wait_for(tracing.RECORD, 2)
        record_scripts = await collector.wait_for("EVALSHA record", 2)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 30)
    assert code == 0, (tmp_path / "worker.log").read_text()

    pub = only(spans.get_finished_spans(), tracing.PUBLISH)
    assert pub.context.trace_id == int(CALLER_TRACE, 16)
    by_attempt = {attrs_of(s)["relay.attempt"]: s for s in attempts}
    assert sorted(by_attempt) == [1, 2]
    delivery_id = event["deliveries"][0]["id"]
    for n, status, outcome in ((1, 500, "retry"), (2, 200, "succeeded")):
        span = by_attempt[n]
        assert span.trace_id.hex() == CALLER_TRACE
        assert span.parent_span_id.hex() == f"{pub.context.span_id:016x}"
        assert span.kind == span.SPAN_KIND_CLIENT
        a = attrs_of(span)
        assert a["relay.delivery.id"] == delivery_id
        assert a["relay.endpoint.id"] == ep["id"]
        assert a["relay.event.id"] == event["id"]
        assert a["http.response.status_code"] == status
        assert a["relay.outcome"] == outcome
        # the receiver's request of this attempt carried this span as its parent
        sent = [r for r in receiver.requests if r.headers["x-relay-attempt"] == str(n)]
        assert sent[0].headers["traceparent"] == f"00-{CALLER_TRACE}-{span.span_id.hex()}-01"
        no_secrets([*a.values(), span.name])
    # each outcome's record span links to its attempt; the record script is its child
    linked = {link.span_id for r in records for link in r.links}
    assert {s.span_id for s in attempts} <= linked
    assert {s.parent_span_id for s in record_scripts} <= {r.span_id for r in records}
    assert by_attempt[1].status.code == by_attempt[1].status.STATUS_CODE_ERROR
    assert by_attempt[2].status.code != by_attempt[2].status.STATUS_CODE_ERROR


async def test_on_a_cluster_every_attempt_joins_its_publish(
    spans: InMemorySpanExporter, cluster_store: Any, make_api: Any, receiver: Any
) -> None:
    """Three shards on three nodes: the ``tp`` read at claim is a pipeline per shard."""
    store = await cluster_store()
    api = await make_api(store)
    await make_endpoint(api, receiver.url + "/hook")
    # without an Idempotency-Key an unordered event takes a random shard (a key would pin
    # it to its app's shard): publish until all three shards hold events
    published: list[dict[str, Any]] = []
    shards: set[int] = set()
    while shards != {0, 1, 2} and len(published) < 60:
        published.append(await publish(api, {}))
        shards.add(store.shard_keys_for(published[-1]["id"]).shard)  # type: ignore[union-attr]
    assert shards == {0, 1, 2}
    await Worker(store, store.settings).run(asyncio.Event(), burst=True)
    found = spans.get_finished_spans()
    pubs = {s.attributes["relay.event.id"]: s for s in found if s.name == tracing.PUBLISH}  # type: ignore[index]
    attempts = [s for s in found if s.name == tracing.ATTEMPT]
    assert len(attempts) == len(published) == len(pubs)
    for a in attempts:
        pub = pubs[a.attributes["relay.event.id"]]  # type: ignore[index]
        assert a.parent is not None and a.parent.span_id == pub.context.span_id
        assert a.context.trace_id == pub.context.trace_id


def test_send_once_is_called_as_attempt_is() -> None:
    """bench/tracing.py measures the hooks by putting ``send_once`` in ``attempt``'s
    place: both take ``(claim, endpoint, deadline)`` first (seen broken: a Deadline passed
    as the trace headers crashed every send of that bench)."""
    import inspect

    from relay.delivery.attempt import Attempter

    first = list(inspect.signature(Attempter.attempt).parameters)
    assert list(inspect.signature(Attempter.send_once).parameters)[: len(first)] == first


async def test_a_broker_attempt_span_names_the_broker_not_http(
    spans: InMemorySpanExporter,
) -> None:
    """A NATS attempt's span says ``messaging.system`` and the subject it went to, with no
    ``http.request.method``, and no credential of the url (its broker is not listening:
    the attempt fails with ``connection``). Fails with every attempt span made an HTTP
    POST."""
    from tests.helpers.traced import attempt_once

    url = f"nats://relay:{SECRET_MARK}@127.0.0.1:{free_port()}/orders.{{type}}"
    done = await attempt_once(url)
    assert done.error == "connection", done
    attrs = dict(only(list(spans.get_finished_spans()), "relay.attempt").attributes or {})
    assert "http.request.method" not in attrs and "http.response.status_code" not in attrs
    assert attrs["messaging.system"] == "nats"
    assert attrs["messaging.destination.name"] == "orders.order.paid"
    assert attrs["server.address"] == "127.0.0.1"
    no_secrets(list(attrs.values()))
