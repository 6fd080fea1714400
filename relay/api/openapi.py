"""The OpenAPI 3.1 document, generated from the route table (:func:`relay.api.common.route`).

Each operation gets its ``operationId``, tag and summary from its route, its description
from the handler's docstring, and its error answers from :func:`errors_of`: the errors
every route of its kind can answer (auth, body, Redis) plus the route's own, each status
listing its codes with one example per code. ``tests/system/test_openapi.py`` fails when a route
lacks any of these.
"""

from __future__ import annotations

import inspect
from http import HTTPStatus
from typing import Any

from relay import __version__
from relay.api.common import ROUTES, RouteSpec
from relay.api.models import ErrorOut
from relay.api.svix.errors import PREFIX as SVIX_PREFIX
from relay.api.svix.errors import shape as svix_shape
from relay.api.svix.models import SvixErrorOut

TAGS = {
    "Endpoints": "Where events go: a URL, the event types it subscribes to, its signing "
    "secret or key, filter, ordering and limits.",
    "Events": "Publish an event: relay stores it with one delivery per subscribed endpoint "
    "before it answers.",
    "Deliveries": "One event to one endpoint: its status, attempt log, replay and discard.",
    "Event types": "The catalog of event types, with optional JSON Schemas that payloads "
    "are validated against.",
    "Replays": "Reconciliation replay jobs: replay every delivery of a time range.",
    "Tenants": "API keys scoped to one app, and portal sessions for an app's own customers.",
    "Dashboard": "The reads behind the dashboard at /ui/ (the operator's).",
    "Operations": "Health, readiness, metrics, queue statistics and this document.",
    "Svix-compatible API": "/api/v1: the routes the official Svix SDKs call (applications, "
    "endpoints, messages, attempts, event types, app portal access), over the same services "
    "as /v1. camelCase fields, lists as {data, iterator, prevIterator, done}, errors as "
    "{code, detail}; what relay does not have is refused with a 4xx (docs/guides/svix.md).",
}

ERRORS = {
    "invalid_json": "the body is empty or not JSON",
    "invalid_body": "the body does not decode as its Content-Encoding says",
    "unauthorized": "no bearer token, or an unknown or revoked one",
    "token_expired": "a portal session past its expires_at",
    "forbidden": "the API key or portal session lacks the scope, or names another app",
    "not_found": "no such resource (another app's answers the same)",
    "payload_too_large": "the body, or the event's payload, is over its size limit",
    "validation_error": "the body, the query or a header is not valid (details says where)",
    "filter_invalid": "the CEL filter does not compile, or a matches() pattern is not a "
    "literal RE2 compiles within its size (the reason)",
    "unknown_event_type": "with RELAY_EVENT_TYPES_STRICT=1: a type outside the catalog",
    "payload_invalid": "the payload does not match its event type's schema (path says where)",
    "schema_invalid": "the JSON Schema is not valid, or a $ref resolves to nothing",
    "schema_budget_exceeded": "validating the payload against its type's schema ran past "
    "its budget (1 s, 256 MiB); nothing written",
    "app_reserved": "the app is relay's own (RELAY_OPS_APP)",
    "unknown_endpoint": "an endpoint id that does not exist (or is another app's)",
    "too_many_deliveries": "more than 1,024 target endpoints for one event",
    "deliver_at_invalid": "deliver_at names no instant (a time without a time zone)",
    "deliver_at_too_far": "deliver_at is further ahead than RELAY_MAX_SCHEDULE_AHEAD",
    "deliver_at_ordered": "deliver_at is ahead and the event joins an ordered lane",
    "idempotency_key_reused": "the Idempotency-Key came before with another body",
    "delivery_not_replayable": "only dead or succeeded deliveries can be replayed",
    "delivery_not_discardable": "only dead deliveries can be discarded",
    "endpoint_disabled": "the endpoint is disabled",
    "event_type_exists": "an event type of that name exists",
    "event_type_in_use": "endpoints subscribe to the type by name (endpoint_ids)",
    "replay_not_running": "the replay job has ended",
    "conflict": "a generated id was taken; retry",
    "rotation_too_soon": "the endpoint rotated less than a minute ago (Retry-After)",
    "rate_limited": "the credential is past RELAY_API_RATE (Retry-After)",
    "unavailable": "Redis is down, loading, read-only or full, or no evaluator for filters "
    "and schemas could start: nothing written; retry",
    "replication_timeout": "not confirmed by RELAY_ACK_REPLICAS replicas in time; retry",
    "archive_required": "this search needs the history archive (RELAY_ARCHIVE_URL), which is off",
    "archive_unavailable": "the history archive (PostgreSQL) does not answer; retry",
    "invalid_cursor": "a cursor relay did not make for this caller; list from the start",
    "invalid_payload_filter": "the payload filter is not a JSON object",
    "public_url_required": "the Host is not loopback and RELAY_PUBLIC_URL is not set",
    "request_timeout": "the body did not arrive within RELAY_BODY_TIMEOUT",
    "unsupported": "a Svix feature relay does not have (docs/guides/svix.md lists each)",
}

PATH_PARAMS = {
    "endpoints": "the endpoint's id (ep_...)",
    "events": "the event's id (evt_...)",
    "deliveries": "the delivery's id (dlv_...)",
    "replays": "the replay job's id (rpl_...)",
    "api-keys": "the API key's id (key_...)",
    "event-types": "the event type's name (a / in it is sent as %2F)",
    "apps": "the app's name",
    "app": "the application's id: its relay app name (its uid)",
    "app-portal-access": "the application's id: its relay app name (its uid)",
    "endpoint": "the endpoint's id (ep_...)",
    "msg": "the message's id (evt_...) or its eventId",
    "attempt": "the attempt's id (atmpt_...)",
    "event-type": "the event type's name",
}

