"""What a valid endpoint and a valid event are: the models that validate every input.

The API, the CLI and any connector validate with these (and only these), so a record
that reaches Redis has passed the same checks whichever way it came in. Pure: no I/O.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from yarl import URL

from relay.domain import destinations, ed25519, filters, ids, matching, signing
from relay.domain.ordering import OnDead, Ordering

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
# A delivery's status; "held": its endpoint is disabled, it waits until it is enabled again;
# "queued": it waits in its ordered lane for the delivery before it to finish.
Status = Literal["scheduled", "pending", "queued", "held", "delivering", "succeeded", "dead"]
# How an endpoint's requests are signed: "v1," HMAC-SHA256 (whsec_) or "v1a," ed25519 (whsk_).
Signing = Literal["hmac", "ed25519"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class StrictBody(Strict):
    """A JSON request body: unknown fields refused, and no coercion between types
    (``"enabled": "no"`` or ``0`` is not a boolean, ``"since": "123"`` not a time)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False, strict=True)


# rate_limit bounds (requests/s): below one request per 100 s a "limit" is a typo (1e-17
# would break the shared limiter's arithmetic); admit.lua clamps to the same bounds.
RATE_LIMIT_MIN, RATE_LIMIT_MAX = 0.01, 100_000
RateLimit = Annotated[
    float | None,
    Field(ge=RATE_LIMIT_MIN, le=RATE_LIMIT_MAX, description="requests/s, 0.01 to 100000"),
]


def _check_url(url: str) -> str:
    try:
        parsed = URL(url)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise ValueError("url must not contain spaces or control characters (NUL, CR, LF)")
    if destinations.kind_of(url) != "http":
        destinations.parse(url)  # a broker: its kind's own checks
        return url
    if parsed.scheme not in ("http", "https"):
        raise ValueError("url must use http, https, redis, rediss, nats, tls, amqp or amqps")
    if not parsed.host:
        raise ValueError("url must have a host")
    if parsed.user or parsed.password:
        raise ValueError("url must not carry credentials; use headers")
    return url


HEADER_MASK = destinations.MASK  # what endpoint answers show for a custom header's value
BROKER_HEADERS = (
    "headers are for http(s) endpoints: a broker message carries only the webhook-id, "
    "webhook-timestamp and webhook-signature values"
)


class HeadersOnBroker(ValueError):
    """Custom headers asked of an endpoint whose url names a broker (which sends none)."""

    def __init__(self) -> None:
        super().__init__(BROKER_HEADERS)


def check_headers_sent(endpoint: Mapping[str, Any]) -> None:
    """Raise :class:`HeadersOnBroker` when ``endpoint`` (a record, or what a write makes
    of it) names a broker and has custom headers, which no message would carry."""
    if endpoint.get("headers") and destinations.kind_of(endpoint.get("url") or "") != "http":
        raise HeadersOnBroker


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
        if value == HEADER_MASK:  # a read sent back as is would store the mask
            raise ValueError(
                f"header {name!r} holds the mask that reads show; send the real value "
                "(GET /v1/endpoints/{id}/headers)"
            )
    return headers


def _check_types(types: list[str]) -> list[str]:
    return [matching.validate_pattern(t) for t in types]


def _check_filter(text: str | None) -> str | None:
    try:
        return filters.check(text)
    except filters.FilterInvalid as exc:  # its own code: 422 filter_invalid
        raise PydanticCustomError("filter_invalid", "{reason}", {"reason": str(exc)}) from None


FILTER_DESCRIPTION = (
    "CEL expression over payload, event_type and app; only events for which it is true "
    "are delivered (null: every event)"
)


def _check_secret(secret: str | None) -> str | None:
    if secret is not None and (
        not secret.startswith(signing.SECRET_PREFIX) or not signing.is_valid_secret(secret)
    ):
        raise ValueError("secret must be whsec_ followed by base64 of 24 to 64 bytes")
    return secret


