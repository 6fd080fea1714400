"""Secret rotation and custom headers, from the API to what the receiver gets.

Endpoints are made and rotated over HTTP; an in-process worker delivers to the local
``receiver``; signatures are checked with the ``standardwebhooks`` package.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from relay.domain.schema import RESERVED_HEADERS
from relay.domain.signing import secret_bytes, signed_headers
from relay.endpoints.lifecycle import ROTATION_GRACE_MS
from tests.helpers.pacing import deliver_one

pytestmark = pytest.mark.realredis


async def test_rotation_signs_with_both_secrets_then_only_the_new(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/hook"}) as r:
        assert r.status == 201
        ep = await r.json()
    old = ep["secret"]
    async with api("POST", f"/v1/endpoints/{ep['id']}/rotate-secret") as r:
        assert r.status == 200
        new = (await r.json())["secret"]
    assert new != old and new.startswith("whsec_")
    async with api("GET", f"/v1/endpoints/{ep['id']}") as r:
        shown = await r.json()
    assert "secret" not in shown and "previous_secrets" not in shown
    stored = await store.get_endpoint(ep["id"])
    assert stored is not None
    (grace,) = stored["previous_secrets"]
    assert grace["secret"] == old
    assert abs(grace["expires_at"] - (time.time() * 1000 + ROTATION_GRACE_MS)) < 60_000

    req = await deliver_one(store, receiver, ep["id"])
    assert len(req.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):  # a verifier holding either secret accepts it
        Webhook(secret).verify(req.body, req.headers)

    stored["previous_secrets"] = [{**grace, "expires_at": int(time.time() * 1000) - 1}]
    await store.put_endpoint(stored)  # the grace period is over
    req = await deliver_one(store, receiver, ep["id"])
    assert len(req.headers["webhook-signature"].split(" ")) == 1
    Webhook(new).verify(req.body, req.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(req.body, req.headers)


async def test_custom_headers_arrive_and_cannot_override_relays_own(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    headers = {"X-Team": "payments", "Authorization": "Bearer for-the-receiver"}
    async with api(
        "POST", "/v1/endpoints", json={"url": receiver.url + "/h", "headers": headers}
    ) as r:
        assert r.status == 201
        ep = await r.json()
    for forged in ("webhook-signature", "Webhook-Signature", "WEBHOOK-ID", "x-relay-attempt"):
        body = {"url": receiver.url + "/h", "headers": {forged: "v1,forged"}}
        async with api("POST", "/v1/endpoints", json=body) as r:
            assert r.status == 422, forged
            assert (await r.json())["error"] == "validation_error"
        async with api("PATCH", f"/v1/endpoints/{ep['id']}", json=body) as r:
            assert r.status == 422, forged

    req = await deliver_one(store, receiver, ep["id"])
    assert req.headers["X-Team"] == "payments"
    assert req.headers["Authorization"] == "Bearer for-the-receiver"
    Webhook(ep["secret"]).verify(req.body, req.headers)

    # Stored JSON that slipped past validation: the signing layer still drops them.
    stored = await store.get_endpoint(ep["id"])
    assert stored is not None
    stored["headers"] = {
        "Webhook-Signature": "v1,forged",
        "webhook-id": "msg_forged",
        "X-Relay-Attempt": "99",
        "X-Team": "payments",
    }
    await store.put_endpoint(stored)
    out = signed_headers(
        secret_keys=[secret_bytes(stored["secret"])],
        msg_id="evt_x",
        timestamp=int(time.time()),
        body=b"{}",
        delivery_id="dlv_x",
        attempt=1,
        user_agent="relay/test",
        extra=stored["headers"],
    )
    assert sorted(k for k in out if k.lower() in RESERVED_HEADERS) == sorted(
        k for k in out if k.islower() and k in RESERVED_HEADERS
    )  # the signing layer itself keeps only relay's own spelling of its headers
    assert "forged" not in str(out) and out["x-relay-attempt"] == "1"
    req = await deliver_one(store, receiver, ep["id"])
    names = [k.lower() for k in req.headers]  # the receiver keeps each name as sent
    for own in ("webhook-signature", "webhook-id", "x-relay-attempt"):
        assert names.count(own) == 1, own
    assert "forged" not in req.headers["webhook-signature"]
    assert req.headers["webhook-id"].startswith("evt_")
    assert req.headers["x-relay-attempt"] == "1"
    assert req.headers["X-Team"] == "payments"
    Webhook(ep["secret"]).verify(req.body, req.headers)
