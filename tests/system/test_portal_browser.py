"""The consumer portal (/portal/) and the dashboard's endpoint writes,
in Debian's headless Chromium against the real API, Redis and a worker.

One Chromium serves the whole module: a module fixture starts it with a DevTools port
and each test connects to it over CDP (its own Playwright driver and browser context).
Every portal here is opened with a real portal session (``POST /v1/apps/{app}/portal``,
the URL it answers), so what the page may see and change is what the session may.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from tests.helpers.browser import SHOTS, context, sign_in, watch

pytestmark = pytest.mark.realredis


async def portal_session(api: Any, app: str) -> dict[str, Any]:
    """A portal session of ``app``: ``{url, token, expires_at}``, made by the operator."""
    async with api("POST", f"/v1/apps/{app}/portal") as r:
        assert r.status == 201, await r.text()
        made = dict(await r.json())
    assert made["url"] == f"{api.url}/portal/#token={made['token']}"
    return made


async def fill(page: Any, label: str, value: str) -> None:
    """Type into the endpoint form's field of that label (the form is a <dialog>)."""
    await page.locator("dialog").get_by_label(label, exact=True).fill(value)


def assert_token_kept(seen: dict[str, list[Any]], token: str) -> None:
    assert seen["errors"] == []
    assert seen["requests"], "no request seen"
    for url, referer in seen["requests"]:
        assert token not in url, url  # never in a query string (nor anywhere in a URL)
        # Referrer-Policy: no-referrer: the portal's requests carry none (the embedding
        # page's own request for the iframe may carry the embedding page's address)
        assert not referer or ("/portal/" not in referer and token not in referer), (url, referer)


