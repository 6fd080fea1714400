"""End to end on a real Redis: publish over HTTP, a worker delivers, signed."""

from __future__ import annotations

import asyncio

from standardwebhooks.webhooks import Webhook

from relay.delivery.worker import Worker


async def test_publish_deliver_verify(make_store, make_api, receiver) -> None:
    store = await make_store()
    api = await make_api(store)
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/hook"}) as r:
        assert r.status == 201
        endpoint = await r.json()
    async with api("POST", "/v1/events", json={"type": "order.paid", "payload": {"n": 1}}) as r:
        assert r.status == 201
        event = await r.json()
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, store.settings).run(stop))
    await receiver.wait_for(1)
    stop.set()
    await task
    req = receiver.requests[0]
    Webhook(endpoint["secret"]).verify(req.body, req.headers)
    assert req.headers["webhook-id"] == event["id"]
    async with api("GET", f"/v1/deliveries/{event['deliveries'][0]['id']}") as r:
        d = await r.json()
    assert d["status"] == "succeeded"
    assert [e["status_code"] for e in d["attempt_log"]] == [200]
