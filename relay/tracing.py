"""OpenTelemetry traces, off unless the standard ``OTEL_*`` variables turn them on.

:class:`relay.settings.Settings` decides (``tracing_exporters``; the rule is in
``relay.settings._tracing``); :func:`setup` builds the SDK's tracer provider at process
start only when it is on. Off, nothing of OpenTelemetry is even imported, and every hook
in relay costs one read of the module flag :data:`on` (``if tracing.on:``).

The spans (docs/guides/tracing.md):

* ``POST /v1/events`` (SERVER): one per publish, continuing the caller's W3C
  ``traceparent``/``tracestate``; its context is stored on the event hash (field ``tp``,
  :func:`carrier`) so that workers in other processes can continue it.
* ``relay.attempt`` (CLIENT): one per delivery attempt, a child of the publish span
  (:func:`attempt_span`); its ``traceparent`` goes to the receiver (:func:`headers`).
* ``relay.record`` (INTERNAL): one group-committed write of outcomes in the worker,
  linked to the attempt spans it records (:func:`record_span`).
* ``EVALSHA <script>`` (CLIENT): a Redis script call made while a span is current
  (:func:`script_span`): ``publish`` under the publish span, ``record`` under the record
  span; calls outside any span (claim, admission, sweeps) start none.

Spans carry ids, counts, statuses and outcomes: never a payload, a URL, a header value,
a secret or a token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from relay.settings import Settings

on = False  # read by every hook: tracing's whole cost when it is off
_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_propagator: Any = None

ATTEMPT = "relay.attempt"
RECORD = "relay.record"
PUBLISH = "POST /v1/events"


def setup(settings: Settings, *, provider: TracerProvider | None = None) -> bool:
    """Turn tracing on when ``settings`` say so (or with ``provider``, for tests and the
    benchmark: spans go to its processors). Returns whether tracing is on."""
    global on, _tracer, _provider, _propagator
    if provider is None:
        if not settings.tracing_exporters:
            return False
        provider = _make_provider(settings)
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _provider = provider
    _tracer = provider.get_tracer("relay")
    _propagator = TraceContextTextMapPropagator()
    on = True
    return True


def _make_provider(settings: Settings) -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource = Resource.create(
        {"service.name": settings.tracing_service, "service.instance.id": settings.worker_id}
    )
    provider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER is read here
    for name in settings.tracing_exporters:
        if name == "otlp":  # OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout) read here
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    return provider


def shutdown() -> None:
    """Export what is buffered and turn tracing off (at process exit, and in tests)."""
    global on, _tracer, _provider
    on = False
    if _provider is not None:
        _provider.shutdown()
    _tracer = _provider = None


def _start(name: str, **kw: Any) -> Any:
    assert _tracer is not None
    # Exceptions are described by error.type and the status, never by their message
    # (a message can quote a request); 4xx answers are not errors of a server span.
    return _tracer.start_as_current_span(
        name, record_exception=False, set_status_on_exception=False, **kw
    )


@contextlib.contextmanager
def publish_span(headers: Mapping[str, str], route: str = "/v1/events") -> Iterator[Span]:
    """The span of one ``POST /v1/events`` (or ``route``), continuing the caller's
    ``traceparent``."""
    from opentelemetry.trace import SpanKind

    parent = _propagator.extract(_Carrier(headers))
    attrs = {"http.request.method": "POST", "http.route": route}
    with _start(PUBLISH, context=parent, kind=SpanKind.SERVER, attributes=attrs) as span:
        try:
            yield span
        except Exception as exc:
            status = getattr(exc, "status", None)  # an HTTP answer: 4xx is no server error
            if not isinstance(status, int) or status >= 500:
                span.set_attribute("error.type", type(exc).__name__)
                _error(span, type(exc).__name__)
            raise


class _Carrier(Mapping[str, str]):
    """The two W3C headers of a request, nothing else (the propagator asks by name)."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._h = {k: headers[k] for k in ("traceparent", "tracestate") if k in headers}

    def __getitem__(self, key: str) -> str:
        return self._h[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._h)

    def __len__(self) -> int:
        return len(self._h)


def http_status(span: Span, status: int) -> None:
    """The answer's status on a SERVER span; a 5xx marks it an error."""
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_attribute("error.type", str(status))
        _error(span, str(status))


def carrier() -> str:
    """The current span's context as stored with an event: ``traceparent``, then
    ``\\n`` and ``tracestate`` when there is one; "" without a valid span."""
    out: dict[str, str] = {}
    _propagator.inject(out)
    tp = out.get("traceparent", "")
    return f"{tp}\n{out['tracestate']}" if tp and out.get("tracestate") else tp


def _parent(stored: str) -> Any:
    tp, _, ts = stored.partition("\n")
    return _propagator.extract({"traceparent": tp, "tracestate": ts} if ts else {"traceparent": tp})


@contextlib.contextmanager
def attempt_span(stored: str, attrs: Mapping[str, Any]) -> Iterator[Span]:
    """The span of one delivery attempt: a child of the publish span whose context the
    event stored (``stored``; "" for an event published with tracing off: a new trace)."""
    from opentelemetry.trace import SpanKind

    parent = _parent(stored) if stored else None
    with _start(ATTEMPT, context=parent, kind=SpanKind.CLIENT, attributes=dict(attrs)) as span:
        try:
            yield span
        except Exception as exc:
            _error(span, type(exc).__name__)
            raise


def attempt_result(span: Span, status: int | None, outcome: str, error: str) -> None:
    """What came of an attempt: status, outcome; anything but success is an error."""
    if status is not None:
        span.set_attribute("http.response.status_code", status)
    span.set_attribute("relay.outcome", outcome)
    if outcome != "succeeded":
        kind = error or (str(status) if status is not None else "error")
        span.set_attribute("error.type", kind)
        _error(span, kind)


def headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current span, for the receiver."""
    out: dict[str, str] = {}
    _propagator.inject(out)
    return out


@contextlib.contextmanager
def record_span(attempts: list[Any], outcomes: int) -> Iterator[None]:
    """The span of one group-committed ``record`` write, linked to the attempt spans whose
    outcomes it writes (``attempts``: their span contexts); none when there are none
    (a batch of deferrals only), so its ``EVALSHA record`` then has no span either."""
    if not attempts:
        yield
        return
    from opentelemetry.trace import Link, SpanKind

    links = [Link(a) for a in attempts]
    attrs = {"relay.outcomes": outcomes}
    with _start(RECORD, kind=SpanKind.INTERNAL, links=links, attributes=attrs) as span:
        try:
            yield
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            _error(span, type(exc).__name__)
            raise


@contextlib.contextmanager
def script_span(name: str) -> Iterator[None]:
    """A child span for one Redis script call, only inside a recording span."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    if not trace.get_current_span().is_recording():
        yield
        return
    attrs = {
        "db.system.name": "redis",
        "db.operation.name": "EVALSHA",
        "db.stored_procedure.name": name,
    }
    with _start(f"EVALSHA {name}", kind=SpanKind.CLIENT, attributes=attrs) as span:
        try:
            yield
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            _error(span, type(exc).__name__)
            raise


def _error(span: Span, description: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, description))