async def _until(predicate: Any, what: str) -> None:
    for _ in range(300):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_portal_end_to_end(make_store: Any, make_api: Any, receiver: Any, cdp: str) -> None:
    """Open a portal link; add an endpoint on a local receiver; send a test event and see
    it arrive; reveal and rotate the secret; edit, disable, enable; a dead delivery's
    attempts, then replay it; recover dead letters. The token leaves the address bar at
    once and is never in a URL or a Referer."""
    from playwright.async_api import expect

    store = await make_store(retry_schedule=(0.05, 0.05), breaker_threshold=100)
    api = await make_api(store)
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/other", "app": "b"}):
        pass  # another app's endpoint: not listed for app "acme"
    failing = {"on": False}
    receiver.responses["/hooks"] = lambda r: (
        web.Response(status=500, text="receiver down") if failing["on"] else web.Response()
    )
    session = await portal_session(api, "acme")
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        async with context(cdp, viewport={"width": 960, "height": 900}) as ctx:
            page = await ctx.new_page()
            seen = watch(page)
            answer = await page.goto(session["url"])
            assert answer is not None
            assert answer.headers["referrer-policy"] == "no-referrer"
            assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
            await expect(page.locator("#portal")).to_be_visible()
            assert page.url == api.url + "/portal/"  # the fragment is gone from the URL
            assert await page.evaluate("location.hash") == ""
            await expect(page.locator("#p-endpoints-empty")).to_be_visible()

            # Add an endpoint: the form, with accessible labels.
            await page.click("#p-new")
            await fill(page, "URL", receiver.url + "/hooks")
            await fill(page, "Description", "order system")
            await fill(page, "Event types", "order.paid, invoice.*")
            await fill(page, "Rate limit (per second)", "20")
            await page.click("dialog button[type=submit]")
            item = page.locator("#p-endpoints li.p-ep")
            await expect(item).to_have_count(1)
            await expect(item).to_contain_text("order system")
            (ep,) = await store.list_endpoints("acme")
            assert ep["url"] == receiver.url + "/hooks" and ep["rate_limit"] == 20
            assert ep["event_types"] == ["order.paid", "invoice.*"]
            secret = page.locator(f'[data-secret="{ep["id"]}"] code')
            await expect(secret).to_have_text(ep["secret"])  # shown once, on create
            await expect(page.locator("#p-types")).to_contain_text("order.paid")

            # A test event arrives at the receiver.
            await item.get_by_role("button", name="Send test event").click()
            await receiver.wait_for(1, path="/hooks")
            (got,) = receiver.for_path("/hooks")
            assert b'"relay.test"' in got.body  # A's test route: whatever the event types
            await expect(page.locator("#p-deliveries tbody tr")).to_have_count(1)
            await expect(page.locator("#p-deliveries tbody tr .badge")).to_have_text("succeeded")

            # Reveal on demand (hidden first), then rotate: a new secret, shown.
            await secret.locator("xpath=..").get_by_role("button", name="Hide").click()
            await expect(secret).to_have_count(0)
            await item.get_by_role("button", name="Reveal secret").click()
            await expect(secret).to_have_text(ep["secret"])
            await item.get_by_role("button", name="Rotate secret…").click()
            await item.get_by_role("button", name="Rotate now").click()
            await expect(page.locator("#toast")).to_contain_text("Secret rotated")
            rotated = await store.get_endpoint(ep["id"])
            assert rotated is not None and rotated["secret"] != ep["secret"]
            await expect(secret).to_have_text(rotated["secret"])

            # Edit, disable, enable.
            await item.get_by_role("button", name="Edit").click()
            await fill(page, "Description", "order system (v2)")
            await page.click("dialog button[type=submit]")
            await expect(item).to_contain_text("order system (v2)")
            await item.get_by_role("button", name="Disable").click()
            await expect(item.locator(".badge.disabled")).to_have_text("disabled")
            assert (await store.get_endpoint(ep["id"]) or {})["enabled"] is False
            await item.get_by_role("button", name="Enable").click()
            await expect(item.locator(".badge.succeeded")).to_have_text("enabled")

            # A delivery goes dead; its attempts; replay it once the receiver is back.
            failing["on"] = True
            async with api(
                "POST", "/v1/events", json={"type": "order.paid", "app": "acme", "payload": {}}
            ) as r:
                (dead,) = (await r.json())["deliveries"]
            row = page.locator(f'#p-deliveries tr[data-id="{dead["id"]}"]')
            await expect(row).to_have_attribute("data-status", "dead")
            await row.click()
            await expect(page.locator("#p-d-log tbody tr")).to_have_count(3)
            await expect(page.locator("#p-d-log")).to_contain_text("HTTP 500 → dead")
            failing["on"] = False
            await page.click("#p-d-replay")
            await expect(page.locator("#p-d-status .badge")).to_have_text("succeeded")
            await expect(page.locator("#p-d-log tbody tr")).to_have_count(4)
            await expect(row).to_have_attribute("data-status", "succeeded")
            await page.screenshot(path=str(SHOTS / "portal.png"), full_page=True)

            # Dead letters of the endpoint, recovered in one go.
            failing["on"] = True
            async with api(
                "POST", "/v1/events", json={"type": "order.paid", "app": "acme", "payload": {}}
            ) as r:
                (second,) = (await r.json())["deliveries"]
            await expect(
                page.locator(f'#p-deliveries tr[data-id="{second["id"]}"]')
            ).to_have_attribute("data-status", "dead")
            failing["on"] = False
            await item.get_by_role("button", name="Recover dead…").click()
            await item.get_by_role("button", name="Recover all dead").click()
            await expect(page.locator("#toast")).to_contain_text("Recovered 1 dead delivery")

            async def recovered() -> bool:
                d = await store.get_delivery(second["id"])
                return d is not None and d["status"] == "succeeded"

            await _until(recovered, "the recovered delivery to succeed")
            # The other app's endpoint never showed; the token never left the fragment.
            assert "/other" not in await page.locator("#p-endpoints").inner_text()
            assert_token_kept(seen, session["token"])
            sizes = await page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
            assert sizes[0] <= sizes[1], f"the portal scrolls sideways at 960 px: {sizes}"
    finally:
        stop.set()
        await worker


@pytest.mark.parametrize("allowed", [True, False], ids=["ancestor-set", "default-none"])
async def test_portal_embedded_in_another_origin(
    make_store: Any, make_api: Any, cdp: str, allowed: bool
) -> None:
    """In an iframe 380 px wide on a page of another origin: it renders (and fits) when
    RELAY_PORTAL_FRAME_ANCESTORS names that origin; the browser refuses it by default."""
    from playwright.async_api import expect

    from relay.redisproc import free_port

    host_port = free_port()
    host_origin = f"http://127.0.0.1:{host_port}"
    store = await make_store(portal_frame_ancestors=host_origin if allowed else "")
    api = await make_api(store)
    async with api("POST", "/v1/endpoints", json={"url": "http://127.0.0.1:9/x", "app": "acme"}):
        pass
    session = await portal_session(api, "acme")
    src = session["url"]
    html = (
        "<!doctype html><title>SaaS settings</title><h1>Your webhooks</h1>"
        f'<iframe id="portal" title="Webhooks" src="{src}" width="380" height="640"></iframe>'
    )

    async def host(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", host)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", host_port).start()
    try:
        async with context(cdp, viewport={"width": 900, "height": 760}) as ctx:
            page = await ctx.new_page()
            seen = watch(page)
            await page.goto(host_origin + "/", wait_until="load")  # the iframe loaded too
            frame = page.frame_locator("#portal")
            if allowed:
                await expect(frame.locator("#portal")).to_be_visible()
                await expect(frame.locator("#p-endpoints li.p-ep")).to_have_count(1)
                inner = page.frames[1]
                assert inner.url == api.url + "/portal/"  # token out of the frame's URL too
                width = await inner.evaluate(
                    "[document.documentElement.scrollWidth, window.innerWidth]"
                )
                assert width[0] <= width[1], f"the portal scrolls sideways at 380 px: {width}"
                await page.screenshot(path=str(SHOTS / "portal-embedded.png"))
                assert_token_kept(seen, session["token"])
            else:
                # Refused: Chromium puts its error page in the frame; no portal in it.
                inner = page.frames[1]

                async def refused() -> bool:
                    return str(inner.url).startswith("chrome-error://")

                await _until(refused, "the frame to be refused")
                assert await frame.locator("#portal").count() == 0
    finally:
        await runner.cleanup()


