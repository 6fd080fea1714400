"""Scheduled delivery against a real Redis: ``deliver_at`` on ``POST /v1/events``, the
status ``scheduled`` on every read, the refusals, and a worker that sends a scheduled
delivery at its time and not before.

"Not before" is asserted without a timing assertion: a delivery an hour ahead is never
claimed while a worker runs and sends one a second ahead; the one that arrives is
received no earlier than its ``deliver_at`` (Redis's clock and the receiver's are this
machine's).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from relay.domain import signing
from relay.queue.store import Store
from tests.helpers import Receiver
from tests.helpers.api import assert_error, call, new_endpoint, snapshot

pytestmark = pytest.mark.realredis

HOUR_MS = 3_600_000


def rfc3339(ms: int) -> str:
    return signing.rfc3339_ms(ms)


def now_ms() -> int:
    return int(time.time() * 1000)


async def test_the_api_publishes_for_later_and_every_read_says_scheduled(
    make_store: Any, make_api: Any
) -> None:
    store: Store = await make_store()
    api = await make_api(store)
    ep = await new_endpoint(api)
    at = now_ms() + HOUR_MS
    body = {"type": "order.paid", "payload": {"n": 1}, "deliver_at": rfc3339(at)}
    status, answer = await call(api, "POST", "/v1/events", json=body)
    assert status == 201, answer
    assert answer["deliver_at"] == rfc3339(at)
    (ref,) = answer["deliveries"]
    assert ref["endpoint_id"] == ep["id"]

    status, row = await call(api, "GET", f"/v1/deliveries/{ref['id']}")
    assert status == 200
    assert (row["status"], row["deliver_at"], row["next_attempt_at"]) == ("scheduled", at, at)
    assert row["waiting"] == {"reason": "deliver_at", "until": at}

    status, page = await call(api, "GET", "/v1/deliveries", params={"status": "scheduled"})
    assert [r["id"] for r in page["data"]] == [ref["id"]]
    status, page = await call(api, "GET", "/v1/deliveries", params={"status": "pending"})
    assert page["data"] == []
    status, page = await call(api, "GET", "/v1/deliveries", params={"event_id": answer["id"]})
    assert [r["status"] for r in page["data"]] == ["scheduled"]

    status, stats = await call(api, "GET", "/v1/stats")
    assert (stats["counts"]["scheduled"], stats["counts"]["pending"]) == (1, 0)
    async with api("GET", "/metrics") as r:
        assert "relay_scheduled_deliveries 1.0" in (await r.text()).splitlines()
    status, event = await call(api, "GET", f"/v1/events/{answer['id']}")
    assert event["deliver_at"] == rfc3339(at)

    status, refused = await call(api, "POST", f"/v1/deliveries/{ref['id']}/replay")
    assert_error(status, refused, 409, "delivery_not_replayable")
    assert refused["current_status"] == "scheduled"
    status, refused = await call(api, "POST", f"/v1/deliveries/{ref['id']}/discard")
    assert_error(status, refused, 409, "delivery_not_discardable")
    assert refused["current_status"] == "scheduled"


async def test_the_same_idempotency_key_and_time_answer_the_first_event(
    make_store: Any, make_api: Any
) -> None:
    store: Store = await make_store()
    api = await make_api(store)
    await new_endpoint(api)
    at = now_ms() + HOUR_MS
    body = {"type": "order.paid", "payload": {"n": 1}, "deliver_at": rfc3339(at)}
    headers = {"Idempotency-Key": "k-1"}
    status, first = await call(api, "POST", "/v1/events", json=body, headers=headers)
    assert status == 201
    # the same instant written with another offset is the same request
    same = dict(body, deliver_at=datetime.fromtimestamp(at / 1000, UTC).isoformat())
    status, again = await call(api, "POST", "/v1/events", json=same, headers=headers)
    assert (status, again) == (200, first)
    later = dict(body, deliver_at=rfc3339(at + 1000))
    status, refused = await call(api, "POST", "/v1/events", json=later, headers=headers)
    assert_error(status, refused, 409, "idempotency_key_reused")


@pytest.mark.parametrize(
    ("deliver_at", "code"),
    [
        ("2030-01-01T12:00:00", "validation_error"),  # no offset
        ("next tuesday", "validation_error"),
        (1893456000000, "validation_error"),  # a number is not RFC 3339
        ("far", "deliver_at_too_far"),
        ("ordered", "deliver_at_ordered"),
    ],
)
async def test_a_refused_deliver_at_is_a_422_and_writes_nothing(
    make_store: Any, make_api: Any, deliver_at: Any, code: str
) -> None:
    store: Store = await make_store()
    api = await make_api(store)
    body: dict[str, Any] = {"type": "order.paid", "payload": {"n": 1}}
    await new_endpoint(api, ordering="key" if deliver_at == "ordered" else "none")
    if deliver_at == "far":
        deliver_at = rfc3339(now_ms() + int(store.settings.max_schedule_ahead * 1000) + 60_000)
    elif deliver_at == "ordered":
        deliver_at, body["ordering_key"] = rfc3339(now_ms() + HOUR_MS), "o-1"
    before = await snapshot(store)
    status, refused = await call(api, "POST", "/v1/events", json=body | {"deliver_at": deliver_at})
    assert_error(status, refused, 422, code)
    assert "deliver_at" in refused["message"]
    assert await snapshot(store) == before


async def test_a_worker_sends_a_scheduled_delivery_at_its_time_and_not_before(
    make_store: Any, make_api: Any, receiver: Receiver
) -> None:
    store: Store = await make_store()
    api = await make_api(store)
    received_at: dict[str, int] = {}

    def stamp(request: web.Request) -> web.Response:
        received_at[request.headers["x-relay-delivery-id"]] = now_ms()
        return web.Response(text="ok")

    receiver.responses["/soon"] = stamp
    receiver.responses["/later"] = stamp
    soon_ep = await new_endpoint(api, url=receiver.url + "/soon", event_types=["soon"])
    later_ep = await new_endpoint(api, url=receiver.url + "/later", event_types=["later"])
    assert soon_ep["id"] != later_ep["id"]

    later_at = now_ms() + HOUR_MS
    status, later = await call(
        api,
        "POST",
        "/v1/events",
        json={"type": "later", "payload": {}, "deliver_at": rfc3339(later_at)},
    )
    assert status == 201
    soon_at = now_ms() + 1000
    status, soon = await call(
        api,
        "POST",
        "/v1/events",
        json={"type": "soon", "payload": {}, "deliver_at": rfc3339(soon_at)},
    )
    assert status == 201
    soon_id = soon["deliveries"][0]["id"]
    later_id = later["deliveries"][0]["id"]
    row = await store.get_delivery(soon_id, with_log=False)
    assert row is not None and row["status"] == "scheduled"

    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        await receiver.wait_for(1, within=30.0, path="/soon")
        await until_status(store, soon_id, "succeeded")
    finally:
        stop.set()
        await task
    assert received_at[soon_id] >= soon_at
    assert receiver.for_path("/later") == []
    row = await store.get_delivery(later_id, with_log=False)
    assert row is not None and (row["status"], row["attempts"]) == ("scheduled", 0)
    stats = await store.stats()
    assert (stats["counts"]["scheduled"], stats["counts"]["succeeded"]) == (1, 1)


async def until_status(store: Store, delivery_id: str, status: str) -> None:
    deadline = time.monotonic() + 15.0
    while True:
        row = await store.get_delivery(delivery_id, with_log=False)
        if row is not None and row["status"] == status:
            return
        assert time.monotonic() < deadline, row
        await asyncio.sleep(0.02)


async def test_a_delivery_due_at_its_time_reads_pending_until_claimed(
    make_store: Any, make_api: Any
) -> None:
    store: Store = await make_store()
    api = await make_api(store)
    await new_endpoint(api)
    at = now_ms() + 300
    status, answer = await call(
        api, "POST", "/v1/events", json={"type": "a.b", "payload": 1, "deliver_at": rfc3339(at)}
    )
    assert status == 201
    (ref,) = answer["deliveries"]
    deadline = time.monotonic() + 15.0
    while (await store.now_ms()) <= at:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    row = await store.get_delivery(ref["id"], with_log=False)
    assert row is not None and row["status"] == "pending" and row["deliver_at"] == at
    stats = await store.stats()
    assert (stats["counts"]["scheduled"], stats["counts"]["pending"]) == (0, 1)
    assert stats["queue"]["due"] == 1


async def test_a_scheduled_delivery_of_a_disabled_endpoint_is_held_at_its_time(
    make_store: Any, make_api: Any, receiver: Receiver
) -> None:
    store: Store = await make_store()
    api = await make_api(store)
    ep = await new_endpoint(api, url=receiver.url + "/hook")
    at = now_ms() + 300
    status, answer = await call(
        api, "POST", "/v1/events", json={"type": "a.b", "payload": 1, "deliver_at": rfc3339(at)}
    )
    assert status == 201
    (ref,) = answer["deliveries"]
    status, _ = await call(api, "PATCH", f"/v1/endpoints/{ep['id']}", json={"enabled": False})
    assert status == 200

    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        await until_status(store, ref["id"], "held")
        assert receiver.requests == []
        status, _ = await call(api, "PATCH", f"/v1/endpoints/{ep['id']}", json={"enabled": True})
        assert status == 200
        await receiver.wait_for(1, within=15.0, path="/hook")
        await until_status(store, ref["id"], "succeeded")
    finally:
        stop.set()
        await task


async def test_the_openapi_document_describes_deliver_at(make_store: Any, make_api: Any) -> None:
    store: Store = await make_store()
    api = await make_api(store)
    status, doc = await call(api, "GET", "/openapi.json")
    assert status == 200
    op = doc["paths"]["/v1/events"]["post"]
    ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert "deliver_at" in body["properties"]
    refusals = op["responses"]["422"]["description"]
    assert "deliver_at_too_far" in refusals and "deliver_at_ordered" in refusals
    statuses = doc["components"]["schemas"]["DeliveryOut"]["properties"]["status"]
    assert "scheduled" in str(statuses)
