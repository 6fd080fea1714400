"""Request and response models: they validate requests and generate the OpenAPI document.

Validation lives here and only here: handlers never check fields by hand.
"""

from __future__ import annotations

import re
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from yarl import URL

from relay import ids, matching, signing

APP_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
TYPE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-/]{0,255}$"
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,128}$")
RESERVED_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "host",
        "user-agent",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "x-relay-delivery-id",
        "x-relay-attempt",
        "transfer-encoding",
        "connection",
    }
)

App = Annotated[str, Field(pattern=APP_PATTERN, description="application (tenant) name")]
Status = Literal["pending", "delivering", "succeeded", "dead"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


def _check_url(url: str) -> str:
    try:
        parsed = URL(url)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise ValueError("url must use http or https")
    if not parsed.host:
        raise ValueError("url must have a host")
    if parsed.user or parsed.password:
        raise ValueError("url must not carry credentials; use headers")
    return url


def _check_headers(headers: dict[str, str]) -> dict[str, str]:
    if len(headers) > 32:
        raise ValueError("at most 32 custom headers")
    for name, value in headers.items():
        if not _HEADER_NAME.match(name):
            raise ValueError(f"invalid header name {name!r}")
        if name.lower() in RESERVED_HEADERS:
            raise ValueError(f"header {name!r} is set by relay and cannot be overridden")
        if len(value) > 4096 or any(c in value for c in "\r\n\0"):
            raise ValueError(f"invalid value for header {name!r}")
    return headers


def _check_types(types: list[str]) -> list[str]:
    return [matching.validate_pattern(t) for t in types]


def _check_secret(secret: str | None) -> str | None:
    if secret is not None and (
        not secret.startswith(signing.SECRET_PREFIX) or not signing.is_valid_secret(secret)
    ):
        raise ValueError("secret must be whsec_ followed by base64 of 24 to 64 bytes")
    return secret


class EndpointIn(Strict):
    """Create an endpoint."""

    url: Annotated[str, Field(max_length=2048, description="http(s) URL that receives POSTs")]
    app: App = "default"
    event_types: Annotated[list[str], Field(min_length=1, max_length=100)] = ["*"]
    description: Annotated[str, Field(max_length=1024)] = ""
    headers: dict[str, str] = {}
    secret: str | None = Field(default=None, description="whsec_...; generated when absent")
    rate_limit: Annotated[float | None, Field(gt=0, le=100_000)] = None
    max_in_flight: Annotated[int | None, Field(ge=1, le=10_000)] = None
    enabled: bool = True

    _url = field_validator("url")(_check_url)
    _headers = field_validator("headers")(_check_headers)
    _types = field_validator("event_types")(_check_types)
    _secret = field_validator("secret")(_check_secret)


_NOT_NULLABLE = frozenset({"url", "app", "event_types", "description", "headers", "enabled"})


def endpoint_record(**fields: Any) -> dict[str, Any]:
    """A new endpoint as it is stored: validated fields (``EndpointIn``), a fresh ``ep_``
    id, its secret (made when none is given) and timestamps."""
    now = int(time.time() * 1000)
    record = EndpointIn.model_validate(fields).model_dump()
    record.update(
        id=ids.new_id("ep"),
        secret=record["secret"] or signing.generate_secret(),
        previous_secrets=[],
        created_at=now,
        updated_at=now,
    )
    return record


def public_endpoint(endpoint: dict[str, Any], *, with_secret: bool = False) -> dict[str, Any]:
    """An endpoint as the API and CLI show it: no secrets unless asked for."""
    out = {k: v for k, v in endpoint.items() if k not in ("secret", "previous_secrets")}
    if with_secret:
        out["secret"] = endpoint["secret"]
    return out


class EndpointPatch(Strict):
    """Change an endpoint: only the fields given change."""

    url: Annotated[str | None, Field(max_length=2048)] = None
    app: App | None = None
    event_types: Annotated[list[str] | None, Field(min_length=1, max_length=100)] = None
    description: Annotated[str | None, Field(max_length=1024)] = None
    headers: dict[str, str] | None = None
    rate_limit: Annotated[float | None, Field(gt=0, le=100_000)] = None
    max_in_flight: Annotated[int | None, Field(ge=1, le=10_000)] = None
    enabled: bool | None = None

    @model_validator(mode="after")
    def _no_nulls(self) -> EndpointPatch:
        # null clears rate_limit / max_in_flight; for any other field it would store a
        # broken endpoint (no url, no app, ...), so it is refused.
        nulled = sorted(
            f for f in self.model_fields_set & _NOT_NULLABLE if getattr(self, f) is None
        )
        if nulled:
            raise ValueError(f"{', '.join(nulled)} cannot be null")
        return self

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else _check_url(v)

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return None if v is None else _check_headers(v)

    @field_validator("event_types")
    @classmethod
    def _types(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _check_types(v)


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


class EventIn(Strict):
    """Publish an event."""

    type: Annotated[str, Field(pattern=TYPE_PATTERN, description="event type, e.g. order.paid")]
    payload: Any = Field(description="any JSON value")
    app: App = "default"
    endpoint_ids: Annotated[list[str] | None, Field(max_length=1000)] = Field(
        default=None, description="only these endpoints (still filtered by app and type)"
    )


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