async def test_expired_or_missing_token_gets_a_clear_page(
    make_store: Any, make_api: Any, cdp: str
) -> None:
    from playwright.async_api import expect

    """A real portal session past its expiry (RELAY_PORTAL_TTL short here) gets the
    "expired" page, not a broken one; the page without a token says it needs a link."""
    store = await make_store(portal_ttl=0.05)
    api = await make_api(store)
    session = await portal_session(api, "acme")

    async def expired() -> bool:
        return bool(await store.now_ms() > session["expires_at"])

    await _until(expired, "the portal session to expire")
    async with context(cdp, viewport={"width": 800, "height": 600}) as ctx:
        page = await ctx.new_page()
        seen = watch(page)
        await page.goto(session["url"])
        await expect(page.locator("#gone")).to_be_visible()
        await expect(page.locator("#gone-title")).to_have_text("This link has expired")
        await expect(page.locator("#gone-text")).to_contain_text("for a new one")
        await expect(page.locator("#portal")).to_be_hidden()
        assert await page.evaluate("sessionStorage.length") == 0
        await page.screenshot(path=str(SHOTS / "portal-expired.png"))
        await page.goto(f"{api.url}/portal/")
        await page.reload()
        await expect(page.locator("#gone-title")).to_have_text("This page needs a link")
        assert_token_kept(seen, session["token"])

        # A session that expires while its page is open (a form half filled): the next
        # call (the page polls) closes the form and shows the expired page.
        from relay.domain.access import token_hash

        ends = await store.create_portal_session(
            session_id="prt_brief", app="acme", scopes=["read", "manage"],
            token_hash=token_hash("rp_brief-session-token"), ttl_ms=2000,
        )  # fmt: skip
        page = await ctx.new_page()
        await page.goto(f"{api.url}/portal/#token=rp_brief-session-token")
        await expect(page.locator("#portal")).to_be_visible()
        await page.click("#p-new")
        await fill(page, "URL", "http://127.0.0.1:9/x")

        async def over() -> bool:
            return bool(await store.now_ms() > ends)

        await _until(over, "the brief session to expire")
        await expect(page.locator("#gone-title")).to_have_text("This link has expired")
        await expect(page.locator("dialog")).to_have_count(0)
        await expect(page.locator("#portal")).to_be_hidden()


