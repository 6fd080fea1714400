"""Models of the event listing and the event page (``GET /v1/events``, ``GET /v1/events/{id}``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from relay.api.models import DeliveryDetail, DeliveryRef, EventDetail, TypeFilter
from relay.domain.schema import App, Status, Strict


class EventQuery(Strict):
    type: TypeFilter = None
    app: App | None = None
    endpoint_id: Annotated[str | None, Field(max_length=64)] = None
    status: Status | None = Field(
        default=None, description="events with at least one delivery in this status"
    )
    since: int | None = Field(default=None, ge=0, description="ms since the epoch; created from")
    until: int | None = Field(default=None, ge=0, description="ms since the epoch; created before")
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=256, description="as published with"
    )
    payload: Annotated[str | None, Field(max_length=4096)] = Field(
        default=None,
        description="a JSON object the event's payload contains (`payload @> {...}`); "
        "searches archived events only, and needs the archive (`RELAY_ARCHIVE_URL`)",
    )
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: Annotated[str | None, Field(max_length=512)] = None

    @model_validator(mode="after")
    def _window(self) -> EventQuery:
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError("since must be before until")
        if self.idempotency_key is not None and not self.idempotency_key.isprintable():
            raise ValueError("idempotency_key must be printable characters")
        return self


class DeliverySummary(BaseModel):
    id: str
    endpoint_id: str
    status: Status
    attempts: int
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: int | None = Field(description="ms since the epoch, while pending")


class EventSummary(BaseModel):
    id: str
    type: str
    app: str
    created_at: str = Field(description="RFC 3339")
    idempotency_key: str | None
    delivery_count: int = Field(description="all its deliveries (up to 1,024)")
    status_counts: dict[str, int] = Field(description="its deliveries by status, all of them")
    deliveries: list[DeliverySummary] = Field(description="its first 20 deliveries")


class EventList(BaseModel):
    data: list[EventSummary]
    next_cursor: str | None = Field(
        description="continue with it while it is not null (a page may be short, even empty)"
    )


class EventPageQuery(Strict):
    expand: Literal["deliveries"] | None = Field(
        default=None, description="deliveries: each delivery in full, with its attempt log"
    )


class SentHeader(BaseModel):
    name: str
    value: str
    note: str = ""


class ExpandedDelivery(DeliveryDetail):
    headers_sent: list[SentHeader] = Field(
        description="what relay sends it, rebuilt: signatures and custom header values hidden"
    )


class EventPage(EventDetail):
    delivery_count: int = Field(description="all its deliveries; at most 50 are expanded")
    deliveries: list[ExpandedDelivery | DeliveryRef]  # type: ignore[assignment]
