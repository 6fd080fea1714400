"""Publishing as a service: an event in, the event and its deliveries stored, all or nothing.

The HTTP API (``POST /v1/events``) is one caller; any other entry point (a connector that
reads a database outbox, a CLI command) publishes through the same :class:`Publisher`,
so target selection, shard choice, id minting, the idempotency fingerprint and the body
sent are decided in one place. The write itself is one script (``publish.lua``): after
:meth:`Publisher.publish` returns, everything is in Redis.

The logic a publish runs for tenants (its type's JSON Schema, its targets' filters) is
judged by the publisher's judge in one call: the API, the outbox connector and the ops
relay pass a :class:`relay.sandbox.Sandbox` (child processes, within budgets); without
one it runs in this process (:class:`relay.sandbox.Inline`, for tests).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from relay.domain import filters, ids, matching, ordering, signing
from relay.domain.schema import EventIn, EventPublishIn
from relay.endpoints import catalog
from relay.idempotency import Guard, Published, Write, fingerprint, keyed_answer
from relay.publish_errors import (
    AppReserved,
    CatalogRefusal,
    DeliverAtInvalid,
    DeliverAtOrdered,
    DeliverAtTooFar,
    EventTypeSchemaInvalid,
    IdempotencyKeyReused,
    PayloadInvalid,
    PayloadTooLarge,
    PublishError,
    SchemaBudgetExceeded,
    TooManyDeliveries,
    UnknownEndpoints,
    UnknownEventType,
    days,
    refusal,
)
from relay.queue.store import Store
from relay.sandbox import Inline, Judge, Verdict, Work

# the refusals are part of this module's interface: callers import them from here
__all__ = [
    "AppReserved",
    "CatalogRefusal",
    "DeliverAtInvalid",
    "DeliverAtOrdered",
    "DeliverAtTooFar",
    "EventTypeSchemaInvalid",
    "IdempotencyKeyReused",
    "PayloadInvalid",
    "PayloadTooLarge",
    "PublishError",
    "Published",
    "Publisher",
    "SchemaBudgetExceeded",
    "TooManyDeliveries",
    "UnknownEndpoints",
    "UnknownEventType",
    "fingerprint",
    "select_targets",
]

EndpointSource = Callable[[str], Awaitable[list[dict[str, Any]]]]
EventTypeSource = Callable[[str], Awaitable[catalog.Known | None]]


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
        self,
        event: EventIn,
        idempotency_key: str | None,
        deliver_at: int | None,
        payload_json: bytes,
    ) -> Published | None:
        """The first answer for this key and the same body, if there was one (its event
        written first when a request died between the two steps of its publish)."""
        if idempotency_key is None:
            return None
        raw = await self.guard.remembered(event.app, idempotency_key)
        if raw is None:
            return None
        first = orjson.loads(raw)
        if first["h"] != fingerprint(event, deliver_at):
            return None
        if "p" in first:
            await self.guard.finish(idempotency_key, raw, "", payload_json)
        return Published(first["answer"], created=False)

    def _deliver_at(self, when: datetime | int | None) -> int | None:
        """``deliver_at`` in ms, refused when it names no instant or is too far ahead."""
        at = _deliver_at_ms(when)
        ahead = self.settings.max_schedule_ahead
        if at is not None and at - time.time() * 1000 > ahead * 1000:
            raise DeliverAtTooFar(
                f"deliver_at is more than {days(ahead)} ahead (RELAY_MAX_SCHEDULE_AHEAD)"
            )
        return at

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
            raise refusal(event.type, verdict.schema)
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
        self,
        event: EventIn,
        *,
        idempotency_key: str | None = None,
        trace: str = "",
        deliver_at: datetime | int | None = None,
    ) -> Published:
        """Store ``event`` with one delivery per target endpoint; raises a
        :class:`PublishError` (and writes nothing) when it cannot be published.
        ``trace``: the publish span's context to store with the event (tracing on).

        ``deliver_at``: when the deliveries go, a timezone-aware ``datetime`` or ms since
        the epoch (int). Until then they are status ``scheduled`` (in the due queue at
        that time); a past time means now. Refused: a naive datetime
        (:class:`DeliverAtInvalid`), a time more than ``RELAY_MAX_SCHEDULE_AHEAD`` ahead
        (:class:`DeliverAtTooFar`), a time ahead for an event that joins an ordered lane
        (:class:`DeliverAtOrdered`). The answer then carries ``deliver_at`` (RFC 3339), and
        the time asked for is part of what an Idempotency-Key compares."""
        ready = await self._prepare(event, idempotency_key, trace, self._deliver_at(deliver_at))
        if isinstance(ready, Published):
            return ready
        return await self._write(ready)

    async def publish_batch(
        self, events: Sequence[tuple[EventIn, str | None]], *, trace: str = ""
    ) -> list[Published | PublishError]:
        """Publish each ``(event, idempotency_key)`` as :meth:`publish` does (an
        :class:`EventPublishIn` with its ``deliver_at``), all or
        nothing per event: one answer each, in order, a :class:`PublishError` for an
        event refused. Writes whose key's guard is on their event's shard go to Redis
        together (:meth:`Store.publish_many`), the others through their two steps
        (:class:`relay.idempotency.Guard`), in the order given, so a key given twice
        answers as a retry of its first event."""
        answers: list[Published | PublishError | _Ready] = []
        for event, key in events:
            try:
                at = event.deliver_at_ms() if isinstance(event, EventPublishIn) else None
                answers.append(await self._prepare(event, key, trace, self._deliver_at(at)))
            except PublishError as exc:
                answers.append(exc)
        out: list[Published | PublishError | None] = [
            None if isinstance(a, _Ready) else a for a in answers
        ]
        run: list[int] = []  # consecutive one-script writes, sent together
        for i, answer in enumerate(answers):
            if not isinstance(answer, _Ready):
                continue
            if answer.key is None or await self.guard.direct(answer.write, answer.key):
                run.append(i)
                continue
            await self._flush(answers, run, out)
            out[i] = await self._settled(self._write(answer))
        await self._flush(answers, run, out)
        return [a for a in out if a is not None]

    async def _flush(
        self,
        answers: list[Published | PublishError | _Ready],
        run: list[int],
        out: list[Published | PublishError | None],
    ) -> None:
        """Write the one-script publishes ``run`` names in one go; empties ``run``."""
        ready = [a for a in (answers[i] for i in run) if isinstance(a, _Ready)]
        if not ready:
            return
        writes = [r.write.args(r.record(), copy=False) for r in ready]
        for i, r, taken in zip(run, ready, await self.store.publish_many(writes), strict=True):
            out[i] = await self._settled(self._taken(r, taken))
        run.clear()

    @staticmethod
    async def _settled(answer: Awaitable[Published]) -> Published | PublishError:
        try:
            return await answer
        except PublishError as exc:
            return exc

    async def _write(self, ready: _Ready) -> Published:
        """Write one decided publish, through its key's guard when it has a key."""
        if ready.key is None:
            await ready.write.to(self.store, None, copy=False)
            return Published(ready.answer, created=True)
        taken = await self.guard.publish(
            ready.key, ready.mark, ready.answer, ready.write, ready.payload_json
        )
        return keyed_answer(ready.answer, taken)

    async def _taken(self, ready: _Ready, taken: str | None) -> Published:
        """The answer of a one-script write that found ``taken`` under its key (None:
        it published)."""
        if taken is None or ready.key is None:
            return Published(ready.answer, created=True)
        found = await self.guard.found(
            ready.key, taken, ready.mark, ready.write, ready.payload_json
        )
        return keyed_answer(ready.answer, found)

    async def _prepare(
        self, event: EventIn, idempotency_key: str | None, trace: str, at: int | None
    ) -> Published | _Ready:
        """The write that publishes ``event``, or the first answer when its key's retry
        is refused by the catalog; raises a :class:`PublishError` when it is refused."""
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
            first = await self._first_answer(event, idempotency_key, at, payload_json)
            if first is None:
                raise
            return first
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
        later = at if at is not None and at > now_ms else None
        if later is not None and ordered:
            raise DeliverAtOrdered(
                "deliver_at is ahead, and the event joins an ordered lane (an endpoint with "
                "ordering key or endpoint): publish it when it is due, or without ordering"
            )
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
        if later is not None:
            answer["deliver_at"] = signing.rfc3339_ms(later)
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
            deliver_at_ms=later,
        )
        mark = "" if idempotency_key is None else fingerprint(event, at)
        return _Ready(write, answer, idempotency_key, mark, payload_json)


@dataclass(frozen=True, slots=True)
class _Ready:
    """A publish decided and not yet written: the event's write, the answer it gets when
    written, its Idempotency-Key (None: none) and the fingerprint that key stores."""

    write: Write
    answer: dict[str, Any]
    key: str | None
    mark: str
    payload_json: bytes

    def record(self) -> tuple[str, bytes] | None:
        """What the key's guard stores when this write takes it in one script."""
        if self.key is None:
            return None
        return self.key, orjson.dumps({"h": self.mark, "answer": self.answer})


def _deliver_at_ms(when: datetime | int | None) -> int | None:
    """``deliver_at`` as ms since the epoch; a naive datetime is refused."""
    if when is None or (isinstance(when, int) and not isinstance(when, bool)):
        return when
    if not isinstance(when, datetime) or when.utcoffset() is None:
        raise DeliverAtInvalid(
            "deliver_at must be a time with a time zone (RFC 3339, e.g. 2026-12-01T10:00:00Z)"
        )
    return int(when.timestamp() * 1000)
