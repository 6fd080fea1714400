"""Store contract helpers; ``backend``/``st`` run a test on fakeredis and on real Redis."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from relay.domain import eventrecord, ids
from relay.domain.schema import endpoint_record
from relay.queue.store import Outcome, Store
from tests.helpers import publish_event


@pytest.fixture(params=["fake", "real"])
def backend(request: pytest.FixtureRequest) -> Any:
    # The fixture functions are async; resolving them here (outside the loop) keeps one
    # parametrized suite for both backends.
    if request.param == "fake":
        return request.getfixturevalue("fake_store")
    return request.getfixturevalue("make_store")


@pytest.fixture
async def st(backend: Any) -> Store:
    return backend if isinstance(backend, Store) else await backend()


async def add_endpoint(store: Store, app: str = "default", **extra: Any) -> dict[str, Any]:
    ep = endpoint_record(url="http://127.0.0.1:9/x", app=app)
    ep.update(extra)  # as given: a test may store what the API would refuse
    await store.put_endpoint(ep)
    return ep


async def publish(
    store: Store,
    endpoint_ids: list[str],
    *,
    idem: tuple[str, bytes] | None = None,
    created_ms: int | None = None,
    shard: int = 0,
    event_type: str = "order.paid",
) -> tuple[str, list[str], str | None]:
    return await publish_event(
        store,
        endpoint_ids,
        shard=shard,
        event_type=event_type,
        created_ms=created_ms,
        idempotency=idem,
    )


def outcome(
    c: Any, kind: str, delay_ms: int = 0, code: int | None = 200, token: str = ""
) -> Outcome:
    entry = orjson.dumps({"attempt": c.attempts, "at": 1, "status_code": code, "worker": "w1"})
    return Outcome(c.id, token or c.token, kind, delay_ms, code, "" if code == 200 else "x", entry)


_calls = itertools.count()


async def claim(store: Store, limit: int = 10, lease_ms: int = 60_000, tag: str = "c") -> Any:
    # the token prefix is unique per claim call, as the worker makes it
    sk = store.keys.shard(0)
    prefix = f"{tag}:{next(_calls)}"
    return await store.claim(sk, limit=limit, lease_ms=lease_ms, token_prefix=prefix, worker="w1")


async def h(store: Store, delivery_id: str) -> dict[str, str]:
    return await store.redis.hgetall(store.keys.shard(0).delivery(delivery_id))


async def log(store: Store, delivery_id: str) -> list[dict[str, Any]]:
    raw = await store.redis.lrange(store.keys.shard(0).log(delivery_id), 0, -1)
    return [orjson.loads(x) for x in raw]


async def zmembers(store: Store, key: str) -> dict[str, float]:
    return dict(await store.redis.zrange(key, 0, -1, withscores=True))


async def stored_event(st: Store, endpoints: list[str], **kw: Any) -> str:
    """An event written as eventrecord.pack writes it, its deliveries due now."""
    sk = st.keys.shard(0)
    event_id = ids.new_event_id()
    deliveries = [(ids.delivery_id(event_id, i), e) for i, e in enumerate(endpoints)]
    value = eventrecord.pack(
        event_id=event_id,
        event_type=kw.get("event_type", "order.paid"),
        app=kw.get("app", "default"),
        created_ms=kw.get("created_ms", ids.created_ms(event_id) or 0),
        max_attempts=kw.get("max_attempts", 7),
        deliveries=deliveries,
        body=b'{"data":{"n":1}}',
        trace=kw.get("trace", ""),
        filtered=kw.get("filtered", ()),
    )
    await st.redis.set(sk.event(event_id), value.decode("utf-8", "surrogateescape"))
    await st.redis.zadd(sk.due, {d: 0 for d, _ in deliveries})
    return event_id
