"""The dashboard's "Event types" view and ed25519 endpoints, in the real headless Chromium.

Read-only: the catalog's names, descriptions, schemas (shown as text, never as markup),
deprecation and how many endpoints subscribe; an ed25519 endpoint shows a chip with its
public key and never its private key.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.browser import SHOTS, UI_TIMEOUT_MS, XSS, chromium, sign_in

pytestmark = pytest.mark.realredis


async def test_event_types_view_shows_the_catalog(make_store: Any, make_api: Any) -> None:
    from playwright.async_api import expect

    expect.set_options(timeout=UI_TIMEOUT_MS)
    store = await make_store()
    api = await make_api(store)

    async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with api("POST", path, json=body) as r:
            assert r.status == 201, await r.text()
            return dict(await r.json())

    schema = {"type": "object", "required": ["order", "amount"], "description": XSS}
    await post("/v1/event-types", {"name": "order.paid", "description": XSS, "schema": schema})
    await post("/v1/event-types", {"name": "order.legacy", "deprecated": True})
    await post("/v1/event-types", {"name": "invoice.sent"})
    ed = await post(
        "/v1/endpoints",
        {"url": "http://127.0.0.1:9/o", "event_types": ["order.*"], "signing": "ed25519"},
    )
    await post("/v1/endpoints", {"url": "http://127.0.0.1:9/p", "event_types": ["order.paid"]})
    private = (await store.get_endpoint(ed["id"]) or {})["secret"]

    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": 1366, "height": 768})
        page = await context.new_page()
        errors: list[Any] = []
        page.on("pageerror", lambda e: errors.append(e))
        await sign_in(page, api.url, "/ui/#/types", click=True)
        await expect(page.locator("#view-types")).to_be_visible()
        rows = page.locator("#types tbody tr")
        await expect(rows).to_have_count(3)
        paid = page.locator('#types tr[data-type="order.paid"]')
        await expect(paid.locator("td").nth(1)).to_have_text(XSS)  # text, not markup
        await expect(paid.locator("td").nth(3)).to_have_text("2")  # order.* and order.paid
        await expect(paid.locator('[data-col="schema"] summary')).to_contain_text(
            "requires order, amount"
        )
        await paid.locator('[data-col="schema"] summary').click()
        await expect(paid.locator('[data-col="schema"] pre')).to_contain_text('"amount"')
        legacy = page.locator('#types tr[data-type="order.legacy"]')
        await expect(legacy.locator(".badge")).to_have_text("deprecated")
        await expect(page.locator('#types tr[data-type="invoice.sent"] td').nth(3)).to_have_text(
            "0"
        )
        await page.screenshot(path=str(SHOTS / "event-types.png"))

        await page.click('.tabs a[data-view="endpoints"]')
        chip = page.locator(f'#endpoints tr[data-id="{ed["id"]}"] .chip', has_text="ed25519")
        await expect(chip).to_have_attribute(
            "title", f"v1a signatures; public key {ed['public_key']}"
        )
        assert private not in await page.content()
        assert await page.evaluate("window.__xss") is None
        assert errors == []
        await context.close()
