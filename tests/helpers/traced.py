"""A broker message carries the attempt span's trace context: one attempt, with tracing
on (the SDK's in-memory exporter), into a destination of the kit's broker."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay import tracing
from relay.delivery.attempt import Attempter
from relay.delivery.stats import Stats
from relay.queue.store import Claimed, Outcome
from relay.settings import Settings

BODY = b'{"type":"order.paid","timestamp":"2026-12-04T10:00:00.000Z","data":{}}'


async def attempt_once(url: str) -> Outcome:
    """One attempt of event ``evt_1`` (type ``order.paid``) to an endpoint at ``url``,
    through a worker's Attempter (traced when tracing is on)."""
    attempter = Attempter(Settings(allow_private_networks=True, http_timeout=2.0), Stats())
    endpoint = {"id": "ep_1", "url": url, "secret": "whsec_" + "A" * 32}
    claim = Claimed("dlv_1", "t:1:1", 1, 8, "evt_1", "ep_1", BODY, "", "order.paid")
    try:
        done, _ = await attempter.attempt(claim, endpoint)
    finally:
        await attempter.destinations.close()
    return done


async def trace_carried(kit: Any, dest: str) -> None:
    """The message has ``traceparent`` beside the webhook-* headers, naming the attempt
    span, so a consumer continues the trace as an HTTP receiver does."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.setup(Settings(), provider=provider)
    try:
        await kit.prepare(dest)
        done = await attempt_once(kit.url(dest))
        assert done.outcome == "succeeded", done
        (got,) = await kit.messages(dest)
    finally:
        tracing.shutdown()
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "relay.attempt"]
    ctx = span.get_span_context()
    assert ctx is not None
    flags = f"{int(ctx.trace_flags):02x}"
    assert got.headers["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags}"
    assert got.headers["webhook-id"] == "evt_1"
