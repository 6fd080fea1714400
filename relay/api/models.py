"""Response and query models of the HTTP API: they describe answers and generate the
OpenAPI document. The input models (endpoints, events) live in :mod:`relay.domain.schema`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from relay.domain.ordering import OnDead, Ordering
from relay.domain.schema import (
    TYPE_PATTERN,
    App,
    EndpointIn,
    EndpointPatch,
    EventIn,
    EventPublishIn,
    Signing,
    Status,
    Strict,
    StrictBody,
)

__all__ = ["EndpointIn", "EndpointPatch", "EventIn", "EventPublishIn"]


class BreakerOut(BaseModel):
    state: Literal["closed", "open", "half_open"] = Field(
        description="the effective state: an open breaker whose cooldown has passed reads "
        "half_open (its next send is the probe)"
    )
    consecutive_failures: int
    open_until: int | None = Field(description="ms since the epoch, while open")
    failing_since: int | None
    last_success_at: int | None
    times_opened: int


class PublicKeyOut(BaseModel):
    public_key: str = Field(description="whpk_ + base64 of the 32-byte ed25519 public key")
    expires_at: int = Field(description="ms since the epoch: it signs until then")


class EndpointOut(BaseModel):
    id: str
    app: str
    url: str = Field(description="where deliveries go; a broker url's password masked (see /url)")
    kind: Literal["http", "redis", "nats", "amqp"] = Field(
        default="http", description="the destination kind, from the url's scheme"
    )
    description: str
    event_types: list[str]
    headers: dict[str, str] = Field(description="custom headers, values masked (see /headers)")
    rate_limit: float | None
    max_in_flight: int | None
    enabled: bool
    filter: str | None = Field(default=None, description="CEL payload filter (null: none)")
    ordering: Ordering = Field(default="none", description="none, key or endpoint")
    ordering_on_dead: OnDead = Field(default="skip", description="skip or block")
    created_at: int = Field(description="ms since the epoch")
    updated_at: int
    secret: str | None = Field(
        default=None, description="hmac only: in the answers to create and rotate-secret"
    )
    signing: Signing = "hmac"
    public_key: str | None = Field(
        default=None, description="ed25519 only: whpk_ + base64 of the 32-byte public key"
    )
    previous_public_keys: list[PublicKeyOut] | None = Field(
        default=None, description="ed25519 only: rotated-out keys still signing"
    )
    breaker: BreakerOut | None = Field(default=None, description="on reads")
    disabled_reason: str | None = None
    previous_secret_expires_at: int | None = Field(
        default=None,
        description="on reads: ms since the epoch when the last rotated-out secret stops "
        "signing beside the current one; null when none does",
    )


class UrlOut(BaseModel):
    url: str = Field(description="the endpoint's url with its credentials in clear")


class EndpointList(BaseModel):
    data: list[EndpointOut]


class SecretOut(BaseModel):
    secret: str | None = Field(default=None, description="hmac endpoints: the whsec_ secret")
    public_key: str | None = Field(
        default=None, description="ed25519 endpoints (instead of secret): whpk_ public key"
    )
    previous_public_keys: list[PublicKeyOut] | None = Field(
        default=None, description="ed25519 endpoints: rotated-out keys still signing"
    )


class RotatedOut(SecretOut):
    previous_secret_expires_at: int | None = Field(
        description="ms since the epoch: until then the old secret keeps signing beside "
        "this one (each request carries a signature per secret still signing)"
    )


class DeliveryRef(BaseModel):
    id: str
    endpoint_id: str


class FilteredOut(BaseModel):
    endpoint_id: str
    reason: str = Field(description="why the endpoint's filter could not be evaluated")


class EventOut(BaseModel):
    id: str
    type: str
    app: str
    created_at: str = Field(description="RFC 3339")
    deliveries: list[DeliveryRef]
    filtered: list[FilteredOut] = Field(
        default=[],
        description="endpoints left out because their filter erred on this event (at most "
        "20; a filter that is false is not recorded)",
    )
    type_deprecated: bool | None = Field(
        default=None, description="true when the event type is deprecated in the catalog"
    )
    deliver_at: str | None = Field(
        default=None,
        description="RFC 3339: when its deliveries go (published with a deliver_at ahead); "
        "absent: at once",
    )


class EventDetail(EventOut):
    payload: Any
    idempotency_key: str | None = Field(
        default=None, description="the Idempotency-Key it was published with, if any"
    )


class AttemptEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    n: int = Field(description="request number over the delivery's life")
    attempt: int | None = None
    at: int = Field(description="ms since the epoch")
    duration_ms: float | None = None
    status_code: int | None = None
    error: str | None = None
    detail: str | None = None
    outcome: str | None = None
    worker: str
    fenced: bool = False


WaitReason = Literal[
    "endpoint_disabled",
    "endpoint_deleted",
    "breaker_open",
    "breaker_probing",
    "in_flight_cap",
    "rate_limited",
    "ordering_lane",
    "retry_backoff",
    "scheduled",
    "deliver_at",
]


class WaitingOut(BaseModel):
    reason: WaitReason = Field(
        description="endpoint_disabled (held until enabled), endpoint_deleted, breaker_open "
        "(until the breaker lets a probe through), breaker_probing (a probe decides), "
        "in_flight_cap (max_in_flight reached), rate_limited (rate_limit used up), "
        "ordering_lane (queued behind the one before it in its ordered lane), "
        "retry_backoff (last attempt failed), scheduled (Retry-After or a passed deferral), "
        "deliver_at (published for later: status scheduled until then)"
    )
    until: int | None = Field(description="ms since the epoch; null: until an operator acts")


class DeliveryOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    event_id: str
    endpoint_id: str
    app: str
    type: str
    status: Status
    attempts: int
    max_attempts: int
    next_attempt_at: int | None = None
    last_status_code: int | None = None
    last_error: str | None = None
    created_at: int
    updated_at: int
    finished_at: int | None = None
    deliver_at: int | None = Field(
        default=None,
        description="ms since the epoch: its event was published for then (status scheduled "
        "until it comes)",
    )
    worker: str | None = None
    lane: str | None = Field(
        default=None,
        description="ordered lane: <endpoint_id> or <endpoint_id>:<ordering_key>; null: unordered",
    )
    blocking: bool | None = Field(
        default=None, description="ordered: this dead head holds its lane (ordering_on_dead block)"
    )
    waiting: WaitingOut | None = Field(
        default=None,
        description="why a pending or held delivery is not going out now; null when it is "
        "due, in flight or finished (derived at read time from the endpoint's state)",
    )


class DeliveryDetail(DeliveryOut):
    attempt_log: list[AttemptEntry]
    lane_head: str | None = Field(
        default=None, description="ordered: the delivery at the head of its lane now"
    )
    lane_blocked: bool | None = Field(
        default=None, description="ordered: its lane is stopped at a dead head"
    )


class DeliveryList(BaseModel):
    data: list[DeliveryOut]
    next_cursor: str | None


TypeFilter = Annotated[
    str | None,
    Field(
        max_length=258,
        pattern=r"^(\*|" + TYPE_PATTERN[1:-1] + r"(\.\*)?)$",
        description="event type, exact or a prefix pattern such as order.*",
    ),
]


class DeliveryQuery(Strict):
    status: Status | None = None
    endpoint_id: Annotated[str | None, Field(max_length=64)] = None
    event_id: Annotated[str | None, Field(max_length=64)] = None
    type: TypeFilter = None
    limit: Annotated[int, Field(ge=1, le=500)] = 50
    cursor: Annotated[str | None, Field(max_length=512)] = None


class ArchiveQuery(Strict):
    """A search of archived deliveries (``GET /v1/archive/deliveries``)."""

    since: int | None = Field(default=None, ge=0, description="created at or after (ms)")
    until: int | None = Field(default=None, ge=0, description="created before (ms)")
    endpoint_id: Annotated[str | None, Field(max_length=64)] = None
    status: Literal["succeeded", "dead"] | None = None
    status_code: int | None = Field(
        default=None, ge=100, le=599, description="the last answer's HTTP status"
    )
    type: TypeFilter = None
    payload: Annotated[str | None, Field(max_length=4096)] = Field(
        default=None,
        description="a JSON object the event's payload contains (`payload @> {...}`), "
        'e.g. `{"customer_id": 42}`',
    )
    limit: Annotated[int, Field(ge=1, le=500)] = 50
    cursor: Annotated[str | None, Field(max_length=512)] = None


class UiDeliveryQuery(Strict):
    """The dashboard's listing: no event filter, smaller pages."""

    status: Status | None = None
    endpoint_id: Annotated[str | None, Field(max_length=64)] = None
    type: TypeFilter = None
    limit: Annotated[int, Field(ge=1, le=200)] = 25
    cursor: Annotated[str | None, Field(max_length=512)] = None


