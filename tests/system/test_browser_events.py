"""The operator's "what happened to my webhook?" in the dashboard, in a real Chromium
against the real API, Redis and a worker: find a failing event by its Idempotency-Key,
read the receiver's whole answer, fix the endpoint and replay, at most three clicks a
step; the events list with its filters, by keyboard. One Chromium for the module.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from tests.helpers.browser import SHOTS, context, sign_in, watch

pytestmark = pytest.mark.realredis

KEY = "order-1001-paid"
# Longer than the 160 characters the attempt view used to show, within the body cap.
ANSWER = "upstream rejected the order: " + "field customer.tax_id is missing; " * 10
MAX_CLICKS = 3


class Clicks:
    """Counts the clicks of each step of a journey."""

    def __init__(self) -> None:
        self.per_step: Counter[str] = Counter()

    async def __call__(self, step: str, locator: Any) -> None:
        self.per_step[step] += 1
        await locator.click()


async def test_signing_in_leaves_the_keyboard_to_the_dashboard(
    make_store: Any, make_api: Any, cdp: str
) -> None:
    """Once signed in, the hidden sign-in field keeps neither the token nor the focus: the
    next key ("/" to search) goes to the dashboard. Read as the dashboard appears, before
    the browser's next rendering (which fixes the focus up itself, later)."""
    api = await make_api(await make_store())
    async with context(cdp) as ctx:
        page = await ctx.new_page()
        await page.goto(api.url + "/ui/")
        await page.fill("#token", "test-token")
        focused = await page.evaluate(
            """() => new Promise((resolve) => {
                const app = document.getElementById("app");
                new MutationObserver(() => {
                    if (!app.hidden) resolve(document.activeElement.id || "(none)");
                }).observe(app, { attributes: true });
                document.getElementById("signin-form").requestSubmit();
            })"""
        )
        assert focused == "(none)"
        assert await page.input_value("#token") == ""


