"""The tenant's "what happened to my webhook?" in the portal, in a real Chromium against
the real API, Redis and a worker: find a failing event by its Idempotency-Key, read the
receiver's answer, fix the endpoint and replay, at most three clicks a step; nothing of
another app shows, however the page is asked; a second link in the same tab replaces
the session; a phone's width. One Chromium for the module.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from tests.helpers.browser import SHOTS, context, watch

pytestmark = pytest.mark.realredis

ANSWER = "acme receiver: signature check failed for key v1; " * 6
MAX_CLICKS = 3


# A 1x1 PNG.
LOGO = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
BRANDING = {"name": "Acme Webhooks", "logo_url": LOGO, "accent_color": "#0a7cff"}


async def session_url(api: Any, app: str, branding: Any = None) -> str:
    body = {"branding": branding} if branding else None
    async with api("POST", f"/v1/apps/{app}/portal", json=body) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["url"])


async def publish(api: Any, app: str, payload: Any, key: str) -> dict[str, Any]:
    async with api(
        "POST",
        "/v1/events",
        json={"type": "order.paid", "app": app, "payload": payload},
        headers={"Idempotency-Key": key},
    ) as r:
        assert r.status == 201, await r.text()
        return dict(await r.json())


async def until_status(store: Any, delivery_id: str, status: str) -> None:
    for _ in range(300):
        d = await store.get_delivery(delivery_id)
        if d and d["status"] == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{delivery_id} never became {status}")


async def test_tenant_finds_reads_fixes_replays_and_sees_only_its_app(
    make_store: Any, make_api: Any, receiver: Any, cdp: str
) -> None:
    from playwright.async_api import expect

    store = await make_store(retry_schedule=(0.05, 0.05), breaker_threshold=100)
    api = await make_api(store)
    receiver.responses["/acme"] = lambda r: web.Response(status=401, text=ANSWER)
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/acme", "app": "acme"}):
        pass
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/other", "app": "other"}):
        pass
    theirs = await publish(api, "other", {"secret": "other-app-data"}, "other-order-9")
    mine = await publish(api, "acme", {"order": 7, "total": 990}, "acme-order-7")
    (dlv,) = mine["deliveries"]
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(store, store.settings).run(stop))
    steps: dict[str, int] = {}

    async def click(step: str, locator: Any) -> None:
        steps[step] = steps.get(step, 0) + 1
        await locator.click()

    try:
        await until_status(store, dlv["id"], "dead")
        async with context(cdp, viewport={"width": 1000, "height": 900}) as ctx:
            page = await ctx.new_page()
            seen = watch(page)
            await page.goto(await session_url(api, "acme", BRANDING))
            await expect(page.locator("#portal")).to_be_visible()
            # The SaaS's branding: its name, its logo, its colour on the main button.
            await expect(page.locator("#p-name")).to_have_text("Acme Webhooks")
            assert await page.title() == "Acme Webhooks"
            await expect(page.locator("#p-logo")).to_have_attribute("src", LOGO)
            await expect(page.locator("#p-logo")).to_be_visible()
            await expect(page.locator("#p-new")).to_have_css(
                "background-color", "rgb(10, 124, 255)"
            )
            events = page.locator("#p-events tbody tr")
            await expect(events).to_have_count(1)  # its own event only

            # 1. Find it by its Idempotency-Key, from the keyboard.
            await page.focus("#p-q")
            await page.keyboard.type("acme-order-7")
            await page.keyboard.press("Enter")
            panel = page.locator("#p-event")
            await expect(page.locator("#p-ev-id")).to_have_text(mine["id"])
            await expect(panel.locator("pre.payload")).to_contain_text('"order": 7')

            # 2. The receiver's answer, whole.
            card = panel.locator(f'.ev-delivery[data-id="{dlv["id"]}"]')
            await expect(card).to_have_attribute("data-status", "dead")
            assert (await card.locator("pre.answer").last.text_content()) == ANSWER[:512]
            await page.screenshot(path=str(SHOTS / "portal-event.png"), full_page=True)

            # 3. Fix the endpoint, 4. replay.
            receiver.responses["/acme"] = lambda r: web.Response(text="ok")
            await click("fix", card.get_by_role("button", name="Edit endpoint"))
            await (
                page.locator("dialog")
                .get_by_label("URL", exact=True)
                .fill(receiver.url + "/acme-v2")
            )
            await click("fix", page.locator("dialog button[type=submit]"))
            await expect(page.locator("dialog")).to_have_count(0)
            await click("replay", card.get_by_role("button", name="Replay"))
            await expect(card).to_have_attribute("data-status", "succeeded")
            await receiver.wait_for(1, path="/acme-v2")
            assert all(n <= MAX_CLICKS for n in steps.values()), steps

            # Another app's event: not by its key, its id or its delivery's id.
            (their_dlv,) = theirs["deliveries"]
            for probe in ("other-order-9", theirs["id"], their_dlv["id"]):
                await page.fill("#p-q", probe)
                await page.keyboard.press("Enter")
                await expect(page.locator("#toast")).to_contain_text("No event of yours")
                await expect(page.locator("#p-ev-id")).to_have_text(mine["id"])
            # Nor by asking the API from the page with its token.
            answers = await page.evaluate(
                """async ([other, dlv]) => {
                  const {token} = JSON.parse(sessionStorage.getItem("relay.portal"));
                  const h = {Authorization: `Bearer ${token}`};
                  const get = async (p) => (await fetch(`/${p}`, {headers: h})).status;
                  return [await get("v1/events?app=other"), await get(`v1/events/${other}`),
                          await get(`v1/deliveries/${dlv}`),
                          (await (await fetch("/v1/events", {headers: h})).json()).data.length];
                }""",
                [theirs["id"], their_dlv["id"]],
            )
            assert answers == [403, 404, 404, 1]
            assert "other-app-data" not in await page.content()
            assert seen["errors"] == []

            # A second link in the same tab: the new session replaces the old one.
            other = await session_url(api, "other")
            await page.evaluate("(u) => { location.href = u; }", other)
            await expect(page.locator("#p-app")).to_have_text("· other")
            await expect(events).to_have_count(1)
            await expect(events.first).to_have_attribute("data-id", theirs["id"])
            await expect(page.locator("#p-event")).to_be_hidden()
            await expect(page.locator("#p-name")).to_have_text("Webhooks")  # none given
            await expect(page.locator("#p-logo")).to_be_hidden()
            assert await page.evaluate("location.hash") == ""
            assert seen["errors"] == []
    finally:
        stop.set()
        await worker


async def test_portal_at_phone_width(make_store: Any, make_api: Any, cdp: str) -> None:
    """375 px: nothing scrolls sideways; a delivery's status and time are both whole."""
    from playwright.async_api import expect

    from relay.queue.store import Store

    store: Store = await make_store()
    api = await make_api(store)
    async with api("POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/x", "app": "acme"}):
        pass
    await publish(api, "acme", {"n": 1}, "k-1")
    async with context(cdp, viewport={"width": 375, "height": 740}, is_mobile=True) as ctx:
        page = await ctx.new_page()
        seen = watch(page)
        await page.goto(await session_url(api, "acme"))
        row = page.locator("#p-deliveries tbody tr").first
        await expect(row.locator(".badge")).to_have_text("pending")
        cut = await page.evaluate(
            """() => [...document.querySelectorAll(
                 '.status-cell, .when-cell, #p-events .badge')]
               .filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.textContent)"""
        )
        assert cut == []
        sizes = await page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        assert sizes[0] <= sizes[1], f"the portal scrolls sideways at 375 px: {sizes}"
        await row.focus()
        await page.keyboard.press("Enter")
        await expect(page.locator("#p-d-payload pre")).to_contain_text('"n": 1')
        await page.screenshot(path=str(SHOTS / "portal-phone.png"), full_page=True)
        assert seen["errors"] == []