class EndpointQuery(Strict):
    app: App | None = None


class RecoverIn(StrictBody):
    since: int | None = Field(default=None, description="ms since the epoch; only dead after it")


class ReplayOut(BaseModel):
    id: str
    status: Status


class DiscardOut(BaseModel):
    id: str
    status: Status = Field(description="dead: it stays a dead letter, marked discarded_at")
    discarded_at: int | None = None


class HeadersOut(BaseModel):
    headers: dict[str, str] = Field(description="the endpoint's custom headers, in clear")


class RecoverOut(BaseModel):
    recovered: int


class ErrorDetail(BaseModel):
    field: str
    message: str


class ErrorOut(BaseModel):
    error: str
    message: str
    details: list[ErrorDetail] | None = Field(
        default=None, description="validation_error: one entry per field in error"
    )
    current_status: Status | None = Field(
        default=None, description="delivery_not_replayable: the delivery's status now"
    )
    path: str | None = Field(
        default=None, description="payload_invalid: where the payload fails, e.g. $.amount"
    )
    endpoint_ids: list[str] | None = Field(
        default=None, description="event_type_in_use: the endpoints subscribing to it"
    )


class StatsOut(BaseModel):
    counts: dict[str, int] = Field(
        description="deliveries by status: scheduled, pending, queued, held, delivering, "
        "succeeded, dead"
    )
    queue: dict[str, float] = Field(
        description="due (due now), scheduled (in the due queue for later: retries waiting "
        "and scheduled deliveries), processing, oldest_due_age_seconds"
    )
    reclaimed_total: int
    archived: dict[str, int] | None = Field(
        default=None,
        description="with the archive on: deliveries in PostgreSQL by status (counted in "
        "counts too)",
    )
    blocked_lanes: int = Field(
        description="ordered lanes stopped at a dead head (ordering_on_dead: block)"
    )
    shards: int


