"""Publishing as a service: an event in, the event and its deliveries stored, all or nothing.

The HTTP API (``POST /v1/events``) is one caller; any other entry point (a connector that
reads a database outbox, a CLI command) publishes through the same :class:`Publisher`,
so target selection, shard choice, id minting, the idempotency fingerprint and the body
sent are decided in one place. The write itself is one script (``publish.lua``), or two
steps when an Idempotency-Key's guard is on another shard than its event
(:mod:`relay.idempotency`): after :meth:`Publisher.publish` returns, everything is in
Redis.

The logic a publish runs for tenants (its type's JSON Schema, its targets' filters) is
judged by the publisher's judge in one call: the API, the outbox connector and the ops
relay pass a :class:`relay.sandbox.Sandbox` (child processes, within budgets); without
one it runs in this process (:class:`relay.sandbox.Inline`, for tests).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from relay.domain import filters, ids, matching, ordering, signing
from relay.domain.schema import EventIn
from relay.endpoints import catalog
from relay.idempotency import Guard, Write
from relay.queue.store import Store
from relay.sandbox import Inline, Judge, SchemaFailure, Verdict, Work
from relay.sandbox.work import MEMORY_BYTES, SCHEMA_SECONDS

EndpointSource = Callable[[str], Awaitable[list[dict[str, Any]]]]
EventTypeSource = Callable[[str], Awaitable[catalog.Known | None]]


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


class IdempotencyKeyReused(PublishError):
    status = 409
    code = "idempotency_key_reused"


@dataclass(frozen=True, slots=True)
class Published:
    """The answer to a publish: ``created`` False means the same key and body came again
    and ``answer`` is the first publish's, unchanged (nothing new was written)."""

    answer: dict[str, Any]
    created: bool


def select_targets(endpoints: Sequence[dict[str, Any]], event: EventIn) -> list[dict[str, Any]]:
    """The enabled endpoints among the app's ``endpoints`` subscribed to the event's type,
    narrowed to its ``endpoint_ids`` when given; an id not among ``endpoints`` is refused."""
    if event.endpoint_ids is not None:
        known = {e["id"] for e in endpoints}
        unknown = [i for i in event.endpoint_ids if i not in known]
        if unknown:
            raise UnknownEndpoints(f"not endpoints of app {event.app!r}: {', '.join(unknown[:10])}")
        wanted = set(event.endpoint_ids)
        endpoints = [e for e in endpoints if e["id"] in wanted]
    return [e for e in endpoints if e["enabled"] and matching.matches(e["event_types"], event.type)]


def fingerprint(event: EventIn) -> str:
    """What "the same request body" means for an idempotency key."""
    fields = event.model_dump()
    if fields["ordering_key"] is None:  # absent: the same fingerprint as before lanes
        del fields["ordering_key"]
    return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()


