"""Scheduled delivery (``deliver_at``) on fakeredis: the publishing service, the due queue,
the derived status ``scheduled``, its listing and count, and every refusal.

A scheduled delivery is in the due queue at its ``deliver_at``; no claim takes it before,
and every read says ``scheduled`` until then (``relay.queue.records.record_of``).
"""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import fakeredis
import orjson
import pytest

from relay.domain import eventrecord, ids
from relay.domain.schema import EventIn, EventPublishIn, endpoint_record
from relay.publishing import (
    DeliverAtInvalid,
    DeliverAtOrdered,
    DeliverAtTooFar,
    IdempotencyKeyReused,
    Publisher,
    fingerprint,
)
from relay.queue.records import record_of
from relay.queue.store import Store
from tests.helpers import make_settings
from tests.helpers.api import snapshot
from tests.helpers.store import claim

HOUR_MS = 3_600_000


def event(**fields: Any) -> EventIn:
    fields.setdefault("type", "order.paid")
    fields.setdefault("payload", {"n": 1})
    return EventIn.model_validate(fields)


async def endpoint(store: Store, **extra: Any) -> dict[str, Any]:
    ep = endpoint_record(url="http://127.0.0.1:9/x", app="default")
    ep.update(extra)
    await store.put_endpoint(ep)
    return ep


def now_ms() -> int:
    return int(time.time() * 1000)


async def test_a_delivery_ahead_is_scheduled_in_due_at_its_time_and_not_claimed(
    fake_store: Store,
) -> None:
    await endpoint(fake_store)
    at = now_ms() + HOUR_MS
    done = await Publisher(fake_store).publish(event(), deliver_at=at)
    (ref,) = done.answer["deliveries"]
    assert done.answer["deliver_at"] == datetime.fromtimestamp(at / 1000, UTC).isoformat(
        timespec="milliseconds"
    ).replace("+00:00", "Z")
    sk = fake_store.keys.shard(0)
    assert await fake_store.redis.zscore(sk.due, ref["id"]) == at
    assert await fake_store.redis.zscore(sk.scheduled, ref["id"]) == at

    row = await fake_store.get_delivery(ref["id"])
    assert row is not None
    assert (row["status"], row["next_attempt_at"], row["deliver_at"]) == ("scheduled", at, at)
    assert (await claim(fake_store)).items == []

    listed, _ = await fake_store.list_deliveries(status="scheduled")
    assert [r["id"] for r in listed] == [ref["id"]]
    assert (await fake_store.list_deliveries(status="pending"))[0] == []
    stats = await fake_store.stats()
    assert (stats["counts"]["scheduled"], stats["counts"]["pending"]) == (1, 0)
    assert (stats["queue"]["due"], stats["queue"]["scheduled"]) == (0, 1)
    got = await fake_store.get_event(done.answer["id"])
    assert got is not None and got["deliver_at"] == at


async def test_a_time_in_the_past_means_now(fake_store: Store) -> None:
    await endpoint(fake_store)
    done = await Publisher(fake_store).publish(event(), deliver_at=now_ms() - HOUR_MS)
    (ref,) = done.answer["deliveries"]
    assert "deliver_at" not in done.answer
    row = await fake_store.get_delivery(ref["id"])
    assert row is not None and row["status"] == "pending" and "deliver_at" not in row
    assert [c.id for c in (await claim(fake_store)).items] == [ref["id"]]
    assert await fake_store.redis.zcard(fake_store.keys.shard(0).scheduled) == 0


async def test_an_aware_datetime_and_ms_are_the_same_time(fake_store: Store) -> None:
    await endpoint(fake_store)
    when = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    as_dt = await Publisher(fake_store).publish(event(), deliver_at=when)
    as_ms = await Publisher(fake_store).publish(event(), deliver_at=int(when.timestamp() * 1000))
    assert as_dt.answer["deliver_at"] == as_ms.answer["deliver_at"]
    offset = when.astimezone(timezone(timedelta(hours=5)))
    again = await Publisher(fake_store).publish(event(), deliver_at=offset)
    assert again.answer["deliver_at"] == as_ms.answer["deliver_at"]


@pytest.mark.parametrize(
    ("when", "refusal"),
    [
        (datetime(2030, 1, 1, 12, 0), DeliverAtInvalid),  # no time zone
        ("2030-01-01T12:00:00Z", DeliverAtInvalid),  # a string is the API's to parse
        (True, DeliverAtInvalid),
        ("far", DeliverAtTooFar),
    ],
)
async def test_refused_deliver_at_writes_nothing(
    fake_store: Store, when: Any, refusal: type[Exception]
) -> None:
    await endpoint(fake_store)
    before = await snapshot(fake_store)
    if when == "far":  # one ms past RELAY_MAX_SCHEDULE_AHEAD (30 days by default)
        when = now_ms() + int(fake_store.settings.max_schedule_ahead * 1000) + 60_000
    with pytest.raises(refusal) as info:
        await Publisher(fake_store).publish(event(), deliver_at=when)
    assert info.value.status == 422  # type: ignore[attr-defined]
    assert await snapshot(fake_store) == before