class EndpointIn(StrictBody):
    """Create an endpoint."""

    url: Annotated[
        str,
        Field(
            max_length=2048,
            description="where deliveries go, by scheme: http(s) URL that receives POSTs, "
            "redis(s)://host:port/db?stream=NAME&maxlen=N, nats|tls://host:port/SUBJECT, "
            "amqp(s)://user:password@host:port/vhost?exchange=NAME&routing_key=TEMPLATE",
        ),
    ]
    app: App = "default"
    event_types: Annotated[list[str], Field(min_length=1, max_length=100)] = ["*"]
    description: Annotated[str, Field(max_length=1024)] = ""
    headers: dict[str, str] = {}
    secret: str | None = Field(default=None, description="whsec_...; generated when absent")
    rate_limit: RateLimit = None
    max_in_flight: Annotated[int | None, Field(ge=1, le=10_000)] = None
    enabled: bool = True
    filter: Annotated[str | None, Field(description=FILTER_DESCRIPTION)] = None
    ordering: Ordering = Field(
        default="none", description="none, key (one lane per ordering_key) or endpoint (one lane)"
    )
    ordering_on_dead: OnDead = Field(
        default="skip", description="skip: the next one goes; block: the lane waits"
    )
    signing: Signing = Field(
        default="hmac",
        description="hmac: v1 signatures with the whsec_ secret; ed25519: v1a signatures "
        "with a private key relay makes and never shows (reads give its public_key, whpk_)",
    )

    _url = field_validator("url")(_check_url)
    _headers = field_validator("headers")(_check_headers)
    _types = field_validator("event_types")(_check_types)
    _secret = field_validator("secret")(_check_secret)
    _filter = field_validator("filter")(_check_filter)

    @model_validator(mode="after")
    def _secret_is_hmac(self) -> EndpointIn:
        if self.signing == "ed25519" and self.secret is not None:
            raise ValueError("secret is for hmac signing; relay makes the ed25519 key itself")
        return self

    @field_validator("headers")
    @classmethod
    def _headers_sent(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        check_headers_sent({"url": info.data.get("url"), "headers": v})
        return v


_NOT_NULLABLE = frozenset(
    {"url", "app", "event_types", "description", "headers", "enabled", "ordering"}
    | {"ordering_on_dead"}
)


def endpoint_record(**fields: Any) -> dict[str, Any]:
    """A new endpoint as it is stored: validated fields (``EndpointIn``), a fresh ``ep_``
    id, its secret (made when none is given) and timestamps."""
    now = int(time.time() * 1000)
    record = EndpointIn.model_validate(fields).model_dump()
    record.update(
        id=ids.new_id("ep"),
        secret=record["secret"] or new_secret(record["signing"]),
        previous_secrets=[],
        created_at=now,
        updated_at=now,
    )
    return record


def new_secret(scheme: str) -> str:
    """A fresh signing secret: ``whsec_`` (hmac) or a ``whsk_`` private key (ed25519)."""
    return ed25519.generate_key() if scheme == "ed25519" else signing.generate_secret()


def public_endpoint(endpoint: dict[str, Any], *, with_secret: bool = False) -> dict[str, Any]:
    """An endpoint as the API and CLI show it: no secrets unless asked for, custom
    header values and a broker url's password masked (operators put receiver credentials
    there; the API's ``GET /v1/endpoints/{id}/headers`` and ``/url`` show them), and its
    destination ``kind`` (relay.domain.destinations). An ed25519 endpoint shows its
    ``public_key`` (and those of rotated-out keys still signing), never its private key,
    even when asked for the secret."""
    out = {k: v for k, v in endpoint.items() if k not in ("secret", "previous_secrets")}
    out["headers"] = dict.fromkeys(endpoint.get("headers") or {}, HEADER_MASK)
    out["url"] = destinations.masked(endpoint["url"])
    out["kind"] = destinations.kind_of(endpoint["url"])
    out["signing"] = endpoint.get("signing", "hmac")
    if out["signing"] == "ed25519":
        out.update(public_keys(endpoint))
    elif with_secret:
        out["secret"] = endpoint["secret"]
    return out


def public_keys(endpoint: dict[str, Any], now_ms: int | None = None) -> dict[str, Any]:
    """An ed25519 endpoint's ``public_key`` and ``previous_public_keys`` (the rotated-out
    keys still signing, each with ``expires_at``): what receivers verify with."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return {
        "public_key": ed25519.public_key(endpoint["secret"]),
        "previous_public_keys": [
            {"public_key": ed25519.public_key(p["secret"]), "expires_at": p["expires_at"]}
            for p in endpoint.get("previous_secrets", ())
            if p["expires_at"] > now
        ],
    }


class EndpointPatch(StrictBody):
    """Change an endpoint: only the fields given change."""

    url: Annotated[str | None, Field(max_length=2048)] = None
    app: App | None = None
    event_types: Annotated[list[str] | None, Field(min_length=1, max_length=100)] = None
    description: Annotated[str | None, Field(max_length=1024)] = None
    headers: dict[str, str] | None = None
    rate_limit: RateLimit = None
    max_in_flight: Annotated[int | None, Field(ge=1, le=10_000)] = None
    enabled: bool | None = None
    filter: Annotated[str | None, Field(description=FILTER_DESCRIPTION)] = None
    ordering: Ordering | None = None  # applies to deliveries published after the change
    ordering_on_dead: OnDead | None = None

    _filter = field_validator("filter")(_check_filter)

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


class EventIn(StrictBody):
    """Publish an event."""

    type: Annotated[str, Field(pattern=TYPE_PATTERN, description="event type, e.g. order.paid")]
    payload: Any = Field(description="any JSON value")
    app: App = "default"
    endpoint_ids: Annotated[list[str] | None, Field(max_length=1000)] = Field(
        default=None, description="only these endpoints (still filtered by app and type)"
    )
    ordering_key: Annotated[str | None, Field(min_length=1, max_length=200)] = Field(
        default=None,
        description="1-200 printable characters: to endpoints with ordering 'key', events "
        "with the same key are sent one at a time, in publish order",
    )

    @field_validator("ordering_key")
    @classmethod
    def _ordering_key(cls, v: str | None) -> str | None:
        if v is not None and not v.isprintable():
            raise ValueError("ordering_key must be printable characters (no control characters)")
        return v


def parse_time(text: str) -> int:
    """RFC 3339 (``2026-12-01T10:00:00Z``, an offset, fractions) to ms since the epoch."""
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 time (e.g. 2026-12-01T10:00:00Z)") from None
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone: add Z or an offset such as +02:00")
    return int(when.timestamp() * 1000)


class EventPublishIn(EventIn):
    """Publish an event (``POST /v1/events``): the event, and when its deliveries go."""

    deliver_at: Annotated[str | None, Field(max_length=64)] = Field(
        default=None,
        description="RFC 3339 with an offset: its deliveries go then, status scheduled until "
        "it comes; a past time means now; at most RELAY_MAX_SCHEDULE_AHEAD ahead",
    )

    @field_validator("deliver_at")
    @classmethod
    def _deliver_at(cls, v: str | None) -> str | None:
        if v is not None:
            parse_time(v)
        return v

    def deliver_at_ms(self) -> int | None:
        """``deliver_at`` in ms since the epoch (None: at once)."""
        return None if self.deliver_at is None else parse_time(self.deliver_at)


# what pydantic puts before the message of a ValueError or AssertionError a validator raised
_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def refusal(exc: ValidationError, whole: str = "body", most: int = 5) -> tuple[str, list[Any]]:
    """How a refused input reads: one text of at most ``most`` errors, and the details
    ``[{"field": dotted path, "message": ...}]`` (``whole``: the error of the model itself).
    Messages lose pydantic's "Value error, " prefix, and the text names a field only
    where its message does not start with the field already ("filter is not valid CEL")."""
    details = []
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = error["loc"]
        where = ".".join(str(p) for p in loc) or whole
        message = error["msg"]
        for prefix in _PYDANTIC_PREFIXES:
            message = message.removeprefix(prefix)
        details.append({"field": where, "message": message})
        named = str(loc[-1]) if loc else whole
        said = message.startswith((f"{named} ", f"{where} "))
        parts.append(message if said else f"{where}: {message}")
    return "; ".join(parts[:most]), details
