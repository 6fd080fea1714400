"""An app's key through the Svix-compatible API: every ``/api/v1`` route that names an
application (taken from ``/openapi.json``), called with the key of another app, every
scope held, answers the 404 a missing one gets, reveals nothing and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import Receiver

pytestmark = pytest.mark.realredis

A = "/api/v1/app"


UNKNOWN_EP = "ep_01M8NRGJEW00N08E236MWQ75WB"
UNKNOWN_EVT = "evt_01M8NRGJEW00N08E236MWQ75WB"


def masked(answer: Any, *ids: str) -> str:
    text = str(answer)
    for ident in ids:
        text = text.replace(ident, "<id>")
    return text


async def call(api: Any, method: str, path: str, **kw: Any) -> tuple[int, Any]:
    async with api.session.request(method, api.url + path, **kw) as r:
        return r.status, await r.json() if r.content_type == "application/json" else None


async def test_another_apps_key_finds_nothing(
    make_store: Any, make_api: Any, receiver: Receiver
) -> None:
    api = await make_api(await make_store())
    for uid in ("shop", "rival"):
        assert (await call(api, "POST", A, json={"name": uid, "uid": uid}))[0] == 201
    status, ep = await call(api, "POST", f"{A}/shop/endpoint", json={"url": receiver.url})
    assert status == 201
    sent = {"eventType": "order.paid", "payload": {"n": 1}, "eventId": "e-1"}
    status, msg = await call(api, "POST", f"{A}/shop/msg", json=sent)
    assert status == 202
    scopes = ["publish", "read", "manage"]
    status, key = await call(api, "POST", "/v1/api-keys", json={"app": "rival", "scopes": scopes})
    assert status == 201
    rival = {"Authorization": f"Bearer {key['token']}"}
    status, doc = await call(api, "GET", "/openapi.json")
    assert status == 200

    before = await call(api, "GET", f"{A}/shop/endpoint/{ep['id']}")
    tried = 0
    for path, ops in doc["paths"].items():
        if "{app_id}" not in path:
            continue
        for method, op in ops.items():
            content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            examples = content.get("examples") or {}
            body = next(iter(examples.values()))["value"] if examples else None
            for app in ("shop", "rival"):  # A's app, or B's app with A's ids
                where = path.replace("{app_id}", app).replace("{endpoint_id}", ep["id"])
                where = where.replace("{msg_id}", msg["id"]).replace("{attempt_id}", "atmpt_x_1")
                if where == path.replace("{app_id}", "rival"):
                    continue  # nothing of A's in it: B's own app
                status, data = await call(api, method.upper(), where, json=body, headers=rival)
                assert (status, data["code"]) == (404, "not_found"), (method, where, data)
                # the very answer ids that do not exist get
                missing = where.replace(ep["id"], UNKNOWN_EP).replace(msg["id"], UNKNOWN_EVT)
                _, alike = await call(api, method.upper(), missing, json=body, headers=rival)
                assert masked(data, ep["id"], msg["id"]) == masked(alike, UNKNOWN_EP, UNKNOWN_EVT)
                tried += 1
    assert tried > 25
    status, listed = await call(api, "GET", A, headers=rival)
    assert [a["id"] for a in listed["data"]] == ["rival"]
    assert await call(api, "GET", f"{A}/shop/endpoint/{ep['id']}") == before
    status, kept = await call(api, "GET", f"{A}/shop/msg?with_content=true")
    assert [m["id"] for m in kept["data"]] == [msg["id"]]


async def test_a_refused_query_and_body_name_their_place_as_svix_does(
    make_store: Any, make_api: Any
) -> None:
    """A 422 locates the refused field under ``query`` or ``body``: the SDKs read ``loc``."""
    api = await make_api(await make_store())
    assert (await call(api, "POST", A, json={"name": "shop", "uid": "shop"}))[0] == 201
    status, answer = await call(api, "GET", f"{A}/shop/msg?limit=many")
    assert status == 422, answer
    assert [d["loc"] for d in answer["detail"]] == [["query", "limit"]]
    status, answer = await call(api, "POST", f"{A}/shop/msg", json={"eventType": 5, "payload": {}})
    assert status == 422, answer
    assert [d["loc"] for d in answer["detail"]] == [["body", "eventType"]]
