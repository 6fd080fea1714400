"""What a newcomer reads on the dashboard and the portal, in Debian's headless Chromium
against the real API and Redis: the portal's delivery says its status where "Status" is
written, a card's text is never cut, and an endpoint's row is no taller than its content.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.helpers.browser import UI_TIMEOUT_MS, chromium, sign_in
from tests.helpers.cli import finish

pytestmark = pytest.mark.realredis

# Every card's text boxes (label, value, sub line): how wide their text is against the
# room they have; the text is cut (ellipsis, hidden overflow) when it is wider.
CARD_TEXT = """
() => [...document.querySelectorAll(".card > *")].map((e) => ({
  card: e.parentElement.dataset.key, part: e.className, text: e.textContent,
  scroll: e.scrollWidth, client: e.clientWidth,
}))
"""


async def endpoint(api: Any, **spec: Any) -> dict[str, Any]:
    async with api("POST", "/v1/endpoints", json=spec) as r:
        assert r.status == 201, await r.text()
        return dict(await r.json())


async def portal_url(api: Any, app: str) -> str:
    async with api("POST", f"/v1/apps/{app}/portal") as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["url"])


@pytest.mark.parametrize("width", [1366, 1000, 800])
async def test_no_card_text_is_cut(make_store: Any, make_api: Any, width: int) -> None:
    """Deliveries waiting in an ordered lane make the Pending card's longest line."""
    from playwright.async_api import expect

    store = await make_store()
    api = await make_api(store)
    await endpoint(api, url="http://127.0.0.1:9/lanes", ordering="key")
    for n in range(4):
        async with api(
            "POST",
            "/v1/events",
            json={"type": "order.paid", "payload": {"n": n}, "ordering_key": "k"},
        ) as r:
            assert r.status == 201, await r.text()
    assert (await store.stats())["counts"]["queued"] == 3

    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": width, "height": 800})
        page = await context.new_page()
        page.set_default_timeout(UI_TIMEOUT_MS)
        await sign_in(page, api.url, click=True)
        pending = page.locator('.card[data-key="pending"] .sub')
        await expect(pending).to_contain_text("3 queued in lanes")
        cut = [t for t in await page.evaluate(CARD_TEXT) if t["scroll"] > t["client"]]
        assert cut == [], f"card text cut at {width} px: {cut}"


async def test_portal_delivery_says_its_status(make_store: Any, make_api: Any) -> None:
    """The delivery's summary in the portal: "Status" shows the status word alone (not
    "2s ago"), and the time it finished has a row of its own."""
    from playwright.async_api import expect

    store = await make_store()
    api = await make_api(store)
    await endpoint(api, url="http://127.0.0.1:9/hooks", app="acme")
    async with api(
        "POST", "/v1/events", json={"type": "order.paid", "app": "acme", "payload": {}}
    ) as r:
        (ok,) = (await r.json())["deliveries"]
    await finish(store, {ok["id"]: "succeeded"})

    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": 1000, "height": 900})
        page = await context.new_page()
        page.set_default_timeout(UI_TIMEOUT_MS)
        await page.goto(await portal_url(api, "acme"))
        row = page.locator(f'#p-deliveries tr[data-id="{ok["id"]}"]')
        await expect(row).to_have_attribute("data-status", "succeeded")
        await row.click()
        await expect(page.locator("#p-d-id")).to_have_text(ok["id"])
        status = page.locator("#p-d-summary dt", has_text="Status").locator(
            "xpath=following-sibling::dd[1]"
        )
        await expect(status.locator(".badge")).to_have_text("succeeded")
        # The status is a status; its time has a row of its own.
        await expect(status).to_have_text("succeeded")
        finished = page.locator("#p-d-summary dt", has_text="Finished").locator(
            "xpath=following-sibling::dd[1]"
        )
        await expect(finished).to_have_text(re.compile(r"^\S+Z · (just now|\S+ ago)$"))


# Each row's height against its tallest cell's content, the action buttons left out:
# buttons that stack up make a row taller than what it says.
ROW_HEIGHTS = """
(rows) => rows.map((row) => {
  const content = [...row.cells].filter((td) => !td.querySelector(".actions")).map((td) => {
    const range = document.createRange();
    range.selectNodeContents(td);
    return range.getBoundingClientRect().height;
  });
  return {id: row.dataset.id, row: row.getBoundingClientRect().height,
          content: Math.max(...content)};
})
"""


async def test_dashboard_endpoint_row_is_as_tall_as_its_text(
    make_store: Any, make_api: Any
) -> None:
    """A newcomer's first endpoint at 1,366 px: its row is as tall as its tallest cell's
    text (plus the cell's padding), its buttons on one line beside it."""
    from playwright.async_api import expect

    store = await make_store()
    api = await make_api(store)
    await endpoint(api, url="http://127.0.0.1:9/hooks")
    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": 1366, "height": 800})
        page = await context.new_page()
        page.set_default_timeout(UI_TIMEOUT_MS)
        await sign_in(page, api.url, click=True)
        await page.click('.tabs a[data-view="endpoints"]')
        rows = page.locator("#endpoints tbody tr")
        await expect(rows.locator(".rate, .muted")).to_have_count(1)  # its health read too
        tall = [r for r in await rows.evaluate_all(ROW_HEIGHTS) if r["row"] > r["content"] + 16]
        assert tall == [], f"a row taller than its text: {tall}"


async def test_portal_endpoint_has_no_line_of_buttons_alone(make_store: Any, make_api: Any) -> None:
    """The same endpoint in the portal at 1,000 px: its buttons sit beside its text, the
    item no taller than the text (plus its padding)."""
    from playwright.async_api import expect

    store = await make_store()
    api = await make_api(store)
    await endpoint(api, url="http://127.0.0.1:9/hooks", app="acme")
    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": 1000, "height": 800})
        page = await context.new_page()
        page.set_default_timeout(UI_TIMEOUT_MS)
        await page.goto(await portal_url(api, "acme"))
        items = page.locator("#p-endpoints li.p-ep")
        await expect(items).to_have_count(1)
        got = await items.evaluate_all(ITEM_HEIGHTS)
        tall = [i for i in got if i["item"] > i["content"] + 22]
        assert tall == [], f"an endpoint taller than its text: {tall}"


# The portal's endpoint items: the height of everything but the buttons, against the item.
ITEM_HEIGHTS = """
(items) => items.map((li) => {
  const boxes = [...li.children].filter((c) => !c.classList.contains("actions"))
    .map((c) => c.getBoundingClientRect());
  return {item: li.getBoundingClientRect().height,
          content: Math.max(...boxes.map((b) => b.bottom)) - Math.min(...boxes.map((b) => b.top))};
})
"""
