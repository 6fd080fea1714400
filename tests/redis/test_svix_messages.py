"""Listing messages through the Svix-compatible API, with and without their content."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.helpers import Receiver
from tests.helpers.api import call

pytestmark = pytest.mark.realredis

A = "/api/v1/app"


async def test_a_list_without_content_keeps_each_messages_event_id(
    make_store: Any, make_api: Any, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``with_content=false`` reads only the events' headers, never whole events: no
    payload, and the same ids, types, times and ``eventId`` (the idempotency key, none
    for an SDK's own) as the list with content."""
    store = await make_store()
    api = await make_api(store)
    assert (await call(api, "POST", A, json={"name": "shop", "uid": "shop"}))[0] == 201
    assert (await call(api, "POST", f"{A}/shop/endpoint", json={"url": receiver.url}))[0] == 201
    sent = [
        {"eventType": "order.paid", "payload": {"n": 1}, "eventId": "o-1"},
        {"eventType": "order.paid", "payload": {"items": ["x" * 40] * 20}, "eventId": "o-2"},
        {"eventType": "order.none", "payload": {"n": 3}},
    ]
    for body in sent:
        status, _ = await call(api, "POST", f"{A}/shop/msg", json=body)
        assert status == 202
        # the list is newest first, and events made in the same millisecond are ordered
        # by their ids' random part: the next one is made in a later millisecond
        made = time.time_ns() // 1_000_000
        while time.time_ns() // 1_000_000 <= made:  # noqa: ASYNC110 (the clock, not an event)
            await asyncio.sleep(0.0005)
    status, full = await call(api, "GET", f"{A}/shop/msg?with_content=true")
    assert status == 200

    async def whole_events(event_ids: Any) -> Any:
        raise AssertionError(f"whole events read for a list without content: {event_ids}")

    monkeypatch.setattr(store, "get_events", whole_events)
    status, bare = await call(api, "GET", f"{A}/shop/msg?with_content=false")
    assert status == 200
    assert [m["eventId"] for m in bare["data"]] == [None, "o-2", "o-1"]
    assert [m["payload"] for m in bare["data"]] == [{}, {}, {}]
    assert [m["payload"] for m in full["data"]] == [s["payload"] for s in reversed(sent)]
    for with_, without in zip(full["data"], bare["data"], strict=True):
        assert {**with_, "payload": {}} == without