# the SPDX identifier of the license, as pyproject.toml declares it
LICENSE = "Apache-2.0"
LOCAL_SERVER = {"url": "http://127.0.0.1:8080", "description": "relay dev (make run)"}

DESCRIPTION = """\
relay's HTTP API. JSON in and out; every `/v1` route takes `Authorization: Bearer
<token>`: an operator's token (`RELAY_API_TOKENS`), an app's API key (`rk_...`) or a portal
session (`rp_...`). An error is a 4xx or 503 with `{"error": code, "message": text}`, and
a refused request changes nothing. Publish with an `Idempotency-Key` and retry with the
same key: one event, whatever the network did.
"""


def errors_of(spec: RouteSpec) -> dict[int, list[str]]:
    """Every error code the route can answer, by status."""
    codes: dict[int, list[str]] = {}

    def add(status: int, *names: str) -> None:
        codes.setdefault(status, []).extend(n for n in names if n not in codes.get(status, []))

    if spec.body is not None:
        add(400, "invalid_json", "invalid_body")
        add(413, "payload_too_large")
    if spec.body is not None or spec.query is not None or spec.headers:
        add(422, "validation_error")
    if spec.auth:  # relay.api.access, then Redis (relay.api.common.errors_and_auth)
        add(401, "unauthorized", "token_expired")
        add(403, "forbidden")
        if "{" in spec.path and not spec.creates:
            add(404, "not_found")
        add(429, "rate_limited")
        add(503, "unavailable")
    for status, names in spec.errors.items():
        add(status, *names)
    return dict(sorted(codes.items()))


def _error_answer(status: int, codes: list[str], svix: bool = False) -> dict[str, Any]:
    """One status's error answer: relay's ``{error, message}``, or on ``/api/v1``
    Svix's ``{code, detail}``."""
    lines = "\n".join(f"- `{code}`: {ERRORS[code]}" for code in codes)
    model = SvixErrorOut if svix else ErrorOut
    examples = {}
    for code in codes:
        value = {"error": code, "message": ERRORS[code]}
        examples[code] = {
            "summary": ERRORS[code],
            "value": svix_shape(status, value) if svix else value,
        }
    return {
        "description": f"{HTTPStatus(status).phrase}.\n\n{lines}",
        "content": {
            "application/json": {
                "schema": {"$ref": f"#/components/schemas/{model.__name__}"},
                "examples": examples,
            }
        },
    }


def _parameters(spec: RouteSpec) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    parts = spec.path.split("/")
    for i, part in enumerate(parts):
        if part.startswith("{"):
            params.append(
                {
                    "name": part[1:-1],
                    "in": "path",
                    "required": True,
                    "description": PATH_PARAMS[parts[i - 1]],
                    "schema": {"type": "string"},
                }
            )
    if spec.query is not None:
        properties = spec.query.model_json_schema()["properties"]
        for name, f in spec.query.model_fields.items():
            schema = properties[name]
            params.append(
                {
                    "name": name,
                    "in": "query",
                    "required": f.is_required(),
                    "description": schema.pop("description", None) or name.replace("_", " "),
                    "schema": schema,
                }
            )
    for name, text in spec.headers.items():
        params.append(
            {"name": name, "in": "header", "required": False, "description": text,
             "schema": {"type": "string"}}
        )  # fmt: skip
    return params


def _success(status: int, model: Any, ref: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"description": HTTPStatus(status).phrase}
    if model is not None:
        media = getattr(model, "media_type", "application/json")
        entry["content"] = {media: {"schema": ref(model)}}
    return entry


def _operation(spec: RouteSpec, ref: Any) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": spec.operation_id,
        "tags": [spec.tag],
        "summary": spec.summary,
        "description": inspect.getdoc(spec.handler) or "",
        "security": [{"bearer": []}] if spec.auth else [],
    }
    if params := _parameters(spec):
        op["parameters"] = params
    if spec.body is not None:
        content: dict[str, Any] = {"schema": ref(spec.body)}
        if spec.examples:
            content["examples"] = {
                name: {"summary": summary, "value": value}
                for name, (summary, value) in spec.examples.items()
            }
        op["requestBody"] = {
            "required": spec.body_required,
            "content": {"application/json": content},
        }
    responses: dict[str, Any] = {}
    for status, model in sorted((spec.responses or {200: None}).items()):
        responses[str(status)] = _success(status, model, ref)
    for status, codes in errors_of(spec).items():
        svix = spec.path.startswith(SVIX_PREFIX)
        responses.setdefault(str(status), _error_answer(status, codes, svix))
    op["responses"] = dict(sorted(responses.items()))
    return op


def openapi_document(public_url: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route; ``public_url`` (RELAY_PUBLIC_URL) is its
    first server when set."""
    schemas: dict[str, Any] = {}

    def ref(model: Any) -> dict[str, Any]:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in schema.pop("$defs", {}).items():
            schemas[name] = sub
        schemas[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    ref(ErrorOut)  # every error answer's schema
    ref(SvixErrorOut)  # on /api/v1
    paths: dict[str, Any] = {}
    for spec in ROUTES:
        paths.setdefault(spec.path, {})[spec.method.lower()] = _operation(spec, ref)
    servers = [{"url": public_url, "description": "this relay"}] if public_url else []
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "relay",
            "version": __version__,
            "description": DESCRIPTION,
            "license": {"name": LICENSE, "identifier": LICENSE},
        },
        "servers": [*servers, LOCAL_SERVER],
        "tags": [{"name": name, "description": text} for name, text in TAGS.items()],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "RELAY_API_TOKENS (the operator), an API key (rk_...) "
                    "or a portal session (rp_...)",
                }
            },
        },
    }
