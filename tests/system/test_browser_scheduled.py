"""The dashboard shows a scheduled delivery as such: its card, the status filter, the
row's badge and wait, and the drawer's time (Chromium through Playwright)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from relay.domain import signing
from tests.helpers.browser import UI_TIMEOUT_MS, chromium, sign_in

pytestmark = pytest.mark.realredis


async def test_the_dashboard_shows_a_scheduled_delivery(make_store: Any, make_api: Any) -> None:
    from playwright.async_api import expect

    expect.set_options(timeout=UI_TIMEOUT_MS)
    store = await make_store()
    api = await make_api(store)
    async with api("POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/x"}) as r:
        assert r.status == 201, await r.text()
    at = int(time.time() * 1000) + 3_600_000
    body = {"type": "trial.ending", "payload": {"n": 1}, "deliver_at": signing.rfc3339_ms(at)}
    async with api("POST", "/v1/events", json=body) as r:
        assert r.status == 201, await r.text()
        (ref,) = (await r.json())["deliveries"]

    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1366, "height": 768})
        errors: list[Any] = []
        page.on("pageerror", lambda e: errors.append(e))
        await sign_in(page, api.url, click=True)
        await expect(page.locator("#app")).to_be_visible()

        await expect(page.locator('.card[data-key="scheduled"] .value')).to_have_text("1")
        await expect(page.locator('.card[data-key="pending"] .value')).to_have_text("0")
        await page.select_option("#f-status", "scheduled")
        row = page.locator(f'#deliveries tbody tr[data-id="{ref["id"]}"]')
        await expect(row).to_have_attribute("data-status", "scheduled")
        await expect(row.locator(".when-cell")).to_contain_text("scheduled, goes")
        await page.select_option("#f-status", "pending")
        await expect(page.locator("#deliveries tbody tr[data-id]")).to_have_count(0)

        await page.select_option("#f-status", "scheduled")
        await row.click()
        drawer = page.locator("#drawer")
        await expect(drawer).to_be_visible()
        await expect(drawer).to_contain_text("Scheduled for")
        assert errors == []
