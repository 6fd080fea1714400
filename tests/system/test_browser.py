"""The dashboard at /ui/ in a real headless Chromium, against the real API, Redis and worker.

Chromium is Debian's (``/usr/bin/chromium``), driven by Playwright through
``executable_path`` (browser downloads are impossible here). Without it the browser
test FAILS saying what to install; it is never skipped. The browser test also writes
the docs' screenshots to ``docs/screenshots/``.

The other tests here check the dashboard's own JSON reads without a browser.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from relay.api import ui
from relay.delivery.worker import Worker
from tests.helpers.browser import (
    SHOTS,
    UI_TIMEOUT_MS,
    XSS,
    chromium,
)

XSS_IMG = '<img src=x onerror="window.__xss=2">'


async def _wait_until(predicate: Any, what: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _counts(store: Any) -> dict[str, int]:
    return dict((await store.stats())["counts"])


async def test_dashboard_replays_dead_delivery_and_escapes_payloads(
    make_store, make_api, receiver
) -> None:
    """Sign in, see the dead delivery, open it, replay it, watch it succeed; recover the
    other from the endpoints view. Untrusted payload text must show as text, never run.

    Fails with the payload set with ``pre.innerHTML = ...`` in ``relay/ui/app.js`` (the
    markup is parsed, not shown).
    """
    async with chromium() as browser:
        await _dashboard_scenario(make_store, make_api, receiver, browser)


async def _dashboard_scenario(make_store: Any, make_api: Any, receiver: Any, browser: Any) -> None:
    from playwright.async_api import expect

    expect.set_options(timeout=UI_TIMEOUT_MS)
    # Three attempts, then dead. Six failures in a row open the orders endpoint's
    # breaker; a short cooldown lets the replay through as the half-open probe.
    store = await make_store(
        retry_schedule=(0.05, 0.05), breaker_cooldown=0.2, breaker_cooldown_max=0.5
    )
    api = await make_api(store)
    failing = {"on": True}

    def orders(request: web.Request) -> web.Response:
        if failing["on"]:
            return web.Response(status=500, text="upstream database unavailable")
        return web.Response(text="ok")

    receiver.responses["/orders"] = orders
    # Asks for ten minutes: those deliveries stay pending with a retry scheduled.
    receiver.responses["/crm"] = lambda r: web.Response(status=503, headers={"Retry-After": "600"})

    async def create(**spec: Any) -> dict[str, Any]:
        async with api("POST", "/v1/endpoints", json=spec) as r:
            assert r.status == 201, await r.text()
            return dict(await r.json())

    ep_orders = await create(
        url=receiver.url + "/orders",
        event_types=["order.*"],
        description="order service",
        rate_limit=50,
        max_in_flight=10,
        headers={"X-Api-Key": "receiver-credential"},
    )
    await create(url=receiver.url + "/billing", event_types=["invoice.*", "order.paid"])
    await create(url=receiver.url + "/crm", event_types=["customer.*"], description="CRM sync")

    async def publish(kind: str, payload: Any) -> dict[str, Any]:
        async with api("POST", "/v1/events", json={"type": kind, "payload": payload}) as r:
            assert r.status == 201, await r.text()
            return dict(await r.json())

    xss_event = await publish(
        "order.paid", {"order": "A-1001", "note": XSS, "html": XSS_IMG, "amount": 4200}
    )
    (xss_dlv,) = [d["id"] for d in xss_event["deliveries"] if d["endpoint_id"] == ep_orders["id"]]
    other_event = await publish("order.created", {"order": "A-1002"})
    for i in range(24):
        await publish("invoice.issued", {"invoice": f"INV-{i:04d}", "total": 100 + i})
    for i in range(2):
        await publish("customer.updated", {"customer": f"C-{i}"})

    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(store, store.settings).run(stop))
    try:
        # 2 dead (orders), 25 succeeded (billing), 2 pending after one 503 each (crm).
        async def settled() -> bool:
            c = await _counts(store)
            crm = receiver.for_path("/crm")
            return c["dead"] == 2 and c["succeeded"] == 25 and len(crm) == 2 and c["pending"] == 2

        await _wait_until(settled, "the first round of deliveries to settle")

        context = await browser.new_context(viewport={"width": 1366, "height": 768})
        page = await context.new_page()
        page_errors: list[Any] = []
        page.on("pageerror", lambda e: page_errors.append(e))  # uncaught errors in the page
        await page.goto(api.url + "/ui/")

        # A wrong token is refused and leaves the dashboard hidden.
        await page.fill("#token", "not-the-token")
        await page.click("#signin-form button[type=submit]")
        await expect(page.locator("#signin-error")).to_contain_text("not accepted")
        await expect(page.locator("#app")).to_be_hidden()

        await page.fill("#token", "test-token")
        await page.click("#signin-form button[type=submit]")
        await expect(page.locator("#app")).to_be_visible()
        assert await page.evaluate("sessionStorage.getItem('relay.token')") == "test-token"
        assert await page.evaluate("localStorage.length") == 0

        dead_card = page.locator('.card[data-key="dead"] .value')
        await expect(dead_card).to_have_text("2")
        await expect(page.locator('.card[data-key="succeeded"] .value')).to_have_text("25")
        rows = page.locator("#deliveries tbody tr")
        await expect(rows).to_have_count(25)  # one page of the 29
        # The chart has a minute with both dead deliveries in it.
        minutes = await page.locator("#chart g.minute title").all_text_contents()
        assert len(minutes) == 30
        assert sum(int(t.split(" succeeded")[0].split()[-1]) for t in minutes) == 25
        assert sum(int(t.split(" dead")[0].split()[-1]) for t in minutes) == 2
        await page.screenshot(path=str(SHOTS / "overview.png"))

        # Paging with the API's cursor: the second page holds the other 4, no overlap.
        first = set(await rows.evaluate_all("rs => rs.map(r => r.dataset.id)"))
        await page.click("#page-next")
        await expect(rows).to_have_count(4)
        second = set(await rows.evaluate_all("rs => rs.map(r => r.dataset.id)"))
        assert not first & second and len(first | second) == 29
        await page.click("#page-first")
        await expect(rows).to_have_count(25)

        # Filters: event type (prefix pattern), then status.
        await page.fill("#f-type", "customer.*")
        await expect(rows.filter(has_text="customer.updated")).to_have_count(2)
        await expect(rows).to_have_count(2)
        assert set(await rows.locator("td:nth-child(3)").all_text_contents()) == {
            "customer.updated"
        }
        await page.fill("#f-type", "")
        await page.select_option("#f-status", "dead")
        await expect(page.locator('#deliveries tbody tr[data-status="dead"]')).to_have_count(2)
        await expect(rows).to_have_count(2)
        assert set(await rows.evaluate_all("rs => rs.map(r => r.dataset.status)")) == {"dead"}
        await expect(page.locator(f'#deliveries tr[data-id="{xss_dlv}"]')).to_have_attribute(
            "data-status", "dead"
        )

        # The drawer: payload as text, the attempt log, the headers that were sent.
        await page.click(f'#deliveries tr[data-id="{xss_dlv}"]')
        drawer = page.locator("#drawer")
        await expect(drawer).to_be_visible()
        payload = page.locator("#d-payload")
        await expect(payload).to_contain_text(XSS)
        await expect(payload).to_contain_text(XSS_IMG.replace('"', '\\"'))
        assert await page.evaluate("typeof window.__xss") == "undefined"
        assert await page.locator("#drawer img, #drawer script").count() == 0
        log_rows = page.locator("#d-log tbody tr")
        await expect(log_rows).to_have_count(3)
        assert [t.strip() for t in await log_rows.locator("td:nth-child(5)").all_inner_texts()] == [
            # the receiver's answer, and its headers (content-type, -length, date, server)
            "HTTP 500 → retry\nupstream database unavailable\nAnswer headers (4)",
            "HTTP 500 → retry\nupstream database unavailable\nAnswer headers (4)",
            "HTTP 500 → dead\nupstream database unavailable\nAnswer headers (4)",
        ]
        assert set(await log_rows.locator("td:nth-child(6)").all_text_contents()) == {
            store.settings.worker_id
        }
        shown = {
            name.lower(): value
            for name, value in await page.locator("#d-headers tbody tr").evaluate_all(
                "rs => rs.map(r => [r.cells[0].textContent, r.cells[1].textContent])"
            )
        }
        sent = [
            r
            for r in receiver.for_path("/orders")
            if r.headers.get("x-relay-delivery-id") == xss_dlv
        ][-1]
        sent_headers = {k.lower(): v for k, v in sent.headers.items()}
        assert set(shown) == set(sent_headers)
        for name in (
            "webhook-id",
            "x-relay-delivery-id",
            "x-relay-attempt",
            "content-type",
            "user-agent",
            "content-length",
            "host",
        ):
            assert shown[name] == sent_headers[name], name
        assert abs(int(shown["webhook-timestamp"]) - int(sent_headers["webhook-timestamp"])) <= 1
        # Neither the signature nor a custom header's value (a receiver credential) shows.
        assert sent_headers["webhook-signature"] not in await drawer.inner_text()
        assert "receiver-credential" not in await page.content()
        await page.screenshot(path=str(SHOTS / "drawer.png"))

        # One click: the dead delivery goes back to pending and then succeeds.
        failing["on"] = False
        await page.click("#d-replay")
        await expect(page.locator("#d-status .badge")).to_have_text("succeeded")
        await expect(log_rows).to_have_count(4)
        assert (await log_rows.nth(3).locator("td:nth-child(5)").inner_text()).strip() == (
            "HTTP 200 → succeeded\nok"
        )
        replayed = [
            r
            for r in receiver.for_path("/orders")
            if r.headers.get("x-relay-delivery-id") == xss_dlv
        ]
        assert [r.headers["x-relay-attempt"] for r in replayed] == ["1", "2", "3", "1"]
        assert len({r.headers["webhook-id"] for r in replayed}) == 1
        await page.click("#d-close")
        await expect(drawer).to_be_hidden()
        await expect(dead_card).to_have_text("1")

        # Endpoints: limits, success rate, then "recover all dead" for the orders endpoint.
        await page.click('.tabs a[data-view="endpoints"]')
        orders_row = page.locator(f'#endpoints tr[data-id="{ep_orders["id"]}"]')
        await expect(orders_row).to_contain_text("50/s")
        await expect(orders_row).to_contain_text("/ 10")
        await expect(orders_row.locator('[data-col="dead"]')).to_have_text("1")  # dead
        await expect(orders_row.locator(".rate")).to_contain_text("50%")
        await expect(orders_row.locator('[data-col="breaker"] .badge')).to_have_text("closed")
        await expect(page.locator('.card[data-key="succeeded"] .value')).to_have_text("26")
        await expect(page.locator('.card[data-key="delivering"] .value')).to_have_text("0")
        await page.screenshot(path=str(SHOTS / "endpoints.png"))
        await orders_row.locator("button", has_text="Recover dead").click()
        await orders_row.locator("button", has_text="Recover all dead").click()
        await expect(page.locator("#toast")).to_contain_text("Recovered 1 dead delivery")

        async def all_done() -> bool:
            c = await _counts(store)
            return c["dead"] == 0 and c["succeeded"] == 27

        await _wait_until(all_done, "the recovered delivery to succeed")
        await expect(orders_row.locator('[data-col="dead"]')).to_have_text("0")
        await expect(orders_row.locator(".rate")).to_contain_text("100%")
        await expect(dead_card).to_have_text("0")
        other = await store.get_delivery(other_event["deliveries"][0]["id"])
        assert other is not None and other["status"] == "succeeded"

        # Signing out forgets the token.
        await page.click("#signout")
        await expect(page.locator("#signin")).to_be_visible()
        assert await page.evaluate("sessionStorage.getItem('relay.token')") is None
        assert page_errors == []
        await context.close()
    finally:
        stop.set()
        await worker


# ---------------------------------------------------------------------- JSON reads


async def test_series_buckets_by_finish_minute(store) -> None:
    """Scores are finish times; a score on a minute's first ms belongs to that minute."""
    sk = store.keys.shard(0)
    now = 1_700_000_123_456
    minute = now // 60_000 * 60_000
    await store.redis.zadd(sk.succeeded, {"a": minute, "b": minute + 59_999, "c": minute - 1})
    await store.redis.zadd(sk.dead, {"d": minute - 29 * 60_000, "e": minute - 30 * 60_000})
    s = await ui.series(store, now)
    assert s["minute_ms"][-1] == minute and len(s["minute_ms"]) == 30
    assert s["succeeded"][-1] == 2 and s["succeeded"][-2] == 1 and sum(s["succeeded"]) == 3
    assert s["dead"][0] == 1 and sum(s["dead"]) == 1  # "e" is older than the window