async def test_operator_finds_reads_fixes_and_replays(
    make_store: Any, make_api: Any, receiver: Any, cdp: str
) -> None:
    from playwright.async_api import expect

    store = await make_store(retry_schedule=(0.05, 0.05), breaker_threshold=100)
    api = await make_api(store)
    receiver.responses["/shop"] = lambda r: web.Response(
        status=500,
        text=ANSWER,
        headers={"X-Request-Id": "req-42", "Set-Cookie": "sid=receiver-session"},
    )
    async with api(
        "POST", "/v1/endpoints", json={"url": receiver.url + "/shop", "app": "shop"}
    ) as r:
        ep = await r.json()
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/b", "app": "b"}):
        pass
    for i in range(3):  # other events, newer than the failing one
        async with api("POST", "/v1/events", json={"type": "ping", "app": "b", "payload": i}):
            pass
    async with api(
        "POST",
        "/v1/events",
        json={"type": "order.paid", "app": "shop", "payload": {"order": 1001, "total": 4200}},
        headers={"Idempotency-Key": KEY},
    ) as r:
        event = await r.json()
    (dlv,) = event["deliveries"]
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(store, store.settings).run(stop))
    clicks = Clicks()
    try:
        d = None
        for _ in range(300):
            d = await store.get_delivery(dlv["id"])
            if d and d["status"] == "dead":
                break
            await asyncio.sleep(0.05)
        assert d is not None and d["status"] == "dead"
        async with context(cdp, viewport={"width": 1366, "height": 900}) as ctx:
            page = await ctx.new_page()
            seen = watch(page)
            await sign_in(page, api.url)
            await expect(page.locator("#app")).to_be_visible()

            # 1. Find it by its Idempotency-Key: "/" to the search box, type, Enter.
            await page.keyboard.press("/")
            await page.keyboard.type(KEY)
            await page.keyboard.press("Enter")
            await expect(page.locator("#ev-id")).to_have_text(event["id"])
            body = page.locator("#ev-body")
            await expect(body).to_contain_text(KEY)
            await expect(body.locator("pre.payload")).to_contain_text('"order": 1001')
            await expect(page.locator("#ev-headers")).to_contain_text("webhook-id")

            # 2. The receiver's answer, whole, and its headers (a cookie never shown).
            card = body.locator(f'.ev-delivery[data-id="{dlv["id"]}"]')
            await expect(card).to_have_attribute("data-status", "dead")
            answers = card.locator("pre.answer")
            await expect(answers).to_have_count(3)
            assert (await answers.last.text_content()) == ANSWER
            await clicks("read", card.locator(".answer-headers summary").last)
            await expect(
                card.locator('.answer-headers dd[data-header="x-request-id"]').last
            ).to_contain_text("req-42")
            assert "receiver-session" not in await page.content()
            # Tall enough that the page does not scroll (the top bar sticks when it does).
            await page.set_viewport_size({"width": 1366, "height": 2000})
            await page.locator("#view-event").screenshot(path=str(SHOTS / "event.png"))
            await page.set_viewport_size({"width": 1366, "height": 900})

            # 3. Fix the endpoint from the event page.
            await clicks("fix", card.get_by_role("button", name="Edit endpoint"))
            await (
                page.locator("dialog")
                .get_by_label("URL", exact=True)
                .fill(receiver.url + "/shop-v2")
            )
            await clicks("fix", page.locator("dialog button[type=submit]"))
            await expect(page.locator("dialog")).to_have_count(0)
            assert (await store.get_endpoint(ep["id"]) or {})["url"] == receiver.url + "/shop-v2"

            # 4. Replay: it succeeds at the fixed address.
            await clicks("replay", card.get_by_role("button", name="Replay"))
            await expect(card).to_have_attribute("data-status", "succeeded")
            await receiver.wait_for(1, path="/shop-v2")
            assert all(n <= MAX_CLICKS for n in clicks.per_step.values()), clicks.per_step

            # A payload field needs the archive: the search says so.
            await page.fill("#q", "customer.id = 42")
            await page.keyboard.press("Enter")
            await expect(page.locator("#toast")).to_contain_text("needs the archive")

            # The events list: newest first, filters, a row opened from the keyboard.
            await page.click('.tabs a[data-view="events"]')
            rows = page.locator("#events tbody tr")
            await expect(rows).to_have_count(4)
            assert (await rows.first.get_attribute("data-id")) == event["id"]
            await page.fill("#e-app", "b")
            await expect(rows).to_have_count(3)
            await page.fill("#e-app", "")
            await page.select_option("#e-status", "succeeded")
            await expect(rows).to_have_count(4)
            await page.select_option("#e-endpoint", ep["id"])
            await expect(rows).to_have_count(1)
            await page.screenshot(path=str(SHOTS / "events.png"))
            await rows.first.focus()
            await page.keyboard.press("Enter")
            await expect(page.locator("#ev-id")).to_have_text(event["id"])

            # The deliveries table by keyboard too: Enter opens the drawer, Escape closes.
            # A live refresh that replaces the rows meanwhile leaves the focus where it was.
            await page.click('.tabs a[data-view="deliveries"]')
            listed = page.locator("#deliveries tbody tr")
            await expect(listed.first).to_be_visible()
            before = await listed.count()
            row = page.locator(f'#deliveries tr[data-id="{dlv["id"]}"]')
            await row.focus()
            async with api("POST", "/v1/events", json={"type": "ping", "app": "b", "payload": 9}):
                pass
            await expect(listed).to_have_count(before + 1)
            focused = await page.evaluate("document.activeElement.dataset.id || null")
            assert focused == dlv["id"]
            await page.keyboard.press("Enter")
            await expect(page.locator("#drawer")).to_be_visible()
            await expect(page.locator("#d-id")).to_have_text(dlv["id"])
            await page.keyboard.press("Escape")
            await expect(page.locator("#drawer")).to_be_hidden()
            assert seen["errors"] == []
    finally:
        stop.set()
        await worker


