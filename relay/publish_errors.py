"""Why a publish is refused: one exception per refusal, each the 4xx it answers.

Nothing was written when one is raised (:class:`relay.publishing.Publisher`)."""

from __future__ import annotations

from typing import Any

from relay.sandbox import SchemaFailure
from relay.sandbox.work import MEMORY_BYTES, SCHEMA_SECONDS


class PublishError(Exception):
    """A publish that was refused; nothing was written. ``status`` is the 4xx it means."""

    status = 422
    code = "publish_refused"

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra  # more fields of the error answer (payload_invalid: path)


class PayloadTooLarge(PublishError):
    status = 413
    code = "payload_too_large"


class AppReserved(PublishError):
    """The ops app (``RELAY_OPS_APP``) takes relay's own operational events only."""

    code = "app_reserved"


class UnknownEndpoints(PublishError):
    status = 422
    code = "unknown_endpoint"


class CatalogRefusal(PublishError):
    """Refused by the event type catalog (its schema, strict mode): a retry of a publish
    accepted before the catalog changed still gets its first answer."""


class PayloadInvalid(CatalogRefusal):
    """The payload does not match its event type's JSON Schema (``path``: where)."""

    code = "payload_invalid"


class UnknownEventType(CatalogRefusal):
    """``RELAY_EVENT_TYPES_STRICT=1`` and the type is not in the catalog."""

    code = "unknown_event_type"


class EventTypeSchemaInvalid(CatalogRefusal):
    """The type's stored schema cannot be applied (a ``$ref`` resolving to nothing, or a
    schema stored before the limits of relay.domain.schemalimits that breaks them)."""

    code = "schema_invalid"


class SchemaBudgetExceeded(CatalogRefusal):
    """Validating the payload against its type's schema ran past the sandbox's budget."""

    code = "schema_budget_exceeded"


class TooManyDeliveries(PublishError):
    """More target endpoints than one event can have deliveries (ids.MAX_DELIVERIES)."""

    code = "too_many_deliveries"


class DeliverAtInvalid(PublishError):
    """A ``deliver_at`` that names no instant (a datetime without a time zone)."""

    code = "deliver_at_invalid"


class DeliverAtTooFar(PublishError):
    """A ``deliver_at`` further ahead than ``RELAY_MAX_SCHEDULE_AHEAD``."""

    code = "deliver_at_too_far"


class DeliverAtOrdered(PublishError):
    """A ``deliver_at`` ahead for an event that joins an ordered lane: its place in the
    lane would hold every delivery behind it until then, or leave the lane's order."""

    code = "deliver_at_ordered"


class IdempotencyKeyReused(PublishError):
    status = 409
    code = "idempotency_key_reused"


def refusal(event_type: str, failure: SchemaFailure) -> PublishError:
    """The 422 for a payload its type's schema did not pass."""
    if failure.kind == "invalid":
        return PayloadInvalid(
            f"payload does not match the schema of {event_type}: {failure.path}: {failure.message}",
            path=failure.path,
        )
    if failure.kind == "broken":
        return EventTypeSchemaInvalid(failure.message)
    budget = (
        f"time budget ({SCHEMA_SECONDS:g} s)"
        if failure.kind == "time"
        else f"memory budget ({MEMORY_BYTES >> 20} MiB)"
    )
    return SchemaBudgetExceeded(
        f"validating the payload against the schema of {event_type} exceeded its {budget}; "
        "the payload was not accepted (a smaller payload, or a simpler schema, passes)"
    )


def days(seconds: float) -> str:
    """A duration as the refusal says it: whole days, else whole hours, else seconds."""
    for unit, size in (("day", 86400), ("hour", 3600)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}" + ("s" if n != 1 else "")
    return f"{seconds:g} seconds"