async def test_the_bound_is_a_setting() -> None:
    redis = fakeredis.FakeAsyncRedis(decode_responses=True)
    store = Store(redis, make_settings(max_schedule_ahead=3600.0))
    await store.start()
    try:
        await endpoint(store)
        await Publisher(store).publish(event(), deliver_at=now_ms() + HOUR_MS - 60_000)
        with pytest.raises(DeliverAtTooFar, match="1 hour "):
            await Publisher(store).publish(event(), deliver_at=now_ms() + HOUR_MS + 60_000)
    finally:
        await store.close()


async def test_an_ordered_lane_refuses_a_time_ahead_and_takes_a_past_one(
    fake_store: Store,
) -> None:
    await endpoint(fake_store, ordering="key")
    before = await snapshot(fake_store)
    with pytest.raises(DeliverAtOrdered):
        await Publisher(fake_store).publish(
            event(ordering_key="o-1"), deliver_at=now_ms() + HOUR_MS
        )
    assert await snapshot(fake_store) == before
    done = await Publisher(fake_store).publish(
        event(ordering_key="o-1"), deliver_at=now_ms() - 1000
    )
    assert len(done.answer["deliveries"]) == 1


async def test_the_idempotency_key_compares_the_time_asked_for(fake_store: Store) -> None:
    await endpoint(fake_store)
    at = now_ms() + HOUR_MS
    first = await Publisher(fake_store).publish(event(), idempotency_key="k", deliver_at=at)
    again = await Publisher(fake_store).publish(event(), idempotency_key="k", deliver_at=at)
    assert (first.created, again.created) == (True, False)
    assert again.answer == first.answer
    with pytest.raises(IdempotencyKeyReused):
        await Publisher(fake_store).publish(event(), idempotency_key="k", deliver_at=at + 1)
    with pytest.raises(IdempotencyKeyReused):
        await Publisher(fake_store).publish(event(), idempotency_key="k")


def test_the_fingerprint_without_deliver_at_is_the_event_alone() -> None:
    body = EventPublishIn.model_validate({"type": "a.b", "payload": 1})
    assert fingerprint(body) == fingerprint(event(type="a.b", payload=1))
    assert fingerprint(body, 5) != fingerprint(body)


def test_the_body_model_parses_rfc3339_and_refuses_the_rest() -> None:
    ok = EventPublishIn.model_validate(
        {"type": "a.b", "payload": 1, "deliver_at": "2030-01-01T12:00:00+02:00"}
    )
    assert ok.deliver_at_ms() == int(datetime(2030, 1, 1, 10, tzinfo=UTC).timestamp() * 1000)
    for bad in ("2030-01-01T12:00:00", "tomorrow", 1893456000000):
        with pytest.raises(ValueError):
            EventPublishIn.model_validate({"type": "a.b", "payload": 1, "deliver_at": bad})


def test_the_status_is_derived_from_the_time_and_the_clock() -> None:
    event_id = ids.new_event_id(0, 1_000)
    delivery = ids.delivery_id(event_id, 0)
    header = eventrecord.header_of(
        eventrecord.pack(
            event_id=event_id,
            event_type="a.b",
            app="default",
            created_ms=1_000,
            max_attempts=3,
            deliveries=[(delivery, "ep_1")],
            body=b"{}",
            deliver_at=50_000,
        )
    )
    before = record_of(delivery, {}, 50_000, header, now_ms=49_999)
    after = record_of(delivery, {}, 50_000, header, now_ms=50_000)
    assert before is not None and after is not None
    assert (before["status"], after["status"]) == ("scheduled", "pending")
    assert before["next_attempt_at"] == 50_000 == after["next_attempt_at"]
    claimed = {"status": "delivering", "attempts": "1"}
    sending = record_of(delivery, claimed, None, header, now_ms=49_999)
    assert sending is not None and sending["status"] == "delivering"


async def test_a_replay_of_a_scheduled_delivery_is_refused(fake_store: Store) -> None:
    await endpoint(fake_store)
    done = await Publisher(fake_store).publish(event(), deliver_at=now_ms() + HOUR_MS)
    (ref,) = done.answer["deliveries"]
    assert (await fake_store.replay([ref["id"]]))[ref["id"]] != "ok"
    row = await fake_store.get_delivery(ref["id"])
    assert row is not None and row["status"] == "scheduled"


def test_the_fingerprint_is_the_sha256_of_the_events_fields_sorted() -> None:
    # keys remembered before stay answered: the fingerprint is the hash of model_dump's
    # fields of EventIn (ordering_key left out when absent), keys sorted at every level
    for doc in (
        {"type": "a.b", "payload": {"z": [1, {"y": None, "x": 1.5}], "a": "é"}},
        {"type": "a.b", "payload": 1, "app": "shop", "endpoint_ids": ["ep_1"]},
        {"type": "a.b", "payload": [], "ordering_key": "k", "deliver_at": "2026-12-01T10:00:00Z"},
    ):
        body = EventPublishIn.model_validate(doc)
        fields = body.model_dump(include=set(EventIn.model_fields))
        if fields["ordering_key"] is None:
            del fields["ordering_key"]
        want = hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()
        assert fingerprint(body) == want
