"""The dashboard over the history archive, in a real Chromium against the real API,
Redis, PostgreSQL, a worker and the mover (2 s hot retention): the events list holds
archived events with live ones, and the search box turns a payload field
(``customer.id = 42``) into a search of the archived payloads."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from relay.delivery.worker import Worker
from relay.domain import ids
from relay.ops.archiving import Mover
from tests.helpers.archive import archive_overrides, tables_of
from tests.helpers.browser import context, sign_in, watch

pytestmark = pytest.mark.realredis


async def test_search_a_payload_field_of_archived_events(
    make_store: Any, make_api: Any, receiver: Any, pg_server: Any, cdp: str
) -> None:
    from playwright.async_api import expect

    store = await make_store(**archive_overrides(pg_server))
    api = await make_api(store)
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/ok"}):
        pass

    async def publish(customer: int) -> str:
        payload = {"customer": {"id": customer}, "total": 10}
        async with api("POST", "/v1/events", json={"type": "order.paid", "payload": payload}) as r:
            return str((await r.json())["id"])

    stop, parked = asyncio.Event(), asyncio.Event()
    mover = Mover(store, tables_of(store))
    tasks = [
        asyncio.create_task(Worker(store, store.settings).run(stop)),
        asyncio.create_task(mover.run(parked)),
    ]
    try:
        archived = [await publish(c) for c in (42, 7, 42)]
        deadline = time.monotonic() + 60  # a deadline, not a timing assertion
        while any([await store.get_event(e) is not None for e in archived]):
            assert time.monotonic() < deadline, "the mover did not archive the events"
            await asyncio.sleep(0.2)
        parked.set()  # the mover stops: what follows stays in Redis
        await tasks[1]
        live = await publish(42)  # in Redis only: listed, not searched by payload
        async with context(cdp, viewport={"width": 1366, "height": 900}) as ctx:
            page = await ctx.new_page()
            seen = watch(page)
            await sign_in(page, api.url)
            await expect(page.locator("#app")).to_be_visible()

            await page.click('.tabs a[data-view="events"]')
            rows = page.locator("#events tbody tr")
            await expect(rows).to_have_count(4)
            assert (await rows.first.get_attribute("data-id")) == live
            await expect(page.locator("#e-payload-label")).to_be_visible()

            await page.keyboard.press("/")
            await page.keyboard.type("customer.id = 42")
            await page.keyboard.press("Enter")
            await expect(page.locator("#e-payload")).to_have_value("customer.id = 42")
            await expect(rows).to_have_count(2)
            newest_first = sorted(
                [archived[0], archived[2]], key=lambda e: (ids.created_ms(e) or 0, e), reverse=True
            )
            assert [await r.get_attribute("data-id") for r in await rows.all()] == newest_first
            await page.fill("#e-payload", "customer.id = 7")
            await expect(rows).to_have_count(1)
            assert (await rows.first.get_attribute("data-id")) == archived[1]
            await rows.first.focus()
            await page.keyboard.press("Enter")
            await expect(page.locator("#ev-id")).to_have_text(archived[1])
            await expect(page.locator("#ev-body pre.payload")).to_contain_text('"id": 7')
            assert seen["errors"] == []
    finally:
        stop.set()
        parked.set()
        await asyncio.gather(*tasks)
        await mover.tables.close()
