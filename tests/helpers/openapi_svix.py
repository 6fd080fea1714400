"""Every answer the OpenAPI document lists for ``/api/v1`` (the Svix-compatible API),
produced by a request: ``tests/system/test_openapi.py`` calls :func:`svix_answers` with
its checker, which holds each answer to the document."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

UNKNOWN_EP = "ep_01M8NRGJEW00N08E236MWQ75WB"
UNKNOWN_EVT = "evt_01M8NRGJEW00N08E236MWQ75WB"
A = "/api/v1"
JSON = {"Content-Type": "application/json"}

Check = Callable[..., Awaitable[Any]]


def concrete(path: str, name: str = "no.such.type") -> str:
    """``path`` with ids of things that do not exist (the app ``default`` has no
    application record, so every ``/api/v1/app/{app_id}`` route answers 404 for it)."""
    for param, value in (
        ("{id}", UNKNOWN_EP),
        ("{app}", "default"),
        ("{name}", name),
        ("{app_id}", "default"),
        ("{endpoint_id}", UNKNOWN_EP),
        ("{msg_id}", UNKNOWN_EVT),
        ("{attempt_id}", "atmpt_none_1"),
        ("{event_type_name}", name),
    ):
        path = path.replace(param, value)
    return path


def _example(op: dict[str, Any]) -> dict[str, Any]:
    content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    examples = content.get("examples") or {}
    return {"json": next(iter(examples.values()))["value"]} if examples else {}


async def svix_answers(
    check: Check, anon: Any, big: bytes, url: str, doc: dict[str, Any], deliver: Any
) -> None:
    """Each documented status of each ``/api/v1`` operation. ``deliver()`` runs a worker
    until nothing is due; ``url`` is a receiver that answers 200."""
    ops = [
        (m.upper(), p, op)
        for p, o in doc["paths"].items()
        if p.startswith(A + "/")
        for m, op in o.items()
    ]
    for method, path, op in ops:  # no token; another app's (or no) application
        await check(method, path, 401, path=concrete(path), session=anon)
        if "404" in op["responses"] and (method, path) != ("PUT", A + "/app/{app_id}"):
            await check(method, path, 404, path=concrete(path), **_example(op))

    # applications
    col, one = A + "/app", A + "/app/{app_id}"
    await check(
        "POST", col, 201, json={"name": "Shop", "uid": "shop"}, headers={"idempotency-key": "a1"}
    )
    await check(
        "POST", col, 409, json={"name": "Else", "uid": "shop"}, headers={"idempotency-key": "a1"}
    )
    await check(
        "POST", col, 200, path=col + "?get_if_exists=true", json={"name": "S", "uid": "shop"}
    )
    await check("GET", col, 200)
    await check("GET", one, 200, path=col + "/shop")
    await check("PUT", one, 200, path=col + "/shop", json={"name": "Shop"})
    await check("PUT", one, 201, path=col + "/spare", json={"name": "Spare"})
    await check("PATCH", one, 200, path=col + "/shop", json={"metadata": {"tier": "1"}})
    await check("DELETE", one, 204, path=col + "/spare")
    key = await check("POST", "/v1/api-keys", 201, json={"app": "other", "scopes": ["manage"]})
    other = {"Authorization": f"Bearer {key['token']}"}  # PUT: another app's is missing
    await check("PUT", one, 404, path=col + "/shop", json={"name": "S"}, headers=other)

    # endpoints
    eps, ep_one = one + "/endpoint", one + "/endpoint/{endpoint_id}"
    made = await check(
        "POST", eps, 201, path=col + "/shop/endpoint", headers={"idempotency-key": "e1"},
        json={"url": url + "/svix", "eventTypes": ["order.paid"]},
    )  # fmt: skip
    await check(
        "POST", eps, 409, path=col + "/shop/endpoint", headers={"idempotency-key": "e1"},
        json={"url": url + "/else"},
    )  # fmt: skip
    spare = await check("POST", eps, 201, path=col + "/shop/endpoint", json={"url": url + "/x"})
    ep = f"{col}/shop/endpoint/{made['id']}"
    await check("GET", eps, 200, path=col + "/shop/endpoint")
    await check("GET", ep_one, 200, path=ep)
    await check(
        "PUT", ep_one, 200, path=ep, json={"url": url + "/svix", "eventTypes": ["order.paid"]}
    )
    await check("PATCH", ep_one, 200, path=ep, json={"description": "orders"})
    await check("DELETE", ep_one, 204, path=f"{col}/shop/endpoint/{spare['id']}")
    await check("GET", ep_one + "/headers", 200, path=ep + "/headers")
    await check(
        "PUT", ep_one + "/headers", 204, path=ep + "/headers", json={"headers": {"x-a": "1"}}
    )
    await check("PATCH", ep_one + "/headers", 204, path=ep + "/headers", json={"headers": {}})
    await check("GET", ep_one + "/secret", 200, path=ep + "/secret")
    signed = await check(
        "POST", "/v1/endpoints", 201, json={"url": url, "app": "shop", "signing": "ed25519"}
    )
    await check("GET", ep_one + "/secret", 422, path=f"{col}/shop/endpoint/{signed['id']}/secret")
    rotate = ep_one + "/secret/rotate"
    await check(
        "POST", rotate, 200, path=ep + "/secret/rotate", json={}, headers={"idempotency-key": "r1"}
    )
    await check("POST", rotate, 409, path=ep + "/secret/rotate", headers={"idempotency-key": "r1"})
    await check("POST", rotate, 429, path=ep + "/secret/rotate")
    recover, since = ep_one + "/recover", {"since": "2026-01-01T00:00:00Z"}
    await check(
        "POST", recover, 202, path=ep + "/recover", json=since, headers={"idempotency-key": "v1"}
    )
    await check(
        "POST",
        recover,
        409,
        path=ep + "/recover",
        json={**since, "until": None},
        headers={"idempotency-key": "v1"},
    )

    # event types
    ets, et = A + "/event-type", A + "/event-type/{event_type_name}"
    schema = {"1": {"type": "object", "required": ["n"]}}
    paid = {"name": "order.paid", "description": "paid", "schemas": schema}
    await check("POST", ets, 201, json=paid, headers={"idempotency-key": "t1"})
    await check("POST", ets, 409, json=paid)
    await check("GET", ets, 200)
    await check("GET", et, 200, path=ets + "/order.paid")
    await check(
        "PUT", et, 200, path=ets + "/order.paid", json={"description": "paid", "schemas": schema}
    )
    await check("PUT", et, 201, path=ets + "/svix.spare", json={"description": "spare"})
    await check("PATCH", et, 200, path=ets + "/order.paid", json={"deprecated": False})
    await check("DELETE", et, 204, path=ets + "/svix.spare")
    await check("DELETE", et, 409, path=ets + "/order.paid")  # the endpoint subscribes by name

    # messages, attempts
    msgs, msg = one + "/msg", one + "/msg/{msg_id}"
    sent = {"eventType": "order.paid", "eventId": "m1", "payload": {"n": 1}}
    m = await check("POST", msgs, 202, path=col + "/shop/msg", json=sent)
    await check("POST", msgs, 409, path=col + "/shop/msg", json={**sent, "payload": {"n": 2}})
    await deliver()
    m_path = f"{col}/shop/msg/{m['id']}"
    await check("GET", msgs, 200, path=col + "/shop/msg")
    await check("GET", msgs, 400, path=col + "/shop/msg?iterator=bogus")
    await check("GET", msg, 200, path=col + "/shop/msg/m1")
    tried = await check(
        "GET", one + "/attempt/msg/{msg_id}", 200, path=f"{col}/shop/attempt/msg/{m['id']}"
    )
    by_ep = one + "/attempt/endpoint/{endpoint_id}"
    await check("GET", by_ep, 200, path=f"{col}/shop/attempt/endpoint/{made['id']}")
    await check("GET", by_ep, 400, path=f"{col}/shop/attempt/endpoint/{made['id']}?iterator=x")
    await check(
        "GET", msg + "/attempt/{attempt_id}", 200, path=f"{m_path}/attempt/{tried['data'][0]['id']}"
    )
    await check("GET", msg + "/endpoint", 200, path=m_path + "/endpoint")
    ep_msgs = ep_one + "/msg"
    await check("GET", ep_msgs, 200, path=ep + "/msg")
    await check("GET", ep_msgs, 400, path=ep + "/msg?iterator=bogus")
    resend = msg + "/endpoint/{endpoint_id}/resend"
    again = f"{m_path}/endpoint/{made['id']}/resend"
    await check("POST", resend, 202, path=again, headers={"idempotency-key": "s1"})
    await check("POST", resend, 409, path=again)  # pending again: not replayable

    # portal access
    portal = A + "/auth/app-portal-access/{app_id}"
    here = A + "/auth/app-portal-access/shop"
    await check("POST", portal, 200, path=here, headers={"idempotency-key": "p1"})
    await check("POST", portal, 409, path=here, json={}, headers={"idempotency-key": "p1"})
    await check("POST", portal, 400, path=here, headers={"Host": "relay.example.com"})

    # malformed requests, on things that exist
    real = {"{app_id}": "shop", "{endpoint_id}": made["id"], "{msg_id}": m["id"]}
    real["{event_type_name}"] = "order.paid"
    for method, path, op in ops:
        where = path
        for param, value in real.items():
            where = where.replace(param, value)
        params = {p["in"] for p in op.get("parameters", [])}
        if "requestBody" in op:
            await check(method, path, 400, path=where, data=b"{", headers=JSON)
            await check(method, path, 413, path=where, data=big, headers=JSON)
            await check(method, path, 422, path=where, json={"bogus": 1})
        elif "query" in params:
            await check(method, path, 422, path=where + "?bogus=1")
        elif "header" in params:
            await check(method, path, 422, path=where, headers={"idempotency-key": ""})
    await check("DELETE", one, 204, path=col + "/shop")
