"""The history archive in tests: a store with the archive on (its own PostgreSQL schema),
a world of finished deliveries, and reads through the API."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import orjson
from aiohttp import web

from relay.archive.tables import Tables
from relay.delivery.worker import Worker
from relay.ops.archiving import Mover
from relay.queue.store import Store
from tests.helpers import Receiver
from tests.helpers.api import call
from tests.helpers.worker import add_endpoint, publish

FAR = 10**13  # a "now" (ms) past any hot retention: the mover takes everything finished


def archive_overrides(pg: Any, **extra: Any) -> dict[str, Any]:
    """Settings of a store with the archive on, in a schema of its own."""
    return {
        "archive_url": pg.dsn,
        "archive_schema": "t" + uuid.uuid4().hex[:12],
        "hot_retention": 2.0,
        "retry_schedule": (0.01,),
        "breaker_threshold": 10**6,  # the failing endpoint stays open to its retries
        **extra,
    }


def tables_of(store: Store) -> Tables:
    return Tables(store.settings.archive_url, store.settings.archive_schema)


async def mover_of(store: Store) -> Mover:
    mover = Mover(store, tables_of(store))
    await mover.tables.migrate()
    return mover


async def finished_world(store: Store, receiver: Receiver, events: int) -> dict[str, Any]:
    """``events`` events, each to an endpoint that answers 200 and one that answers 500
    (dead after its two attempts), delivered by a burst worker: ``2 * events`` finished."""
    receiver.responses["/bad"] = lambda r: web.Response(status=500)
    ok = await add_endpoint(store, receiver.url + "/ok")
    bad = await add_endpoint(store, receiver.url + "/bad")
    sent = []
    for i in range(events):
        payload = {"n": i, "customer": {"id": i % 7}, "note": "x" * 32}
        sent.append(await publish(store, ok["id"], bad["id"], payload=payload))
    await finish(store, 2 * events)
    return {"ok": ok["id"], "bad": bad["id"], "events": sent}


async def finish(store: Store, total: int) -> None:
    """Run burst workers until ``total`` deliveries are finished in Redis (retries come
    due); a deadline, not a timing assertion."""
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, (await store.stats())["counts"]
        await asyncio.wait_for(Worker(store, store.settings).run(asyncio.Event(), burst=True), 120)
        counts = (await store.stats())["counts"]
        if counts["succeeded"] + counts["dead"] >= total:
            return
        await asyncio.sleep(0.02)


async def list_all(api: Any, path: str = "/v1/deliveries", **params: Any) -> list[dict[str, Any]]:
    """Every page of a listing, in order."""
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {k: str(v) for k, v in params.items()}
        if cursor:
            query["cursor"] = cursor
        status, page = await call(api, "GET", path, params=query)
        assert status == 200, page
        rows += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            return rows


async def read(api: Any, path: str) -> Any:
    status, data = await call(api, "GET", path)
    assert status == 200, (path, data)
    return orjson.loads(orjson.dumps(data, option=orjson.OPT_SORT_KEYS))