async def test_endpoint_page_charts_breaker_and_confirmed_actions(
    make_store: Any, make_api: Any, receiver: Any, cdp: str
) -> None:
    """The endpoint page: success rate, attempts and latency charts, the breaker and why,
    failures grouped; pause, recover and replay a range, each only once confirmed."""
    from playwright.async_api import expect

    store = await make_store(retry_schedule=(0.05,), breaker_threshold=2, breaker_cooldown=600)
    api = await make_api(store)
    state = {"fail": False}
    receiver.responses["/ep"] = lambda r: (
        web.Response(status=503, text="maintenance") if state["fail"] else web.Response()
    )
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/ep"}) as r:
        ep = await r.json()

    async def publish(n: int) -> list[str]:
        ids = []
        for i in range(n):
            async with api("POST", "/v1/events", json={"type": "t", "payload": i}) as r:
                ids += [d["id"] for d in (await r.json())["deliveries"]]
        return ids

    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        ok = await publish(3)
        await receiver.wait_for(3, path="/ep")
        state["fail"] = True
        dead = await publish(1)
        for _ in range(300):
            d = await store.get_delivery(dead[0])
            if d and d["status"] == "dead":
                break
            await asyncio.sleep(0.05)
        assert ok and d is not None and d["status"] == "dead"
        async with context(cdp, viewport={"width": 1366, "height": 900}) as ctx:
            page = await ctx.new_page()
            seen = watch(page)
            await sign_in(page, api.url)
            await page.click('.tabs a[data-view="endpoints"]')
            await page.click(f'#endpoints tr[data-id="{ep["id"]}"] a.ep-link')
            body = page.locator("#ep-body")
            await expect(body.locator('.card[data-key="rate"] .value')).to_have_text("60%")
            await expect(body.locator('.card[data-key="attempts"] .value')).to_have_text("5")
            await expect(body.locator("figure svg.mini-chart")).to_have_count(2)
            await expect(body.locator("#ep-failures tbody tr")).to_have_text(
                re.compile(r"HTTP 503\s*2")
            )
            await expect(page.locator("#ep-why")).to_contain_text("breaker")
            await body.get_by_role("button", name="24 hours").click()
            await expect(body.get_by_role("button", name="24 hours")).to_have_attribute(
                "aria-pressed", "true"
            )
            await page.set_viewport_size({"width": 1366, "height": 1600})
            await page.locator("#view-endpoint").screenshot(path=str(SHOTS / "endpoint-page.png"))
            await page.set_viewport_size({"width": 1366, "height": 900})

            # Pause: Cancel changes nothing; confirmed (from the keyboard) it pauses.
            await body.get_by_role("button", name="Pause").click()
            dialog = page.locator("dialog")
            await expect(dialog).to_contain_text("held")
            await page.keyboard.press("Escape")
            await expect(dialog).to_have_count(0)
            assert (await store.get_endpoint(ep["id"]) or {})["enabled"] is True
            await body.get_by_role("button", name="Pause").click()
            await page.keyboard.press("Tab")  # from Cancel to Pause
            await page.keyboard.press("Enter")
            await expect(body.get_by_role("button", name="Resume")).to_be_visible()
            assert (await store.get_endpoint(ep["id"]) or {})["enabled"] is False
            await body.get_by_role("button", name="Resume").click()
            await dialog.get_by_role("button", name="Resume").click()
            await expect(body.get_by_role("button", name="Pause")).to_be_visible()

            # Replay a range: counted first, said in the dialog, then started.
            # The page's inputs are local time, as the browser's (the same machine's).
            soon = datetime.now() + timedelta(hours=1)
            await page.fill("#ep-until", soon.strftime("%Y-%m-%dT%H:%M:%S"))
            await body.get_by_role("button", name="Replay range…").click()
            await expect(dialog).to_contain_text("1 dead delivery of this endpoint")
            await dialog.get_by_role("button", name="Replay").click()
            await expect(page.locator("#toast")).to_contain_text("started")

            # Rotate, recover since, send a test event: each once confirmed.
            before = (await store.get_endpoint(ep["id"]) or {})["secret"]
            await body.get_by_role("button", name="Rotate secret").click()
            await dialog.get_by_role("button", name="Rotate").click()
            await expect(page.locator("#toast")).to_contain_text("Secret rotated")
            assert (await store.get_endpoint(ep["id"]) or {})["secret"] != before
            await body.get_by_role("button", name="Recover dead since…").click()
            await expect(dialog).to_contain_text("goes back to pending")
            await dialog.get_by_role("button", name="Recover").click()
            await expect(page.locator("#toast")).to_contain_text(re.compile(r"Recovered \d+"))
            await body.get_by_role("button", name="Send test event").click()
            await dialog.get_by_role("button", name="Send").click()
            await expect(page.locator("#toast")).to_contain_text("Test event sent")
            assert seen["errors"] == []
    finally:
        stop.set()
        await worker
