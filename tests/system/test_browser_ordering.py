"""The dashboard's ordered-lane views in a real headless Chromium.

A lane blocked by its dead head shows on the Dead card ("1 ordered lane blocked"), in
the list (the head says it blocks its lane and has a Discard action, the next one is
"queued") and in the drawer; Discard from the drawer lets the lane go on.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.browser import UI_TIMEOUT_MS, chromium, sign_in
from tests.helpers.ordering_kit import dead_head

pytestmark = pytest.mark.realredis


async def test_dashboard_shows_and_discards_a_blocked_head(make_store: Any, make_api: Any) -> None:
    from playwright.async_api import expect

    expect.set_options(timeout=UI_TIMEOUT_MS)
    store = await make_store()
    api = await make_api(store)
    spec = {"url": "http://127.0.0.1:9/x", "ordering": "key", "ordering_on_dead": "block"}
    async with api("POST", "/v1/endpoints", json=spec) as r:
        assert r.status == 201
    heads = []
    for n in range(2):
        event = {"type": "order.paid", "payload": {"n": n}, "ordering_key": "order-7"}
        async with api("POST", "/v1/events", json=event) as r:
            heads.append((await r.json())["deliveries"][0]["id"])
    head, nxt = heads
    await dead_head(store)
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1366, "height": 768})
        await sign_in(page, api.url, click=True)
        await expect(page.locator('.card[data-key="dead"]')).to_contain_text(
            "1 ordered lane blocked"
        )
        row = page.locator(f'#deliveries tr[data-id="{head}"]')
        await expect(row).to_contain_text("blocks its ordered lane")
        await expect(page.locator(f'#deliveries tr[data-id="{nxt}"]')).to_have_attribute(
            "data-status", "queued"
        )
        await expect(row.locator("button", has_text="Discard")).to_be_visible()
        await row.click()
        await expect(page.locator("#d-summary")).to_contain_text("Blocks its lane")
        await page.click("#d-discard")
        await expect(page.locator(f'#deliveries tr[data-id="{nxt}"]')).to_have_attribute(
            "data-status", "pending"
        )
    assert (await store.get_delivery(head) or {})["discarded_at"]
    assert (await store.stats())["blocked_lanes"] == 0
