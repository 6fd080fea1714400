"""The dashboard's filters and replay jobs: an endpoint's filter on its row (as text), and
"Replay a time range": count (dry run), start a job, see it listed, cancel it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.helpers.browser import UI_TIMEOUT_MS, chromium, sign_in
from tests.helpers.replays import DAY, endpoint, seed

pytestmark = pytest.mark.realredis


async def test_filter_shown_and_replay_a_range(make_store: Any, make_api: Any) -> None:
    from playwright.async_api import expect

    store = await make_store()
    api = await make_api(store)
    text = 'payload.note == "<img src=x onerror=alert(1)>"'
    async with api(
        "POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/f", "filter": text}
    ) as r:
        assert r.status == 201
    ep = await endpoint(store)
    # local midnight-ish bounds typed into datetime-local fields: a day around "a day ago"
    base = int(time.time() * 1000) - DAY
    made = await seed(store, [ep], 7, created=base)
    async with chromium() as browser:
        page = await (await browser.new_context(viewport={"width": 1366, "height": 900})).new_page()
        errors: list[Any] = []
        page.on("pageerror", lambda e: errors.append(e))
        page.set_default_timeout(UI_TIMEOUT_MS)
        await sign_in(page, api.url, click=True)
        await page.click('.tabs a[data-view="endpoints"]')
        cell = page.locator('[data-col="filter"]')
        await expect(cell).to_have_text(f"filter: {text}")  # as text: no element made
        assert await page.locator("#endpoints img").count() == 0

        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(base / 1000 - 60))
        until = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(base / 1000 + 60))
        await page.fill("#r-since", since)
        await page.fill("#r-until", until)
        await page.click("#r-count")
        await expect(page.locator("#replay-note")).to_have_text("7 deliveries match now")
        await page.click("#r-start")
        await expect(page.locator("#replay-note")).to_contain_text("started")
        row = page.locator("#replays tbody tr")
        await expect(row).to_have_count(1)
        await row.locator("button", has_text="Cancel").click()
        await expect(row.locator(".badge")).to_have_text("cancelled")
        assert errors == []
    assert len(made) == 7 and [j["state"] for j in await store.list_replay_jobs()] == ["cancelled"]
