"""Response and query models of the HTTP API: they describe answers and generate the
OpenAPI document. The input models (endpoints, events) live in :mod:`relay.domain.schema`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from relay.domain.schema import (
    TYPE_PATTERN,
    App,
    EndpointIn,
    EndpointPatch,
    EventIn,
    Status,
    Strict,
)

__all__ = ["EndpointIn", "EndpointPatch", "EventIn"]


class BreakerOut(BaseModel):
    state: Literal["closed", "open", "half_open"]
    consecutive_failures: int
    open_until: int | None = Field(description="ms since the epoch, while open")
    failing_since: int | None
    last_success_at: int | None
    times_opened: int


class EndpointOut(BaseModel):
    id: str
    app: str
    url: str
    description: str
    event_types: list[str]
    headers: dict[str, str]
    rate_limit: float | None
    max_in_flight: int | None
    enabled: bool
    created_at: int = Field(description="ms since the epoch")
    updated_at: int
    secret: str | None = Field(
        default=None, description="only in the answers to create and rotate-secret"
    )
    breaker: BreakerOut | None = Field(default=None, description="on reads")
    disabled_reason: str | None = None


class EndpointList(BaseModel):
    data: list[EndpointOut]


class SecretOut(BaseModel):
    secret: str


class DeliveryRef(BaseModel):
    id: str
    endpoint_id: str


class EventOut(BaseModel):
    id: str
    type: str
    app: str
    created_at: str = Field(description="RFC 3339")
    deliveries: list[DeliveryRef]


class EventDetail(EventOut):
    payload: Any


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
    worker: str | None = None


class DeliveryDetail(DeliveryOut):
    attempt_log: list[AttemptEntry]


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


class UiDeliveryQuery(Strict):
    """The dashboard's listing: no event filter, smaller pages."""

    status: Status | None = None
    endpoint_id: Annotated[str | None, Field(max_length=64)] = None
    type: TypeFilter = None
    limit: Annotated[int, Field(ge=1, le=200)] = 25
    cursor: Annotated[str | None, Field(max_length=512)] = None


class EndpointQuery(Strict):
    app: App | None = None


class RecoverIn(Strict):
    since: int | None = Field(default=None, description="ms since the epoch; only dead after it")


class ReplayOut(BaseModel):
    id: str
    status: Status


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


class StatsOut(BaseModel):
    counts: dict[str, int]
    queue: dict[str, float]
    reclaimed_total: int
    shards: int
