"""The destination contract, one scenario per function, run against each broker kind
(tests/system/test_destinations_*.py pass their kit from tests/helpers/brokers.py).

Each scenario runs the API and a worker in the test's process against the session's
relay Redis, and reads what arrived the way a consumer does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import structlog
from standardwebhooks.webhooks import Webhook

from relay.delivery.worker import Worker
from relay.domain.schema import EventIn, endpoint_record
from relay.ops import metrics
from relay.publishing import Publisher
from relay.queue.store import Store
from tests.helpers import waiting
from tests.helpers.api import call
from tests.helpers.brokers import PASSWORD, Got, Kit, unused_port

ROOT = Path(__file__).resolve().parents[2]
FAST = {
    "retry_schedule": (0.2,) * 100,  # about 20 s of retries: longer than any outage here
    "retry_jitter": 0.0,
    "breaker_cooldown": 0.2,
    "breaker_cooldown_max": 0.5,
    "http_timeout": 2.0,
}


def unique(prefix: str = "d") -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@contextlib.asynccontextmanager
async def running_worker(store: Store) -> AsyncIterator[Worker]:
    stop = asyncio.Event()
    worker = Worker(store, store.settings)
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


until = partial(waiting.until, within=60.0, every=0.05)


async def add(store: Store, url: str, **fields: Any) -> dict[str, Any]:
    endpoint = endpoint_record(url=url, **fields)
    await store.put_endpoint(endpoint)
    return endpoint


async def publish(
    store: Store, count: int, *, keys: int = 0, event_type: str = "order.paid"
) -> list[str]:
    """``count`` events (``ordering_key`` k0..k{keys-1} in turn when ``keys``); their ids."""
    publisher = Publisher(store)
    ids = []
    for n in range(count):
        key = f"k{n % keys}" if keys else None
        event = EventIn(type=event_type, payload={"n": n}, ordering_key=key)
        ids.append((await publisher.publish(event)).answer["id"])
    return ids


def verified(endpoint: dict[str, Any], got: list[Got]) -> list[dict[str, Any]]:
    """Each message's body, after the Standard Webhooks verifier accepted it."""
    hook = Webhook(endpoint["secret"])
    return [hook.verify(m.body, m.headers) for m in got]


async def deliveries(api: Any, endpoint_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"endpoint_id": endpoint_id, "limit": "200"} | (
            {"cursor": cursor} if cursor else {}
        )
        status, page = await call(api, "GET", "/v1/deliveries", params=params)
        assert status == 200, page
        out += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out


async def delivery(api: Any, delivery_id: str) -> dict[str, Any]:
    status, one = await call(api, "GET", f"/v1/deliveries/{delivery_id}")
    assert status == 200, one
    return one  # type: ignore[no-any-return]


async def all_in(api: Any, endpoint_id: str, status: str, count: int) -> bool:
    found = await deliveries(api, endpoint_id)
    return len(found) == count and all(d["status"] == status for d in found)


async def exactly_once(kit: Kit, store: Store, api: Any, count: int) -> None:
    """``count`` events arrive once each, verifiable, and the attempt log holds the
    broker's acknowledgement."""
    dest = unique()
    await kit.prepare(dest)
    endpoint = await add(store, kit.url(dest))
    acked = metrics.ATTEMPTS.classes.counts.get("acked", 0)
    async with running_worker(store):
        ids = await publish(store, count)
        await until(lambda: all_in(api, endpoint["id"], "succeeded", count))
    assert metrics.ATTEMPTS.classes.counts.get("acked", 0) - acked == count
    got = await kit.messages(dest)
    bodies = verified(endpoint, got)
    assert Counter(b["id"] for b in bodies) == Counter(ids)
    assert [m.headers["webhook-id"] for m in got] == [b["id"] for b in bodies]
    one = await delivery(api, (await deliveries(api, endpoint["id"]))[0]["id"])
    (entry,) = one["attempt_log"]
    assert entry["outcome"] == "succeeded" and entry["error"] is None, entry
    assert entry["detail"], entry  # the broker's answer
    # what the message carried beside its body, as the event page shows it
    status, page = await call(api, "GET", f"/v1/events/{ids[0]}", params={"expand": "deliveries"})
    assert status == 200, page
    sent = {h["name"]: h["value"] for h in page["deliveries"][0]["headers_sent"]}
    extra = {"nats": {"Nats-Msg-Id"}, "amqp": {"message_id", "content_type", "delivery_mode"}}
    assert set(sent) == {"webhook-id", "webhook-timestamp", "webhook-signature"} | extra.get(
        kit.kind, set()
    ), sent
    assert sent["webhook-id"] == ids[0] and sent["webhook-signature"] == "v1,…"
    # the endpoint's page counts each acknowledgement a success, with its latency
    status, stats = await call(api, "GET", f"/v1/endpoints/{endpoint['id']}/stats")
    assert status == 200, stats
    assert (stats["attempts"], stats["successes"], stats["failures_by"]) == (count, count, [])
    assert sum(b["count"] for b in stats["latency_ms"]["buckets"]) == count