async def test_type_filter_pages_through_everything(make_store, make_api, receiver) -> None:
    store = await make_store(shards=2)
    api = await make_api(store)
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/x"}) as r:
        assert r.status == 201
    wanted = set()
    for i in range(23):
        kind = "order.paid" if i % 3 == 0 else "invoice.issued"
        async with api("POST", "/v1/events", json={"type": kind, "payload": i}) as r:
            event = await r.json()
        if kind == "order.paid":
            wanted.add(event["deliveries"][0]["id"])
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"type": "order.*", "limit": "3", **({"cursor": cursor} if cursor else {})}
        async with api("GET", "/v1/ui/deliveries", params=params) as r:
            assert r.status == 200
            page = await r.json()
        assert len(page["data"]) <= 3
        assert {d["type"] for d in page["data"]} <= {"order.paid"}
        seen += [d["id"] for d in page["data"]]
        cursor = page["next_cursor"]
        pages += 1
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) and set(seen) == wanted and pages >= 3
    async with api("GET", "/v1/ui/deliveries", params={"type": "bad type!"}) as r:
        assert r.status == 422


async def test_ui_files_and_reads_need_what_they_should(make_store, make_api) -> None:
    store = await make_store()
    api = await make_api(store)
    async with api.session.get(api.url + "/ui", allow_redirects=False) as r:
        assert r.status == 302 and r.headers["Location"] == "/ui/"
    for path, kind in (
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/kit.js", "text/javascript"),
        ("/ui/epform.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ):
        async with api.session.get(api.url + path, headers={"Authorization": ""}) as r:
            assert r.status == 200 and r.content_type == kind
            assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    for path in ("/ui/index.html", "/ui/portal.js", "/ui/nope.js", "/ui/a/app.js"):
        async with api.session.get(api.url + path, headers={"Authorization": ""}) as r:
            assert r.status == 404 and (await r.json())["error"] == "not_found", path
    for path in ("/v1/ui/overview", "/v1/ui/endpoint-health", "/v1/ui/deliveries"):
        async with api.session.get(api.url + path, headers={"Authorization": ""}) as r:
            assert r.status == 401
    async with api("GET", "/v1/ui/overview") as r:
        body = orjson.loads(await r.read())
    assert ui.OverviewOut.model_validate(body).series.minute_ms[-1] <= body["server_time"]
    async with api("GET", "/v1/ui/deliveries/dlv_nope") as r:
        assert r.status == 404


def test_nothing_in_the_page_uses_innerhtml() -> None:
    """The escaping rule, checked at the source: data reaches the page as text only."""
    folder = Path(ui.__file__).parent.parent / "ui"
    scripts = sorted(folder.glob("*.js"))
    # Every module is reached from one of the two pages' entry modules (none left over),
    # and each is served to the side that imports it.
    reached: set[str] = set()
    for entry, side in (("app.js", "dash"), ("portal.js", "portal")):
        todo = [entry]
        while todo:
            name = todo.pop()
            assert ui.ui_file_kind(name, side) == "text/javascript", (side, name)
            if name not in reached:
                reached.add(name)
                todo += re.findall(
                    r'^import .* from "\./([\w.-]+)";$', (folder / name).read_text(), re.M
                )
    assert reached == {p.name for p in scripts}
    for script in scripts:
        code = "\n".join(
            line for line in script.read_text().splitlines() if not line.lstrip().startswith("//")
        )
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in code, (script.name, sink)