async def test_portal_endpoint_form_offers_the_catalog_and_checks_the_filter(
    make_store: Any, make_api: Any, cdp: str
) -> None:
    """Create an endpoint from the portal: the catalog's types to tick (their descriptions
    as tooltips), a filter the API refuses is said in the form and nothing is written; a
    good one is saved, and shows again on edit. Keyboard only, save for the form's fields."""
    from playwright.async_api import expect

    store = await make_store()
    api = await make_api(store)
    for name, about in (("order.paid", "an order was paid"), ("invoice.issued", "")):
        async with api("POST", "/v1/event-types", json={"name": name, "description": about}) as r:
            assert r.status in (200, 201), await r.text()
    async with context(cdp, viewport={"width": 1000, "height": 900}) as ctx:
        page = await ctx.new_page()
        seen = watch(page)
        await page.goto(await session_url(api, "acme"))
        await expect(page.locator("#p-types")).to_contain_text("an order was paid")
        await page.focus("#p-new")
        await page.keyboard.press("Enter")
        dialog = page.locator("dialog")
        await dialog.get_by_label("URL", exact=True).fill("http://127.0.0.1:9/hooks")
        paid = dialog.get_by_label("order.paid")
        await expect(dialog.locator("label.epf-type", has_text="order.paid")).to_have_attribute(
            "title", "an order was paid"
        )
        await paid.focus()
        await page.keyboard.press("Space")
        await expect(dialog.get_by_label("Event types", exact=True)).to_have_value("order.paid")
        await dialog.get_by_label("Filter", exact=True).fill("payload.amount >=")
        await dialog.locator("button[type=submit]").focus()
        await page.keyboard.press("Enter")
        await expect(dialog.locator(".form-error")).to_contain_text("Filter:")
        assert await store.list_endpoints("acme") == []
        await dialog.get_by_label("Filter", exact=True).fill("payload.amount >= 100")
        await dialog.locator("button[type=submit]").focus()
        await page.keyboard.press("Enter")
        await expect(dialog).to_have_count(0)
        (ep,) = await store.list_endpoints("acme")
        assert (ep["event_types"], ep["filter"]) == (["order.paid"], "payload.amount >= 100")
        item = page.locator("#p-endpoints li.p-ep")
        await item.get_by_role("button", name="Edit").click()
        await expect(dialog.get_by_label("Filter", exact=True)).to_have_value(
            "payload.amount >= 100"
        )
        await page.screenshot(path=str(SHOTS / "portal-endpoint-form.png"))
        await page.keyboard.press("Escape")
        await expect(dialog).to_have_count(0)
        assert seen["errors"] == []