async def outage(kit: Kit, store: Store, api: Any, count: int, seconds: float) -> None:
    """The broker stopped for ``seconds`` while events are published: attempts fail,
    are retried, and every event arrives once when it is back."""
    dest = unique()
    await kit.prepare(dest)
    endpoint = await add(store, kit.url(dest))
    async with running_worker(store):
        first = await publish(store, count // 2)
        await until(lambda: all_in(api, endpoint["id"], "succeeded", len(first)))
        await kit.down()
        stopped = time.monotonic()
        ids = first + await publish(store, count - len(first))
        await until(lambda: failed_attempts(api, endpoint["id"]))
        await asyncio.sleep(max(0.0, seconds - (time.monotonic() - stopped)))
        await kit.up()
        await until(lambda: all_in(api, endpoint["id"], "succeeded", count))
    got = await kit.messages(dest)
    assert Counter(b["id"] for b in verified(endpoint, got)) == Counter(ids)
    errors = await failed_attempts(api, endpoint["id"])
    assert errors and all(e["error"] in ("connection", "timeout") for e in errors), errors[:3]


async def failed_attempts(api: Any, endpoint_id: str) -> list[dict[str, Any]]:
    out = []
    for d in await deliveries(api, endpoint_id):
        if d["attempts"] > 1 or d["status"] != "succeeded":
            one = await delivery(api, d["id"])
            out += [e for e in one["attempt_log"] if e["error"]]
    return out


async def ordered(kit: Kit, store: Store, api: Any, count: int, keys: int) -> None:
    """An endpoint with ``ordering: key``: each key's events arrive in publish order."""
    dest = unique()
    await kit.prepare(dest)
    endpoint = await add(store, kit.url(dest), ordering="key")
    async with running_worker(store):
        ids = await publish(store, count, keys=keys)
        await until(lambda: all_in(api, endpoint["id"], "succeeded", count))
    bodies = verified(endpoint, await kit.messages(dest))
    assert Counter(b["id"] for b in bodies) == Counter(ids)
    by_key: dict[int, list[int]] = defaultdict(list)
    for b in bodies:
        by_key[b["data"]["n"] % keys].append(b["data"]["n"])
    assert all(ns == sorted(ns) for ns in by_key.values()), dict(by_key)


async def goes_dead(kit: Kit, store: Store, api: Any, url: str, errors: set[str]) -> str:
    """An event to ``url`` is dead after the schedule's attempts, each attempt logged with
    the broker's error; returns the details of the last one."""
    endpoint = await add(store, url)
    async with running_worker(store):
        await publish(store, 1)
        await until(lambda: all_in(api, endpoint["id"], "dead", 1))
    (d,) = await deliveries(api, endpoint["id"])
    log = (await delivery(api, d["id"]))["attempt_log"]
    assert len(log) == len(store.settings.retry_schedule) + 1, log
    assert {e["error"] for e in log} <= errors and all(e["detail"] for e in log), log
    assert log[-1]["outcome"] == "dead"
    return str(log[-1]["detail"])


async def unreachable(kit: Kit, store: Store, api: Any) -> None:
    await goes_dead(kit, store, api, kit.url(unique(), port=unused_port()), {"connection"})


async def misconfigured(kit: Kit, store: Store, api: Any) -> str:
    dest = unique()
    return await goes_dead(kit, store, api, await kit.misconfigure(dest), {"refused"})


async def credentials_hidden(kit: Kit, store: Store, api: Any) -> None:
    """The password is in no API answer but ``/url``, and in no log line."""
    dest = unique()
    await kit.prepare(dest)
    with structlog.testing.capture_logs() as logs:
        status, created = await call(api, "POST", "/v1/endpoints", json={"url": kit.url(dest)})
        assert status == 201, created
        wrong = kit.url(unique(), password="Wrong-" + PASSWORD)
        status, bad = await call(api, "POST", "/v1/endpoints", json={"url": wrong})
        assert status == 201, bad
        async with running_worker(store):
            await publish(store, 3)
            await until(lambda: all_in(api, created["id"], "succeeded", 3))
            await until(lambda: failed_attempts(api, bad["id"]))
        answers = [created, bad]
        for path in ("/v1/endpoints", f"/v1/endpoints/{created['id']}", "/v1/deliveries"):
            answers.append((await call(api, "GET", path))[1])
        for d in await deliveries(api, bad["id"]):
            answers.append((await call(api, "GET", f"/v1/deliveries/{d['id']}"))[1])
    text = orjson.dumps(answers).decode() + repr(logs)
    assert PASSWORD not in text
    assert "••••••" in created["url"]
    status, clear = await call(api, "GET", f"/v1/endpoints/{created['id']}/url")
    assert status == 200 and clear["url"] == kit.url(dest)
    status, refused = await call(
        api, "PATCH", f"/v1/endpoints/{created['id']}", json={"url": created["url"]}
    )
    assert status == 422 and PASSWORD not in orjson.dumps(refused).decode(), refused


def worker_env(store: Store, redis_url: str) -> dict[str, str]:
    s = store.settings
    return {
        **os.environ,
        "RELAY_REDIS_URL": redis_url,
        "RELAY_KEY_PREFIX": s.key_prefix,
        "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
        "RELAY_LEASE_SECONDS": "1",
        "RELAY_RETRY_SCHEDULE": "100ms,100ms,100ms,100ms,100ms",
        "RELAY_LOG_LEVEL": "warning",
    }


class Gate:
    """A TCP proxy to relay's Redis for the worker that will be killed: ``close_gate``
    holds back what the worker writes (its outcomes) while the answers it already has
    still flow, and :meth:`close` drops what was held, as a kill does."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.open = asyncio.Event()
        self.open.set()
        self.held = 0
        self.allow = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def shut(self, after: int = 0) -> None:
        """Hold the worker's writes from the ``after``-th on."""
        self.allow = after
        self.open.clear()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/0"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        for task in (self._pump(reader, up_writer, True), self._pump(up_reader, writer, False)):
            t = asyncio.create_task(task)
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
        try:
            while data := await src.read(65536):
                if up and not self.open.is_set():
                    if self.allow > 0:
                        self.allow -= 1
                    else:
                        self.held += 1
                        await self.open.wait()
                dst.write(data)
                await dst.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            dst.close()

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self._server is not None:
            self._server.close()


async def crash(
    kit: Kit, store: Store, redis_port: int, logs: Path, count: int, dedupes: bool
) -> dict[str, int]:
    """A ``relay worker`` SIGKILLed between the broker's confirm and relay's record: its
    connection to relay's Redis goes through a :class:`Gate` that is shut once messages
    arrive, so every send the broker confirms from then on is unrecorded when the worker
    dies. A second worker takes the claims over when their leases end. Every event
    arrives, none more than twice, and a consumer dropping by ``webhook-id`` keeps each
    once; ``dedupes``: the broker drops the re-sends itself."""
    dest = unique()
    await kit.prepare(dest)
    endpoint = await add(store, kit.url(dest))
    ids = await publish(store, count)
    gate = Gate(redis_port)

    async def start(name: str, redis_url: str, **extra: str) -> asyncio.subprocess.Process:
        out = (logs / f"{name}.log").open("wb")
        cmd = (sys.executable, "-m", "relay", "worker")
        env = worker_env(store, redis_url) | extra
        return await asyncio.create_subprocess_exec(*cmd, env=env, cwd=ROOT, stderr=out)

    # a few sends at a time: the victim is still sending when the gate shuts
    small = {"RELAY_WORKER_CONCURRENCY": "4", "RELAY_CLAIM_BATCH": "4"}
    victim = await start("victim", await gate.start(), **small)
    try:
        await until(lambda: _some(kit, dest, count), within=60)
        for _ in range(100):  # until a shut gate catches confirmed sends unrecorded
            gate.shut(after=1)  # one more write (a claim, most often) goes, then none
            await asyncio.sleep(0.3)
            if await unrecorded(kit, dest, store):
                break
            gate.open.set()
            await asyncio.sleep(0.02)
    finally:
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
        await gate.close()
    lost_records = await unrecorded(kit, dest, store)
    survivor = await start("survivor", store.settings.redis_url)
    try:
        await until(lambda: _arrived(kit, dest, ids), within=120)
        await until(lambda: store_done(store, count), within=60)
    finally:
        survivor.send_signal(signal.SIGTERM)
        await asyncio.wait_for(survivor.wait(), 30)
    got = await kit.messages(dest)
    counts = Counter(b["id"] for b in verified(endpoint, got))
    assert set(counts) == set(ids), "an event was lost"
    assert max(counts.values()) <= 2, counts.most_common(3)
    deduped = {m.headers["webhook-id"] for m in got}  # what a consumer keeps
    assert deduped == set(ids)
    dupes = sum(counts.values()) - len(ids)
    if dedupes:
        assert dupes == 0, counts.most_common(3)
    return {"unrecorded": lost_records, "duplicates": dupes}


async def unrecorded(kit: Kit, dest: str, store: Store) -> int:
    """Messages the broker holds whose delivery relay has not recorded as succeeded."""
    return int(await kit.count(dest) - (await store.stats())["counts"]["succeeded"])


async def _some(kit: Kit, dest: str, count: int) -> int:
    n = await kit.count(dest)
    return n if 0 < n < count else 0


async def _arrived(kit: Kit, dest: str, ids: list[str]) -> bool:
    return {m.headers["webhook-id"] for m in await kit.messages(dest)} >= set(ids)


async def store_done(store: Store, count: int) -> bool:
    """Every delivery of the test's prefix succeeded: none waits, none is mid-send."""
    counts = (await store.stats())["counts"]
    return counts.get("succeeded", 0) == count and sum(counts.values()) == count
