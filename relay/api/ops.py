"""Health, readiness, stats, metrics and the OpenAPI document."""

from __future__ import annotations

from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel

from relay import __version__
from relay.api.common import ROUTES, STORE, json, route
from relay.api.models import ErrorOut, StatsOut
from relay.ops import metrics


class HealthOut(BaseModel):
    status: Literal["ok", "ready", "unavailable"]
    error: str | None = None


@route("GET", "/healthz", summary="Alive", auth=False, responses={200: HealthOut})
async def healthz(request: web.Request) -> web.Response:
    return json({"status": "ok"})


@route(
    "GET",
    "/readyz",
    summary="Ready: Redis answers and accepts writes",
    auth=False,
    responses={200: HealthOut, 503: HealthOut},
)
async def readyz(request: web.Request) -> web.Response:
    try:
        # a tiny write with a TTL: a read-only replica, a busy script, MISCONF or a full
        # Redis answers PING but refuses every publish
        await request.app[STORE].check_writable()
    except Exception as exc:
        answer = json({"status": "unavailable", "error": type(exc).__name__}, status=503)
        answer.headers["Retry-After"] = "1"
        return answer
    return json({"status": "ready"})


@route(
    "GET",
    "/v1/stats",
    summary="Counts by status, queue depths, oldest due age",
    responses={200: StatsOut, 401: ErrorOut},
)
async def stats(request: web.Request) -> web.Response:
    return json(await request.app[STORE].stats())


@route("GET", "/metrics", summary="Prometheus metrics of this process", auth=False)
async def prometheus(request: web.Request) -> web.Response:
    return await metrics.render(request.app[STORE])


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document, generated from the route table and its models."""
    schemas: dict[str, Any] = {}

    def ref(model: Any) -> dict[str, Any]:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in schema.pop("$defs", {}).items():
            schemas[name] = sub
        schemas[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    paths: dict[str, Any] = {}
    for spec in ROUTES:
        op: dict[str, Any] = {"summary": spec.summary, "responses": {}}
        for param in ("id", "name"):
            if "{" + param + "}" in spec.path:
                op["parameters"] = [
                    {"name": param, "in": "path", "required": True, "schema": {"type": "string"}}
                ]
        if spec.query is not None:
            for name, f in spec.query.model_fields.items():
                op.setdefault("parameters", []).append(
                    {
                        "name": name,
                        "in": "query",
                        "required": f.is_required(),
                        "schema": spec.query.model_json_schema()["properties"][name],
                    }
                )
        if spec.body is not None:
            op["requestBody"] = {
                "required": spec.body_required,
                "content": {"application/json": {"schema": ref(spec.body)}},
            }
        responses = dict(spec.responses or {200: None})
        # What the shared request parsing answers on its own (relay.api.common).
        if spec.body is not None:
            responses.setdefault(400, ErrorOut)  # invalid_json
            responses.setdefault(413, ErrorOut)  # payload_too_large
        if spec.body is not None or spec.query is not None:
            responses.setdefault(422, ErrorOut)  # validation_error
        for status, model in sorted(responses.items()):
            entry: dict[str, Any] = {"description": "error" if status >= 400 else "ok"}
            if model is not None:
                entry["content"] = {"application/json": {"schema": ref(model)}}
            op["responses"][str(status)] = entry
        if spec.auth:
            op["security"] = [{"bearer": []}]
            op["responses"].setdefault(
                "401",
                {
                    "description": "missing or invalid token",
                    "content": {"application/json": {"schema": ref(ErrorOut)}},
                },
            )
            # relay.api.access: an app's API key or portal session without the scope, or
            # past its rate limit (RELAY_API_RATE)
            for status, text in ((403, "forbidden for this key"), (429, "rate_limited")):
                op["responses"].setdefault(
                    str(status),
                    {
                        "description": text,
                        "content": {"application/json": {"schema": ref(ErrorOut)}},
                    },
                )
        paths.setdefault(spec.path, {})[spec.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "relay",
            "version": __version__,
            "description": "Webhook delivery service on Redis",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


@route("GET", "/openapi.json", summary="This document", auth=False)
async def openapi(request: web.Request) -> web.Response:
    return json(openapi_document())
