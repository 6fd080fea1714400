"""Broker endpoints in the dashboard, in the real headless Chromium: an ``amqp://``,
``nats://`` and ``redis://`` endpoint each show in the endpoints view and on their own
page with the password masked, and no password reaches the page; a publish the broker
acknowledged shows in a delivery's attempt log as a success.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay.delivery.attempt import outcome
from relay.domain.destinations import MASK
from tests.helpers.browser import UI_TIMEOUT_MS, chromium, sign_in, watch
from tests.helpers.store import claim, publish

pytestmark = pytest.mark.realredis

SECRETS = ("amqpPw-7f3a", "natsPw-91c2", "redisPw-44d0")
URLS = (
    f"amqp://relay:{SECRETS[0]}@127.0.0.1:5672/%2F?exchange=orders&routing_key=o.{{type}}",
    f"nats://relay:{SECRETS[1]}@127.0.0.1:4222/orders.{{type}}",
    f"redis://:{SECRETS[2]}@127.0.0.1:6390/0?stream=orders&maxlen=1000",
)


async def test_broker_endpoints_show_masked_credentials(make_store: Any, make_api: Any) -> None:
    from playwright.async_api import expect

    expect.set_options(timeout=UI_TIMEOUT_MS)
    store = await make_store()
    api = await make_api(store)
    created = []
    for url in URLS:
        async with api("POST", "/v1/endpoints", json={"url": url}) as r:
            assert r.status == 201, await r.text()
            created.append(dict(await r.json()))
    for ep, secret in zip(created, SECRETS, strict=True):
        assert secret not in ep["url"] and MASK in ep["url"]

    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": 1366, "height": 768})
        page = await context.new_page()
        seen = watch(page)
        await sign_in(page, api.url)
        await page.click('.tabs a[data-view="endpoints"]')
        for ep in created:
            row = page.locator(f'#endpoints tr[data-id="{ep["id"]}"]')
            await expect(row.locator(".ep-link")).to_have_text(ep["url"])
        content = await page.content()
        assert all(secret not in content for secret in SECRETS)

        for ep in created:
            await page.goto(api.url + f"/ui/#/endpoint/{ep['id']}")
            await expect(page.locator("#ep-title")).to_have_text(ep["url"])
            content = await page.content()
            assert all(secret not in content for secret in SECRETS)
        assert seen["errors"] == []
        await context.close()


async def test_an_acknowledged_publish_shows_as_a_success(make_store: Any, make_api: Any) -> None:
    """In the dashboard's deliveries table and attempt log, and the portal's deliveries.
    Fails with the result judged by the status code alone: "—" in the tables, "no
    answer" in the error colour in the log."""
    from playwright.async_api import expect

    expect.set_options(timeout=UI_TIMEOUT_MS)
    store = await make_store()
    api = await make_api(store)
    async with api("POST", "/v1/endpoints", json={"url": URLS[1]}) as r:
        assert r.status == 201, await r.text()
        ep = dict(await r.json())
    await publish(store, [ep["id"]])
    (c,) = (await claim(store)).items
    acked = outcome(c, "succeeded", 0, None, "", "stream orders seq 7", worker="w1", at_ms=1)
    assert await store.record(store.keys.shard(0), [acked]) == [1]

    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": 1366, "height": 768})
        page = await context.new_page()
        seen = watch(page)
        await sign_in(page, api.url)
        row = page.locator(f'#deliveries tr[data-id="{c.id}"]')
        await expect(row.locator("td:nth-child(6)")).to_have_text("acknowledged")
        await row.click()
        await expect(page.locator("#drawer")).to_be_visible()
        result = page.locator("#d-log tbody tr td:nth-child(5)")
        await expect(result).to_have_count(1)
        assert (
            await result.inner_text()
        ).strip() == "acknowledged → succeeded\nstream orders seq 7"
        assert await result.locator(".err-text").count() == 0

        # the consumer portal's deliveries list says the same
        async with api("POST", "/v1/apps/default/portal") as r:
            assert r.status == 201, await r.text()
            session = dict(await r.json())
        await page.goto(session["url"])
        cell = page.locator(f'#p-deliveries tr[data-id="{c.id}"] td:nth-child(4)')
        await expect(cell).to_have_text("acknowledged")
        assert seen["errors"] == []
        await context.close()