async def test_dashboard_creates_edits_disables_rotates_deletes(
    make_store: Any, make_api: Any, cdp: str
) -> None:
    """The operator's endpoint writes from the endpoints view; a waiting delivery of the
    endpoint says why in the table and the drawer (breaker open until T, then held)."""
    from playwright.async_api import expect

    from relay.endpoints.health import Health

    store = await make_store(breaker_threshold=1)
    api = await make_api(store)
    async with context(cdp, viewport={"width": 1366, "height": 800}) as ctx:
        page = await ctx.new_page()
        seen = watch(page)
        await sign_in(page, api.url, "/ui/#/endpoints", click=True)
        await page.click("#ep-new")
        await fill(page, "URL", "http://127.0.0.1:9/dash")
        await fill(page, "App", "acme")
        await fill(page, "Event types", "invoice.*")
        await fill(page, "Max in flight", "4")
        await page.click("dialog button[type=submit]")
        rows = page.locator("#endpoints tbody tr")
        await expect(rows).to_have_count(1)
        (ep,) = await store.list_endpoints()
        assert (ep["app"], ep["event_types"], ep["max_in_flight"]) == ("acme", ["invoice.*"], 4)
        row = page.locator(f'#endpoints tr[data-id="{ep["id"]}"]')
        await expect(row.locator(f'[data-secret="{ep["id"]}"] code')).to_have_text(ep["secret"])
        # Every action button on the row is inside the table's visible box at 1,366 px.
        edges = await row.evaluate(
            """r => [Math.max(...[...r.querySelectorAll('button')].map(
                       b => b.getBoundingClientRect().right)),
                     r.closest('.table-wrap').getBoundingClientRect().right]"""
        )
        assert edges[0] <= edges[1] + 0.5, f"a button is cut off: {edges}"

        await row.get_by_role("button", name="Edit").click()
        await fill(page, "URL", "http://127.0.0.1:9/dash-v2")
        await fill(page, "Rate limit (per second)", "5")
        await fill(page, "Max in flight", "")  # cleared: no cap
        await page.screenshot(path=str(SHOTS / "endpoint-form.png"))
        await page.click("dialog button[type=submit]")
        await expect(row).to_contain_text("/dash-v2")
        await expect(row).to_contain_text("5/s")
        edited = await store.get_endpoint(ep["id"]) or {}
        assert (edited["rate_limit"], edited["max_in_flight"]) == (5, None)

        await row.get_by_role("button", name="Disable").click()
        await expect(row.locator(".badge.disabled")).to_be_visible()
        await row.get_by_role("button", name="Enable").click()
        await expect(row.locator(".badge.disabled")).to_have_count(0)

        # Why a delivery waits: its endpoint's breaker is open (no worker runs here).
        async with api(
            "POST", "/v1/events", json={"type": "invoice.paid", "app": "acme", "payload": 1}
        ) as r:
            (waiting,) = (await r.json())["deliveries"]
        await Health(store).settle(ep["id"], [("t", "0")])  # one failure opens it
        await page.click('.tabs a[data-view="deliveries"]')
        line = page.locator(f'#deliveries tr[data-id="{waiting["id"]}"] .when-cell')
        await expect(line).to_contain_text(re.compile(r"breaker open until \d\d:\d\d:\d\d"))
        await line.click()
        await expect(page.locator("#d-summary")).to_contain_text("breaker open until")
        await page.click("#d-close")
        await page.click('.tabs a[data-view="endpoints"]')
        await row.get_by_role("button", name="Disable").click()
        await expect(row.locator(".badge.disabled")).to_be_visible()
        await page.click('.tabs a[data-view="deliveries"]')
        await expect(line).to_have_text("held: endpoint disabled")
        await page.click('.tabs a[data-view="endpoints"]')
        await row.get_by_role("button", name="Enable").click()
        await expect(row.locator(".badge.disabled")).to_have_count(0)
        await row.get_by_role("button", name="Rotate…").click()
        await row.get_by_role("button", name="Rotate now").click()
        await expect(page.locator("#toast")).to_contain_text("Rotated the secret")
        rotated = await store.get_endpoint(ep["id"]) or {}
        assert rotated["secret"] != ep["secret"]
        await expect(row.locator("code")).to_have_text(rotated["secret"])
        await row.get_by_role("button", name="Delete…").click()
        await row.get_by_role("button", name="Delete now").click()
        await expect(rows).to_have_count(0)
        assert await store.list_endpoints() == []
        assert seen["errors"] == []


async def test_portal_files_and_headers(make_store: Any, make_api: Any) -> None:
    """Every file of the portal carries its headers; nothing of it needs a token."""
    import aiohttp

    store = await make_store(portal_frame_ancestors="https://app.example.com")
    api = await make_api(store)
    async with aiohttp.ClientSession() as anon:
        async with anon.get(api.url + "/portal", allow_redirects=False) as r:
            assert r.status == 302 and r.headers["Location"] == "/portal/"
        for name, kind in (
            ("", "text/html"),
            ("portal.js", "text/javascript"),
            ("portal.css", "text/css"),
            ("app.css", "text/css"),
            ("kit.js", "text/javascript"),
            ("epform.js", "text/javascript"),
        ):
            async with anon.get(f"{api.url}/portal/{name}") as r:
                assert (r.status, r.content_type) == (200, kind), name
                assert r.headers["Referrer-Policy"] == "no-referrer"
                csp = r.headers["Content-Security-Policy"]
                assert (
                    "script-src 'self'" in csp and "frame-ancestors https://app.example.com" in csp
                )
                assert "X-Frame-Options" not in r.headers
        async with anon.get(api.url + "/ui/epform.js") as r:
            assert (r.status, r.content_type) == (200, "text/javascript")
