"""The Svix-compatible API's request and answer models: camelCase, as the SDKs send and
read them. Inputs refuse unknown fields; fields Svix has and relay does not are declared
so that :func:`relay.api.svix.base.refuse` can answer them with a clear 422.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.alias_generators import to_camel

from relay.domain.schema import APP_PATTERN

Uid = Annotated[str, Field(pattern=APP_PATTERN, description="the relay app name")]
Metadata = dict[str, str]


class Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class CamelIn(Camel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class SvixApplicationIn(CamelIn):
    name: Annotated[str, Field(min_length=1, max_length=256)]
    uid: Uid | None = Field(default=None, description="the relay app; made (app_...) when absent")
    throttle_rate: int | None = Field(default=None, description="refused: relay paces endpoints")
    metadata: Metadata | None = None


class SvixApplicationPatch(CamelIn):
    name: Annotated[str | None, Field(min_length=1, max_length=256)] = None
    uid: Uid | None = None
    throttle_rate: int | None = None
    metadata: Metadata | None = None


class SvixApplicationOut(Camel):
    id: str = Field(description="the relay app name (its uid, when it has one)")
    uid: str | None
    name: str
    throttle_rate: int | None = None
    metadata: Metadata
    created_at: datetime
    updated_at: datetime


class SvixEndpointIn(CamelIn):
    url: Annotated[str, Field(max_length=2048)]
    description: Annotated[str | None, Field(max_length=1024)] = None
    throttle_rate: Annotated[int | None, Field(ge=1)] = Field(
        default=None, description="requests per second: relay's rate_limit"
    )
    uid: str | None = Field(default=None, description="refused: relay endpoints have ids only")
    disabled: bool | None = None
    event_types: list[str] | None = None
    channels: list[str] | None = Field(default=None, description="refused when not empty")
    secret: str | None = Field(default=None, description="whsec_...; made when absent")
    metadata: Metadata | None = Field(default=None, description="refused when not empty")
    headers: dict[str, str] | None = None


class SvixEndpointUpdate(CamelIn):
    """PUT: the whole endpoint but its secret and headers."""

    url: Annotated[str, Field(max_length=2048)]
    description: Annotated[str | None, Field(max_length=1024)] = None
    throttle_rate: Annotated[int | None, Field(ge=1)] = None
    uid: str | None = None
    disabled: bool | None = None
    event_types: list[str] | None = None
    channels: list[str] | None = None
    metadata: Metadata | None = None


class SvixEndpointPatch(CamelIn):
    url: Annotated[str | None, Field(max_length=2048)] = None
    description: Annotated[str | None, Field(max_length=1024)] = None
    throttle_rate: Annotated[int | None, Field(ge=1)] = None
    uid: str | None = None
    disabled: bool | None = None
    event_types: list[str] | None = None
    channels: list[str] | None = None
    metadata: Metadata | None = None
    secret: str | None = None


class SvixEndpointOut(Camel):
    id: str
    uid: str | None = None
    url: str
    description: str
    throttle_rate: int | None = None
    disabled: bool
    event_types: list[str] | None = Field(description="null: every event type")
    channels: list[str] | None = None
    metadata: Metadata
    created_at: datetime
    updated_at: datetime


class SvixSecretOut(Camel):
    key: str = Field(description="the whsec_ signing secret")


class SvixSecretRotateIn(CamelIn):
    key: str | None = Field(default=None, description="refused: relay makes the new secret")
    grace_period_seconds: int | None = Field(default=None, description="refused: 24 h fixed")


class SvixHeadersIn(CamelIn):
    headers: dict[str, str]


class SvixHeadersPatchIn(CamelIn):
    headers: dict[str, str]
    delete_headers: list[str] | None = None


class SvixHeadersOut(Camel):
    headers: dict[str, str]
    sensitive: list[str]


class SvixRecoverIn(CamelIn):
    since: datetime
    until: datetime | None = None


class SvixRecoverOut(Camel):
    id: str
    status: Literal["running", "finished", "failed"]
    task: str
    updated_at: datetime
    data: dict[str, Any] = Field(description="messagesSent: how many went back to pending")


class SvixMessageIn(CamelIn):
    event_id: Annotated[str | None, Field(min_length=1, max_length=256)] = Field(
        default=None, description="the idempotency key of the message"
    )
    event_type: str
    payload: dict[str, Any]
    channels: list[str] | None = None
    application: SvixApplicationIn | None = None
    tags: list[str] | None = None
    transformations_params: dict[str, Any] | None = None
    deliver_at: datetime | None = None
    payload_retention_period: int | None = None
    payload_retention_hours: int | None = None


class SvixMessageOut(Camel):
    id: str
    event_id: str | None = None
    event_type: str
    payload: Any
    channels: list[str] | None = None
    tags: list[str] | None = None
    timestamp: datetime
    deliver_at: datetime | None = None


StatusCode = Literal[0, 1, 2, 3, 4]
StatusText = Literal["success", "pending", "fail", "sending", "canceled"]


class SvixEndpointMessageOut(SvixMessageOut):
    status: StatusCode
    status_text: StatusText
    next_attempt: datetime | None = None


class SvixMessageEndpointOut(SvixEndpointOut):
    status: StatusCode
    status_text: StatusText
    next_attempt: datetime | None = None


class SvixAttemptOut(Camel):
    id: str
    msg_id: str
    endpoint_id: str
    url: str
    response: str
    response_status_code: int
    response_duration_ms: int
    status: StatusCode
    status_text: StatusText
    trigger_type: Literal[0, 1]
    timestamp: datetime
    msg: SvixMessageOut | None = None


class SvixEventTypeIn(CamelIn):
    name: str
    description: Annotated[str, Field(max_length=1024)]
    archived: bool | None = None
    deprecated: bool | None = None
    schemas: dict[str, Any] | None = Field(
        default=None, description='{"1": JSON Schema}: one version, relay\'s schema'
    )
    group_name: str | None = None
    feature_flags: list[str] | None = None


class SvixEventTypeUpsertIn(CamelIn):
    description: Annotated[str, Field(max_length=1024)]
    archived: bool | None = None
    deprecated: bool | None = None
    schemas: dict[str, Any] | None = None
    group_name: str | None = None
    feature_flags: list[str] | None = None


class SvixEventTypePatch(CamelIn):
    description: Annotated[str | None, Field(max_length=1024)] = None
    archived: bool | None = None
    deprecated: bool | None = None
    schemas: dict[str, Any] | None = None
    group_name: str | None = None
    feature_flags: list[str] | None = None


class SvixEventTypeOut(Camel):
    name: str
    description: str
    archived: bool
    deprecated: bool
    schemas: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    group_name: str | None = Field(default=None, description="always null: no groups")
    feature_flags: list[str] | None = Field(default=None, description="always null")


class SvixPortalAccessIn(CamelIn):
    application: SvixApplicationIn | None = None
    read_only: bool | None = None
    capabilities: list[str] | None = None
    expiry: Annotated[int | None, Field(ge=1)] = Field(
        default=None, description="seconds; at most RELAY_PORTAL_TTL"
    )
    feature_flags: list[str] | None = None
    session_id: str | None = None


class SvixPortalAccessOut(Camel):
    url: str = Field(description="relay's portal, the token in the fragment")
    token: str = Field(description="a portal session (rp_...): a bearer token for /v1 and /api/v1")


class SvixValidationItem(BaseModel):
    loc: list[str]
    msg: str
    type: str


class SvixErrorOut(BaseModel):
    code: str
    detail: str | list[SvixValidationItem] = Field(
        description="a text; on a 422, one entry per field in error"
    )


def listing(model: type[BaseModel]) -> type[BaseModel]:
    """The list envelope of ``model``: ``{data, iterator, prevIterator, done}``."""
    fields: Any = {
        "data": (list[model], ...),  # type: ignore[valid-type]
        "iterator": (str | None, ...),
        "prev_iterator": (str | None, None),
        "done": (bool, ...),
    }
    return create_model(f"SvixList{model.__name__.removeprefix('Svix')}", __base__=Camel, **fields)