class Publisher:
    """Publishes events into one store. ``endpoints_for_app`` and ``event_types``
    default to Redis reads; the API passes its endpoint and event type caches, and its
    sandbox as ``judge``. ``relay_events``: relay's own publisher (the ops relay, an
    endpoint's test event), the only kind that may publish into the reserved ops app."""

    def __init__(
        self,
        store: Store,
        endpoints_for_app: EndpointSource | None = None,
        event_types: EventTypeSource | None = None,
        judge: Judge | None = None,
        *,
        relay_events: bool = False,
    ) -> None:
        self.store = store
        self.relay_events = relay_events
        self.settings = store.settings
        self._endpoints_for_app = endpoints_for_app or store.list_endpoints
        self._event_type = event_types or functools.partial(catalog.lookup, store)
        self.judge: Judge = judge if judge is not None else Inline()
        self.guard = Guard(store)

    async def _first_answer(
        self, event: EventIn, idempotency_key: str | None, payload_json: bytes
    ) -> Published | None:
        """The first answer for this key and the same body, if there was one (its event
        written first when a request died between the two steps of its publish)."""
        if idempotency_key is None:
            return None
        raw = await self.guard.remembered(event.app, idempotency_key)
        if raw is None:
            return None
        first = orjson.loads(raw)
        if first["h"] != fingerprint(event):
            return None
        if "p" in first:
            await self.guard.finish(idempotency_key, raw, "", payload_json)
        return Published(first["answer"], created=False)

    async def _known(self, event: EventIn) -> catalog.Known | None:
        """The event's type in the catalog; an unknown type refused in strict mode."""
        known = await self._event_type(event.type)
        if known is None and self.settings.event_types_strict:
            raise UnknownEventType(
                f"event type {event.type} is not in the catalog (RELAY_EVENT_TYPES_STRICT=1)"
            )
        return known

    async def _targets(
        self, event: EventIn, payload_json: bytes, known: catalog.Known | None
    ) -> tuple[list[dict[str, Any]], list[dict[str, str]], bool]:
        """The endpoints the event goes to, and those its filters left out with a reason,
        after the payload passed its type's schema (else the :class:`PublishError`);
        and whether the app is pinned (:func:`relay.domain.ordering.pinned`)."""
        endpoints = await self._endpoints_for_app(event.app)
        pin = ordering.pinned(endpoints)
        try:
            targets, refused = select_targets(endpoints, event), None
        except UnknownEndpoints as exc:  # said after the schema's verdict, as before it
            targets, refused = [], exc
        filtered = [t for t in targets if t.get("filter")]
        work = Work(
            event.app,
            event.type,
            event.payload,
            payload_json,
            None if known is None else known.schema_json,
            [t["filter"] for t in filtered],
        )
        verdict = Verdict() if work.empty else await self.judge.judge(work)
        if verdict.schema is not None:
            raise _refusal(event.type, verdict.schema)
        if refused is not None:
            raise refused
        out: set[str] = set()
        erred: list[dict[str, str]] = []
        for target, keep in zip(filtered, verdict.filters, strict=True):
            if keep is not True:
                out.add(target["id"])
                if isinstance(keep, str):  # erred or over budget: recorded on the event
                    erred.append({"endpoint_id": target["id"], "reason": keep})
        return ([t for t in targets if t["id"] not in out] if out else targets), erred, pin

    async def publish(
        self, event: EventIn, *, idempotency_key: str | None = None, trace: str = ""
    ) -> Published:
        """Store ``event`` with one delivery per target endpoint; raises a
        :class:`PublishError` (and writes nothing) when it cannot be published.
        ``trace``: the publish span's context to store with the event (tracing on)."""
        if event.app == self.settings.ops_app and not self.relay_events:
            raise AppReserved(f"app {event.app!r} is reserved for relay's events")
        payload_json = orjson.dumps(event.payload)
        limit = self.settings.max_payload_bytes
        if len(payload_json) > limit:
            raise PayloadTooLarge(f"payload is {len(payload_json)} bytes; the limit is {limit}")
        try:
            known = await self._known(event)
            targets, filtered, pin = await self._targets(event, payload_json, known)
        except CatalogRefusal:
            remembered = await self._first_answer(event, idempotency_key, payload_json)
            if remembered is None:
                raise
            return remembered
        deprecated = known is not None and known.deprecated
        filtered = filtered[: filters.MAX_RECORDED]

        if len(targets) > ids.MAX_DELIVERIES:
            raise TooManyDeliveries(
                f"the event would go to {len(targets)} endpoints; one event has at most "
                f"{ids.MAX_DELIVERIES} deliveries (name them with endpoint_ids, or split it)"
            )
        lanes = [ordering.lane_of(e, event.ordering_key) for e in targets]
        ordered = any(lane is not None for lane in lanes)
        shard = ordering.shard_for(
            event.app,
            self.settings.shards,
            idempotency_key=idempotency_key,
            ordering_key=event.ordering_key,
            ordered=ordered,
            pin=pin,
        )
        now_ms = int(time.time() * 1000)
        event_id = ids.new_event_id(shard, now_ms)
        deliveries = [(ids.delivery_id(event_id, i), e["id"]) for i, e in enumerate(targets)]
        # per delivery: its lane ("" unordered) and what a dead head does to it
        lane_args = [
            (lane or "", ordering.on_dead(e)) for e, lane in zip(targets, lanes, strict=True)
        ]
        answer: dict[str, Any] = {
            "id": event_id,
            "type": event.type,
            "app": event.app,
            "created_at": signing.rfc3339_ms(now_ms),
            "deliveries": [{"id": d, "endpoint_id": e} for d, e in deliveries],
        }
        if filtered:
            answer["filtered"] = filtered
        if deprecated:  # accepted; said so, and only then (the answer is otherwise unchanged)
            answer["type_deprecated"] = True
        write = Write(
            shard=shard,
            event_id=event_id,
            event_type=event.type,
            app=event.app,
            body=signing.build_body(event_id, event.type, now_ms, payload_json),
            created_ms=now_ms,
            deliveries=deliveries,
            filtered=filtered,
            lanes=lane_args if ordered else None,
            trace=trace,
        )
        if idempotency_key is None:
            await write.to(self.store, None, copy=False)
            return Published(answer, created=True)
        taken = await self.guard.publish(
            idempotency_key, fingerprint(event), answer, write, payload_json
        )
        if taken is None:
            return Published(answer, created=True)
        first, same = taken
        if not same:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was used with a different request body"
            )
        return Published(first, created=False)


def _refusal(event_type: str, failure: SchemaFailure) -> PublishError:
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
