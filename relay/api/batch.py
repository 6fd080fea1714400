"""``POST /v1/events/batch``: many events in one request, each published or refused alone."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web
from pydantic import Field

from relay import tracing
from relay.api.access import pinned_app
from relay.api.common import PUBLISHER, ApiError, body, json, route, validate
from relay.api.events import valid_key
from relay.api.models import MAX_BATCH, EventBatchIn, EventBatchOut, EventIn, EventPublishIn
from relay.domain.schema import StrictBody
from relay.publishing import PublishError


class _Envelope(StrictBody):
    """The batch before its events are read one by one (one bad event refuses only itself)."""

    events: list[Any] = Field(min_length=1, max_length=MAX_BATCH)


@route(
    "POST",
    "/v1/events/batch",
    summary="Publish several events",
    operation_id="publishEvents",
    tag="Events",
    body=EventBatchIn,
    responses={200: EventBatchOut},
    errors={503: ("replication_timeout",)},
    examples={
        "two-orders": (
            "Two events, each with its own idempotency key",
            {
                "events": [
                    {"type": "order.paid", "payload": {"order": 1001}, "idempotency_key": "o-1001"},
                    {"type": "order.paid", "payload": {"order": 1002}, "idempotency_key": "o-1002"},
                ]
            },
        ),
    },
)
async def publish_batch(request: web.Request) -> web.Response:
    """Publish up to 100 events, each exactly as ``POST /v1/events`` would (its
    ``deliver_at`` included) with its
    ``idempotency_key`` as the Idempotency-Key header: all or nothing per event, never per
    batch. The answer (200) has one result per event, in order, with the status and body
    ``POST /v1/events`` would have answered that event: 201 with the event, 200 with the
    first answer of a key sent again, or a 4xx error (409 ``idempotency_key_reused``, 422,
    413, 403). A refusal of the whole request (its body, its credential, storage down)
    has the usual error answer and writes nothing, except a 503, after which retrying
    the batch as it was answers every event already written with 200. A key given twice
    in one batch answers its second event as a retry of its first."""
    if tracing.on:  # one span for the request, its context stored with each event
        with tracing.publish_span(request.headers, "/v1/events/batch") as span:
            try:
                resp = await _publish_batch(request, tracing.carrier())
            except web.HTTPException as exc:  # ApiError: the 4xx it answers
                tracing.http_status(span, exc.status)
                raise
            tracing.http_status(span, resp.status)
            return resp
    return await _publish_batch(request, "")


async def _publish_batch(request: web.Request, trace: str) -> web.Response:
    envelope, _ = await body(request, _Envelope)
    results: list[dict[str, Any] | None] = []
    todo: list[tuple[EventIn, str | None]] = []
    for item in envelope.events:
        try:
            todo.append(_event(request, item))
            results.append(None)
        except ApiError as exc:
            results.append({"status": exc.status, **orjson.loads(exc.text or "{}")})
    answers = iter(await request.app[PUBLISHER].publish_batch(todo, trace=trace))
    out = [result or _result(next(answers)) for result in results]
    return json({"results": out})


def _event(request: web.Request, item: Any) -> tuple[EventIn, str]:
    """One event of the batch and its idempotency key; ApiError when it is not valid."""
    if not isinstance(item, dict):
        raise ApiError(422, "validation_error", "an event must be a JSON object")
    fields = dict(item)
    key = fields.pop("idempotency_key", None)
    if not valid_key(key):
        why = "idempotency_key is required: 1-256 printable characters"
        details = [{"field": "idempotency_key", "message": why}]
        raise ApiError(422, "validation_error", why, details=details)
    event = validate(EventPublishIn, fields)
    app = pinned_app(request, event.app, "app" in event.model_fields_set, ApiError)
    if app != event.app:  # an app key publishes to its own app
        event = event.model_copy(update={"app": app})
    return event, key


def _result(answer: Any) -> dict[str, Any]:
    if isinstance(answer, PublishError):
        return {"status": answer.status, "error": answer.code, "message": answer.message,
                **answer.extra}  # fmt: skip
    return {"status": 201 if answer.created else 200, "event": answer.answer}
