"""Prometheus metrics of this process (each replica serves its own ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

DELIVERIES = Counter(
    "relay_deliveries", "Delivery attempts by outcome", ["outcome"], registry=REGISTRY
)
ATTEMPTS = Counter(
    "relay_attempts", "Requests sent, by status code class", ["code_class"], registry=REGISTRY
)
DURATION = Histogram(
    "relay_delivery_duration_seconds",
    "Duration of one delivery request",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
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
QUEUE_DUE = Gauge("relay_queue_due", "Deliveries due now", registry=REGISTRY)
QUEUE_SCHEDULED = Gauge("relay_queue_scheduled", "Pending deliveries due later", registry=REGISTRY)
QUEUE_PROCESSING = Gauge(
    "relay_queue_processing", "Deliveries claimed (in flight)", registry=REGISTRY
)
DEAD_LETTERS = Gauge("relay_dead_letters", "Dead deliveries kept", registry=REGISTRY)
OLDEST_DUE = Gauge(
    "relay_queue_oldest_due_age_seconds", "Age of the oldest due delivery", registry=REGISTRY
)


def observe_attempt(outcome: str, status: int | None, duration: float) -> None:
    DELIVERIES.labels(outcome).inc()
    ATTEMPTS.labels("error" if status is None else f"{status // 100}xx").inc()
    DURATION.observe(duration)


def set_queue(stats: dict) -> None:
    """Queue gauges from :meth:`relay.store.Store.stats` (a few O(1) commands per shard)."""
    QUEUE_DUE.set(stats["queue"]["due"])
    QUEUE_SCHEDULED.set(stats["queue"]["scheduled"])
    QUEUE_PROCESSING.set(stats["queue"]["processing"])
    DEAD_LETTERS.set(stats["counts"]["dead"])
    OLDEST_DUE.set(stats["queue"]["oldest_due_age_seconds"])
