"""Ordered delivery for operators: the API, the CLI and the validation.

Publish with an ``ordering_key`` to ``ordering: key, ordering_on_dead: block``; the
head goes dead; the blocked lane shows in the delivery reads, ``GET /v1/stats``,
``relay stats`` and ``relay blocked``; ``POST /v1/deliveries/{id}/discard`` and
``relay discard`` let the lane go on. Bad ordering input is a 422 that writes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.cli import as_json, cli
from tests.helpers.ordering_kit import dead_head

pytestmark = pytest.mark.realredis


async def test_block_discard_through_api_and_cli(make_store: Any, make_api: Any) -> None:
    store = await make_store()
    api = await make_api(store)
    body = {"url": "http://127.0.0.1:9/x", "ordering": "key", "ordering_on_dead": "block"}
    async with api("POST", "/v1/endpoints", json=body) as r:
        assert r.status == 201
        ep = await r.json()
    assert (ep["ordering"], ep["ordering_on_dead"]) == ("key", "block")
    async with api("PATCH", f"/v1/endpoints/{ep['id']}", json={"ordering": None}) as r:
        assert r.status == 422  # null is not an ordering
    async with api("PATCH", f"/v1/endpoints/{ep['id']}", json={"ordering": "endpoint"}) as r:
        assert r.status == 200 and (await r.json())["ordering"] == "endpoint"
    async with api("PATCH", f"/v1/endpoints/{ep['id']}", json={"ordering": "key"}) as r:
        assert r.status == 200 and (await r.json())["ordering_on_dead"] == "block"
    published = []
    for n in range(3):
        event = {"type": "order.paid", "payload": {"n": n}, "ordering_key": "order-1"}
        async with api("POST", "/v1/events", json=event) as r:
            assert r.status == 201
            published.append((await r.json())["deliveries"][0]["id"])
    a, b, c = published
    async with api("GET", f"/v1/deliveries/{b}") as r:
        read = await r.json()
    assert read["status"] == "queued" and read["lane"] == f"{ep['id']}:order-1"
    assert read["waiting"] == {"reason": "ordering_lane", "until": None}
    assert read["lane_head"] == a and read["lane_blocked"] is False
    await dead_head(store)
    async with api("GET", f"/v1/deliveries/{a}") as r:
        read = await r.json()
    assert read["status"] == "dead" and read["blocking"] is True and read["lane_blocked"]
    async with api("GET", "/v1/stats") as r:
        stats = await r.json()
    assert stats["blocked_lanes"] == 1 and stats["counts"]["queued"] == 2
    assert as_json(await cli(store, "stats", "--json"))["blocked_lanes"] == 1
    assert as_json(await cli(store, "blocked", "--json")) == [
        {"lane": f"{ep['id']}:order-1", "head": a, "shard": 0}
    ]
    async with api("GET", "/v1/deliveries?status=queued") as r:
        assert {d["id"] for d in (await r.json())["data"]} == {b, c}
    # discard: through the API, then the CLI
    async with api("POST", f"/v1/deliveries/{b}/discard") as r:
        assert r.status == 409 and (await r.json())["current_status"] == "queued"
    async with api("POST", f"/v1/deliveries/{a}/discard") as r:
        assert r.status == 202 and (await r.json())["status"] == "dead"
    async with api("GET", f"/v1/deliveries/{b}") as r:
        assert (await r.json())["status"] == "pending"
    await dead_head(store)
    refused = await cli(store, "discard", c)
    assert refused.exit_code == 1 and "not discarded: queued" in refused.output
    done = await cli(store, "discard", b)
    assert done.exit_code == 0, done.output
    assert "discarded" in done.output
    assert as_json(await cli(store, "blocked", "--json")) == []
    async with api("GET", f"/v1/deliveries/{c}") as r:
        assert (await r.json())["status"] == "pending"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/events", {"type": "t", "payload": 1, "ordering_key": ""}),
        ("/v1/events", {"type": "t", "payload": 1, "ordering_key": "x" * 201}),
        ("/v1/events", {"type": "t", "payload": 1, "ordering_key": "a\nb"}),
        ("/v1/events", {"type": "t", "payload": 1, "ordering_key": 5}),
        ("/v1/endpoints", {"url": "http://127.0.0.1:9/x", "ordering": "fifo"}),
        ("/v1/endpoints", {"url": "http://127.0.0.1:9/x", "ordering_on_dead": "wait"}),
    ],
)
async def test_bad_ordering_input_is_422(
    make_store: Any, make_api: Any, path: str, body: dict[str, Any]
) -> None:
    store = await make_store()
    api = await make_api(store)
    async with api("POST", path, json=body) as r:
        assert r.status == 422, await r.text()
    assert await store.list_endpoints() == []
    assert (await store.stats())["counts"]["pending"] == 0
