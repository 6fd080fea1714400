"""One tenant cannot slow another: hostile filters and schemas stay within their budgets.

A ``relay api`` process on the session's redis-server; app H (an app key with publish and
manage) sets the adversarial run's filters on its endpoints and publishes, while app B
publishes through a filter of its own and ``/healthz`` is polled. B and ``/healthz``
stay fast, H's publishes come back with the endpoints left out by their budgets and
the reasons recorded (its schema-bound publish a 422), and the API's memory stays flat.

Fails where tenant logic runs inline: the regex filter is accepted at write, B's
publishes and ``/healthz`` wait behind H's, and the memory filter grows the API itself.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from relay.sandbox.work import FILTER_SECONDS
from tests.helpers.hostile import (
    MEMORY_FILTER,
    MEMORY_PAYLOAD,
    SLOW_FILTER,
    SLOW_SCHEMA,
    SLOW_SCHEMA_PAYLOAD,
    regex_filter,
    start_api,
    status_bytes,
    tail,
)

pytestmark = pytest.mark.realredis

ADMIN = "admin-token"
STALL = 1.5  # generous: "not stalled" (unbudgeted, these requests waited 6-10 s)
MAX_GROWTH = 300 * 1024 * 1024


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(p) for p in f.read().split()]
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


class Client:
    def __init__(self, url: str, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        timeout = aiohttp.ClientTimeout(total=120)
        self.url, self.session = url, aiohttp.ClientSession(headers=headers, timeout=timeout)

    async def call(self, method: str, path: str, **kw: Any) -> tuple[int, Any, float]:
        started = time.monotonic()
        async with self.session.request(method, self.url + path, **kw) as r:
            body = await r.json()
            return r.status, body, time.monotonic() - started


async def app_key(admin: Client, app: str) -> Client:
    status, made, _ = await admin.call(
        "POST", "/v1/api-keys", json={"app": app, "scopes": ["publish", "manage", "read"]}
    )
    assert status == 201, made
    return Client(admin.url, made["token"])


async def endpoint(client: Client, event_types: list[str], text: str | None) -> str:
    body = {"url": "http://127.0.0.1:9/hook", "event_types": event_types, "filter": text}
    status, made, _ = await client.call("POST", "/v1/endpoints", json=body)
    assert status == 201, made
    return str(made["id"])


async def test_one_tenant_cannot_slow_another(redis_server: Any, tmp_path: Path) -> None:
    log = tmp_path / "api.log"
    proc, url = await start_api(redis_server.url, ADMIN, log, prefix="tb")
    admin = Client(url, ADMIN)
    clients = [admin]
    try:
        h, b = await app_key(admin, "H"), await app_key(admin, "B")
        clients += [h, b]
        slow = await endpoint(h, ["order.*"], SLOW_FILTER)
        hungry = await endpoint(h, ["bulk.*"], MEMORY_FILTER)
        plain = await endpoint(h, ["*"], None)
        await endpoint(b, ["*"], "payload.n >= 0")
        status, made, _ = await admin.call(
            "POST", "/v1/event-types", json={"name": "bulk.import", "schema": SLOW_SCHEMA}
        )
        assert status == 201, made
        for _ in range(3):  # the sandbox's children up
            status, _, _ = await b.call(
                "POST", "/v1/events", json={"type": "t.x", "payload": {"n": 0}}
            )
            assert status == 201

        before = status_bytes(proc.pid, "VmRSS")
        attacking = True
        b_times: list[float] = []
        health_times: list[float] = []
        h_answers: list[tuple[str, int, Any]] = []

        async def attack() -> None:
            nonlocal attacking
            try:
                for _ in range(2):
                    for kind, event in (
                        ("slow", {"type": "order.paid", "payload": {"n": 1}}),
                        ("memory", {"type": "bulk.load", "payload": MEMORY_PAYLOAD}),
                        ("schema", {"type": "bulk.import", "payload": SLOW_SCHEMA_PAYLOAD}),
                    ):
                        status, answer, _ = await h.call("POST", "/v1/events", json=event)
                        h_answers.append((kind, status, answer))
            finally:
                attacking = False

        async def victim() -> None:
            n = 0
            while attacking:
                n += 1
                event = {"type": "order.paid", "payload": {"n": n}}
                status, answer, took = await b.call("POST", "/v1/events", json=event)
                assert status == 201 and len(answer["deliveries"]) == 1, answer
                b_times.append(took)
                await asyncio.sleep(0.02)

        async def health() -> None:
            async with aiohttp.ClientSession() as s:
                while attacking:
                    started = time.monotonic()
                    async with s.get(url + "/healthz") as r:
                        assert r.status == 200
                    health_times.append(time.monotonic() - started)
                    await asyncio.sleep(0.02)

        await asyncio.gather(attack(), victim(), health())
        grown = status_bytes(proc.pid, "VmHWM") - before

        assert b_times and health_times
        assert max(b_times) < STALL, sorted(b_times)[-5:]
        assert max(health_times) < STALL, sorted(health_times)[-5:]
        assert grown < MAX_GROWTH, f"the API's peak RSS grew by {grown >> 20} MiB"
        # H's own wall time is not bounded by a budget: each of its publishes after a
        # costly one first waits for the child that one cost to be replaced, so only the
        # reasons show that the budgets cut its work short.
        for kind, status, answer in h_answers:
            if kind == "schema":
                assert status == 422 and answer["error"] == "schema_budget_exceeded", answer
                assert "time budget (1 s)" in answer["message"]
                continue
            assert status == 201, answer
            assert [d["endpoint_id"] for d in answer["deliveries"]] == [plain]
            (left_out,) = answer["filtered"]
            if kind == "slow":
                assert left_out["endpoint_id"] == slow
                assert left_out["reason"].startswith("filter exceeded its time budget (1 s")
            else:
                # Which of its budgets the memory filter meets first depends on the
                # machine's speed: beside a busy test run its time runs out before its
                # memory does. Either leaves it out, and the API's own memory is checked
                # above; the memory budget's own blame is test_sandbox's
                # test_a_filter_past_the_memory_budget_is_left_out.
                assert left_out["endpoint_id"] == hungry
                assert left_out["reason"] in (
                    "filter exceeded its memory budget (256 MiB)",
                    "filter exceeded its time budget (1 s, shared by the filters of a publish)",
                ), left_out
            status, event, _ = await h.call("GET", f"/v1/events/{answer['id']}")
            assert status == 200 and event["filtered"] == answer["filtered"]
        # the run's own regex filters are refused at write, with the reason
        for n in (100, 880):
            body = {"url": "http://127.0.0.1:9/hook", "filter": regex_filter(n)}
            status, refused, _ = await h.call("POST", "/v1/endpoints", json=body)
            assert status == 422 and refused["error"] == "filter_invalid", refused
            assert "too large for RE2" in refused["message"]
    finally:
        for c in clients:
            await c.session.close()
        kids = children(proc.pid) if proc.returncode is None else []
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 30)
    assert code == 0, tail(log)
    assert kids, "the API started no evaluator"
    await asyncio.sleep(0.5)
    assert not [k for k in kids if alive(k)], "an evaluator outlived the API"


async def test_a_slow_app_does_not_delay_another_apps_filtered_publish(
    make_store: Any, make_api: Any
) -> None:
    """In one API process (this test's event loop): three of H's publishes queue behind
    each other in the sandbox, one child at most, and B's filtered publishes keep
    completing, judged by the other child."""
    api = await make_api(await make_store(allow_private_networks=True))

    async def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        async with api("POST", path, json=body) as r:
            return r.status, await r.json()

    hook = "http://127.0.0.1:9/hook"
    for app, text in (("H", SLOW_FILTER), ("B", "payload.n >= 0")):
        status, made = await post("/v1/endpoints", {"url": hook, "app": app, "filter": text})
        assert status == 201, made
    assert (await post("/v1/events", {"type": "o.p", "app": "B", "payload": {"n": 0}}))[0] == 201
    started = time.monotonic()
    hostile = asyncio.gather(
        *(post("/v1/events", {"type": "o.p", "app": "H", "payload": {}}) for _ in range(3))
    )
    done_at = [started]
    while not hostile.done():  # B's completions, one after the other, all along
        status, answer = await post(
            "/v1/events", {"type": "o.p", "app": "B", "payload": {"n": len(done_at)}}
        )
        assert status == 201 and len(answer["deliveries"]) == 1, answer
        done_at.append(time.monotonic())
        await asyncio.sleep(0.02)
    gaps = [b - a for a, b in itertools.pairwise(done_at)]
    assert max(gaps) < STALL, f"B waited {max(gaps):.1f} s between two publishes"
    assert done_at[-1] - started > 2 * FILTER_SECONDS  # H's three took their budgets
    for status, answer in await hostile:
        assert status == 201 and answer["deliveries"] == [], answer
        assert answer["filtered"][0]["reason"].startswith("filter exceeded its time budget")
