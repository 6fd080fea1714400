"""Prometheus metrics of this process (each replica serves its own ``/metrics``).

Counters and histograms count what this process did (sends, claims, reclaims, lease
extensions, expiries). Gauges describe the shared state and are read from Redis at
scrape time, cheaply, through the Store: the queue gauges from
:meth:`relay.queue.store.Store.stats` (a few O(1)/O(log n) commands per shard, never a
scan) and the breaker gauge with one pipelined ``HGETALL`` per endpoint, for at most
``BREAKER_CAP`` endpoints (:meth:`Store.endpoint_count_and_ids`). Every replica reports
the same shared gauges; aggregate them with ``max``, not ``sum``.

``relay api`` serves ``/metrics`` beside the API; ``relay worker`` serves it on
``RELAY_METRICS_PORT`` when that is set (see :func:`serve`).
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Iterator
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

log = structlog.get_logger("relay.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)
BREAKER_CAP = 500  # endpoints exported by relay_endpoint_breaker_state at most
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class _Tally:
    """Counts by label value, and when each value was first counted (its series'
    ``_created``, as a labelled child of prometheus-client's Counter has it)."""

    __slots__ = ("counts", "created")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.created: dict[str, float] = {}

    def add(self, value: str) -> None:
        counts = self.counts
        if value in counts:
            counts[value] += 1
        else:
            counts[value] = 1
            self.created[value] = time.time()

    def family(self, name: str, doc: str, label: str) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=[label])
        for value, n in self.counts.items():
            family.add_metric([value], n, created=self.created[value])
        return family