# The most events one POST /v1/events/batch takes: enough to pay for the request and its
# authentication a hundred times over, few enough that one request's work stays a short
# turn of the API process's event loop and its answer a few tens of kilobytes.
MAX_BATCH = 100
IDEMPOTENCY_KEY = "1-256 printable characters"


class BatchEventIn(EventPublishIn):
    """One event of a batch: an event as ``POST /v1/events`` takes it, with its key."""

    idempotency_key: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description=f"{IDEMPOTENCY_KEY}, as the Idempotency-Key header of POST /v1/events: "
        "the same key and event again answer the first event (200); with another event 409"
    )


class EventBatchIn(StrictBody):
    """Publish several events, each on its own."""

    events: Annotated[list[BatchEventIn], Field(min_length=1, max_length=MAX_BATCH)] = Field(
        description=f"1-{MAX_BATCH} events, each published or refused on its own"
    )


class BatchResult(BaseModel):
    """One event's answer: ``event`` when published (201) or answered again (200), else
    the error fields POST /v1/events answers with that status."""

    status: int = Field(description="what POST /v1/events answers this event: 201, 200, 4xx")
    event: EventOut | None = None
    error: str | None = None
    message: str | None = None
    details: list[ErrorDetail] | None = Field(
        default=None, description="validation_error: one entry per field in error"
    )
    path: str | None = Field(default=None, description="payload_invalid: where the payload fails")


class EventBatchOut(BaseModel):
    results: list[BatchResult] = Field(description="one per event, in the order sent")
