"""The dashboard on a laptop: at 900 px wide the last column of the deliveries
and endpoints tables is on screen, not cut off; the sign-in page says where `relay dev`
keeps the token; a waiting delivery says why.

Fails when the deliveries table's last header cell ends past the table's visible box at
900 px (the wrapper scrolling sideways), or the sign-in page does not mention
`.relay/api-token`.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay.endpoints.health import Health
from tests.helpers.browser import UI_TIMEOUT_MS, chromium

pytestmark = pytest.mark.realredis

# The right edge of a table's last header cell against the visible part of the page and
# of the table's scroll box: visible means inside both.
LAST_COLUMN = """
(table) => {
  const last = table.querySelector("thead tr").lastElementChild.getBoundingClientRect();
  const box = table.closest(".table-wrap").getBoundingClientRect();
  return {right: last.right, left: last.left, box: box.right, view: window.innerWidth,
          page: document.documentElement.scrollWidth};
}
"""


def _visible(got: dict[str, float], what: str) -> None:
    assert got["left"] < got["right"], (what, got)
    assert got["right"] <= got["box"] + 0.5, (what, "cut off by its scroll box", got)
    assert got["right"] <= got["view"] + 0.5, (what, "past the window", got)
    assert got["page"] <= got["view"], (what, "the page scrolls sideways", got)


@pytest.mark.parametrize("width", [800, 900, 1000])
async def test_last_columns_visible_on_a_laptop(make_store: Any, make_api: Any, width: int) -> None:
    from playwright.async_api import expect

    store = await make_store(breaker_threshold=1)
    api = await make_api(store)
    long = "http://127.0.0.1:9/" + "a-rather-long-receiver-path/" * 3 + "webhooks"
    async with api(
        "POST",
        "/v1/endpoints",
        json={
            "url": long,
            "description": "the billing system's webhook receiver",
            "event_types": ["order.*", "invoice.issued", "customer.updated"],
            "rate_limit": 20,
            "max_in_flight": 8,
        },
    ) as r:
        ep = await r.json()
    for i in range(3):
        async with api(
            "POST", "/v1/events", json={"type": "invoice.issued", "payload": {"n": i}}
        ) as r:
            assert r.status == 201
    await Health(store).settle(ep["id"], [("t", "0")])  # breaker open: every one waits

    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": width, "height": 700})
        page = await context.new_page()
        page.set_default_timeout(UI_TIMEOUT_MS)
        await page.goto(api.url + "/ui/")
        await expect(page.locator("#signin")).to_contain_text(".relay/api-token")
        await page.fill("#token", "test-token")
        await page.click("#signin-form button[type=submit]")
        rows = page.locator("#deliveries tbody tr")
        await expect(rows).to_have_count(3)
        await expect(rows.first).to_contain_text("breaker open")
        _visible(await page.locator("#deliveries").evaluate(LAST_COLUMN), f"deliveries @{width}")

        await page.click('.tabs a[data-view="endpoints"]')
        await expect(page.locator("#endpoints tbody tr")).to_have_count(1)
        _visible(await page.locator("#endpoints").evaluate(LAST_COLUMN), f"endpoints @{width}")

        await page.click('.tabs a[data-view="deliveries"]')
        await rows.first.click()
        await expect(page.locator("#d-summary")).to_contain_text("breaker open")
        await context.close()