class Attempts:
    """The per-send series: ``relay_deliveries_total{outcome}``,
    ``relay_attempts_total{code_class}`` and the ``relay_delivery_duration_seconds``
    histogram. Tallied in plain numbers by :meth:`observe` and made into metric families
    only when scraped: prometheus-client's Counter and Histogram lock and validate on every
    increment, four per send. The text exposition is the one those classes write
    (``tests/redis/test_metrics.py``). One event loop's process: observe and collect never run
    at once."""

    def __init__(self) -> None:
        self.outcomes = _Tally()
        self.classes = _Tally()
        self.buckets = [0] * (len(DURATION_BUCKETS) + 1)  # the last: past every bound
        self.sum = 0.0
        self.started = time.time()  # the histogram's _created

    def observe(self, outcome: str, status: int | None, duration: float) -> None:
        self.outcomes.add(outcome)
        if status is None:  # a broker's acknowledgement, or no answer at all
            self.classes.add("acked" if outcome == "succeeded" else "error")
        else:  # any other status by its hundreds: 600 -> "6xx"
            self.classes.add(_CLASSES.get(status // 100) or f"{status // 100}xx")
        self.buckets[bisect.bisect_left(DURATION_BUCKETS, duration)] += 1
        self.sum += duration

    def collect(self) -> Iterator[Metric]:
        yield self.outcomes.family(
            "relay_deliveries", "Delivery attempts by outcome (succeeded, retry, dead)", "outcome"
        )
        yield self.classes.family(
            "relay_attempts",
            "Requests sent, by status code class (2xx, 3xx, 4xx, 5xx; acked: a broker "
            "acknowledged it; error: no answer)",
            "code_class",
        )
        name = "relay_delivery_duration_seconds"
        duration = HistogramMetricFamily(name, "Duration of one delivery request")
        bounds = [*map(floatToGoString, DURATION_BUCKETS), "+Inf"]
        counts = itertools.accumulate(self.buckets)
        duration.add_metric([], list(zip(bounds, counts, strict=True)), self.sum)
        duration.samples.append(Sample(name + "_created", {}, self.started))
        yield duration


_CLASSES = {n: f"{n}xx" for n in range(1, 10)}
ATTEMPTS = Attempts()
REGISTRY.register(ATTEMPTS)
CLAIM_BATCH = Histogram(
    "relay_claim_batch_size",
    "Deliveries per claim",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    registry=REGISTRY,
)
RECLAIMED = Counter(
    "relay_reclaimed", "Expired leases reclaimed by this process", registry=REGISTRY
)
LEASE_EXTENSIONS = Counter(
    "relay_lease_extensions", "Leases extended while a send was in flight", registry=REGISTRY
)
EXPIRED = Counter(
    "relay_expired",
    "Records removed by retention in this process (kind: delivery or event)",
    ["kind"],
    registry=REGISTRY,
)
ARCHIVED = Counter(
    "relay_archived",
    "Records this process moved to the archive (kind: delivery or event)",
    ["kind"],
    registry=REGISTRY,
)
ARCHIVE_ERRORS = Counter(
    "relay_archive_errors",
    "Archive moves this process gave up on for now (PostgreSQL away or refusing)",
    registry=REGISTRY,
)
ARCHIVE_BACKLOG = Gauge(
    "relay_archive_backlog",
    "Finished deliveries past RELAY_HOT_RETENTION still in Redis, waiting to move",
    registry=REGISTRY,
)
ARCHIVE_LAG = Gauge(
    "relay_archive_lag_seconds",
    "How long the oldest delivery waiting to move has been past RELAY_HOT_RETENTION",
    registry=REGISTRY,
)
API_CONNECTIONS_REFUSED = Counter(
    "relay_api_connections_refused",
    "Connections the API closed on arrival: their client address was at "
    "RELAY_MAX_CONNECTIONS_PER_CLIENT",
    registry=REGISTRY,
)
QUEUE_DUE = Gauge("relay_queue_due", "Deliveries due now", registry=REGISTRY)
QUEUE_SCHEDULED = Gauge(
    "relay_queue_scheduled",
    "Deliveries in the due queue for later: retries waiting and status scheduled alike",
    registry=REGISTRY,
)
SCHEDULED = Gauge(
    "relay_scheduled_deliveries",
    "Deliveries of status scheduled: published with a deliver_at still ahead",
    registry=REGISTRY,
)
QUEUE_PROCESSING = Gauge(
    "relay_queue_processing", "Deliveries claimed (in flight)", registry=REGISTRY
)
QUEUE_HELD = Gauge(
    "relay_queue_held",
    "Deliveries held while their endpoint is disabled (resumed when it is enabled)",
    registry=REGISTRY,
)
QUEUE_QUEUED = Gauge(
    "relay_queue_queued",
    "Deliveries waiting in an ordered lane behind its head (never claimed until they lead)",
    registry=REGISTRY,
)
BLOCKED_LANES = Gauge(
    "relay_blocked_lanes",
    "Ordered lanes stopped at a dead head (ordering_on_dead: block) until replay or discard",
    registry=REGISTRY,
)
DEAD_LETTERS = Gauge("relay_dead_letters", "Dead deliveries kept", registry=REGISTRY)
SUCCEEDED_KEPT = Gauge(
    "relay_succeeded_kept", "Succeeded deliveries kept (until retention)", registry=REGISTRY
)
OLDEST_DUE = Gauge(
    "relay_queue_oldest_due_age_seconds", "Age of the oldest due delivery", registry=REGISTRY
)
ENDPOINTS = Gauge("relay_endpoints", "Endpoints configured", registry=REGISTRY)
BREAKER = Gauge(
    "relay_endpoint_breaker_state",
    f"Circuit breaker per endpoint: 0 closed, 1 half-open, 2 open "
    f"(at most {BREAKER_CAP} endpoints)",
    ["endpoint"],
    registry=REGISTRY,
)
REDIS_PERSISTENCE = Gauge(
    "relay_redis_persistence",
    "What Redis persists, read at start: 0 none, 1 rdb, 2 aof, 3 both, -1 unknown",
    registry=REGISTRY,
)
REDIS_UP = Gauge(
    "relay_redis_up",
    "1 when the shared gauges of this scrape were read from Redis, 0 when it did not answer",
    registry=REGISTRY,
)


# The Postgres outbox connector (`relay outbox`): its process serves these on
# RELAY_METRICS_PORT; the gauges are read from Postgres by the connector between batches.
OUTBOX_PUBLISHED = Counter(
    "relay_outbox_published",
    "Outbox rows published into relay by this process (outcome: created, or duplicate: "
    "the event already existed from an earlier try and was not created again)",
    ["outcome"],
    registry=REGISTRY,
)
OUTBOX_DEAD_ROWS = Counter(
    "relay_outbox_dead_rows",
    "Outbox rows relay refused, moved to the dead table",
    registry=REGISTRY,
)
OUTBOX_ERRORS = Counter(
    "relay_outbox_errors",
    "Outbox connector errors by kind (redis: publish not acknowledged, postgres)",
    ["kind"],
    registry=REGISTRY,
)
OUTBOX_BACKLOG = Gauge("relay_outbox_backlog", "Outbox rows waiting", registry=REGISTRY)
OUTBOX_OLDEST = Gauge(
    "relay_outbox_oldest_age_seconds", "Age of the oldest waiting outbox row", registry=REGISTRY
)
OUTBOX_DEAD_KEPT = Gauge(
    "relay_outbox_dead_kept", "Rows in the outbox's dead table", registry=REGISTRY
)


def set_outbox(waiting: int, oldest_age: float, dead: int) -> None:
    OUTBOX_BACKLOG.set(waiting)
    OUTBOX_OLDEST.set(oldest_age)
    OUTBOX_DEAD_KEPT.set(dead)


# One request sent: observe_attempt(outcome, status (None: no answer), duration), the
# tally's own method (no wrapper frame: it runs once per request).
observe_attempt = ATTEMPTS.observe


def set_queue(stats: dict[str, Any]) -> None:
    """Queue gauges from :meth:`relay.queue.store.Store.stats` (a few O(1) commands per shard)."""
    QUEUE_DUE.set(stats["queue"]["due"])
    QUEUE_SCHEDULED.set(stats["queue"]["scheduled"])
    QUEUE_PROCESSING.set(stats["queue"]["processing"])
    QUEUE_HELD.set(stats["counts"]["held"])
    SCHEDULED.set(stats["counts"]["scheduled"])
    QUEUE_QUEUED.set(stats["counts"].get("queued", 0))
    BLOCKED_LANES.set(stats.get("blocked_lanes", 0))
    DEAD_LETTERS.set(stats["counts"]["dead"])
    SUCCEEDED_KEPT.set(stats["counts"]["succeeded"])
    OLDEST_DUE.set(stats["queue"]["oldest_due_age_seconds"])


async def refresh(store: Any) -> None:
    """Read the shared gauges from Redis; on failure keep serving the process's own."""
    from relay.endpoints.health import Health  # health imports store; keep this module light

    try:
        stats = await store.stats()
        count, ids = await store.endpoint_count_and_ids(BREAKER_CAP)
        breakers = await Health(store).breakers(ids)
    except Exception as exc:
        REDIS_UP.set(0)
        log.warning("metrics.redis_unavailable", error=str(exc))
        return
    set_queue(stats)
    if store.settings.archive_url:
        await refresh_archive(store)
    ENDPOINTS.set(count)
    # No await from here on: a concurrent scrape never sees the gauge half rebuilt.
    BREAKER.clear()
    for endpoint_id, view in breakers.items():
        BREAKER.labels(endpoint_id).set(BREAKER_STATES.get(view["state"], 0))
    REDIS_UP.set(1)


async def archive_behind(store: Any) -> tuple[int, float]:
    """Finished deliveries waiting to move to the archive, and the lag (s) of the oldest."""
    now = await store.now_ms()
    cutoff = now - int(store.settings.hot_retention * 1000)
    backlog, oldest = await store.finished_waiting(cutoff)
    return backlog, 0.0 if oldest is None else round((cutoff - oldest) / 1000, 3)


async def refresh_archive(store: Any) -> None:
    backlog, lag = await archive_behind(store)
    ARCHIVE_BACKLOG.set(backlog)
    ARCHIVE_LAG.set(lag)


async def render(store: Any) -> web.Response:
    """The ``/metrics`` answer: refresh the shared gauges, then the text format."""
    await refresh(store)
    resp = web.Response(body=generate_latest(REGISTRY))
    resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return resp


async def serve(store: Any, host: str, port: int) -> web.AppRunner:
    """A tiny HTTP server with ``GET /metrics`` only (``relay worker``'s exporter)."""

    async def handler(request: web.Request) -> web.Response:
        return await render(store)

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("metrics.listening", url=f"http://{host}:{port}/metrics")
    return runner
