"""Publishing as a service: an event in, the event and its deliveries stored, all or nothing.

The HTTP API (``POST /v1/events``) is one caller; any other entry point (a connector that
reads a database outbox, a CLI command) publishes through the same :class:`Publisher`,
so target selection, shard choice, id minting, the idempotency fingerprint and the body
sent are decided in one place. The write itself is one script (``publish.lua``): after
:meth:`Publisher.publish` returns, everything is in Redis.
"""

from __future__ import annotations

import hashlib
import random
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from relay.domain import ids, matching, signing
from relay.domain.schema import EventIn
from relay.queue.store import Store

EndpointSource = Callable[[str], Awaitable[list[dict[str, Any]]]]


class PublishError(Exception):
    """A publish that was refused; nothing was written. ``status`` is the 4xx it means."""

    status = 422
    code = "publish_refused"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class PayloadTooLarge(PublishError):
    status = 413
    code = "payload_too_large"


class UnknownEndpoints(PublishError):
    status = 422
    code = "unknown_endpoint"


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


def shard_for(app: str, idempotency_key: str | None, shards: int) -> int:
    """The same key always lands on the same shard (its guard lives there); else any."""
    if idempotency_key is not None:
        return zlib.crc32(f"{app}\0{idempotency_key}".encode()) % shards
    return random.randrange(shards)


def fingerprint(event: EventIn) -> str:
    """What "the same request body" means for an idempotency key."""
    return hashlib.sha256(orjson.dumps(event.model_dump(), option=orjson.OPT_SORT_KEYS)).hexdigest()


class Publisher:
    """Publishes events into one store. ``endpoints_for_app`` defaults to a Redis read;
    the API passes its endpoint cache."""

    def __init__(self, store: Store, endpoints_for_app: EndpointSource | None = None) -> None:
        self.store = store
        self.settings = store.settings
        self._endpoints_for_app = endpoints_for_app or store.list_endpoints

    async def publish(
        self, event: EventIn, *, idempotency_key: str | None = None, trace: str = ""
    ) -> Published:
        """Store ``event`` with one delivery per target endpoint; raises a
        :class:`PublishError` (and writes nothing) when it cannot be published.
        ``trace``: the publish span's context to store with the event (tracing on)."""
        payload_json = orjson.dumps(event.payload)
        limit = self.settings.max_payload_bytes
        if len(payload_json) > limit:
            raise PayloadTooLarge(f"payload is {len(payload_json)} bytes; the limit is {limit}")
        targets = select_targets(await self._endpoints_for_app(event.app), event)

        shard = shard_for(event.app, idempotency_key, self.settings.shards)
        now_ms = int(time.time() * 1000)
        event_id = ids.new_id("evt", shard, now_ms)
        deliveries = [(ids.new_id("dlv", shard, now_ms), e["id"]) for e in targets]
        answer = {
            "id": event_id,
            "type": event.type,
            "app": event.app,
            "created_at": signing.rfc3339_ms(now_ms),
            "deliveries": [{"id": d, "endpoint_id": e} for d, e in deliveries],
        }
        guard, mark = None, ""
        if idempotency_key is not None:
            mark = fingerprint(event)
            guard = (idempotency_key, orjson.dumps({"h": mark, "answer": answer}))
        taken = await self.store.publish(
            shard=shard,
            event_id=event_id,
            event_type=event.type,
            app=event.app,
            body=signing.build_body(event_id, event.type, now_ms, payload_json),
            created_ms=now_ms,
            deliveries=deliveries,
            idempotency=guard,
            trace=trace,
        )
        if taken is None:
            return Published(answer, created=True)
        first = orjson.loads(taken)
        if first["h"] != mark:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was used with a different request body"
            )
        return Published(first["answer"], created=False)
