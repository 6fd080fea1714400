"""Reconciliation replay jobs, on real Redis and on the real cluster.

With ``replay.lua``'s guard removed (``if status == "dead" or status == "succeeded"``
made ``if status ~= "held"`` on a copy of the tree, so a pending or in-flight delivery is
replayed too), the overlap test reports deliveries with two requests open at once at the
receiver and deliveries whose ``replays`` count passes one, and the takeover test finds
the deliveries the killed worker replayed but did not save replayed a second time
(``replays`` 2).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web

from relay.delivery.worker import Worker
from relay.domain import signing
from relay.domain.replayspec import ReplayIn
from relay.ops import replays as replays_module
from relay.ops.replays import Job, ReplayNotRunning, ReplayRunner, Replays
from relay.queue.store import Store
from tests.helpers.replays import DAY, endpoint, seed


def spec(since: int, until: int, **fields: Any) -> ReplayIn:
    return ReplayIn(since=signing.rfc3339_ms(since), until=signing.rfc3339_ms(until), **fields)


async def until_true(check: Callable[[], Awaitable[bool]], within: float = 60.0) -> None:
    async def loop() -> None:
        while not await check():  # noqa: ASYNC110 (a condition in Redis, not an event)
            await asyncio.sleep(0.02)

    await asyncio.wait_for(loop(), within)


async def field(store: Store, ids_: list[str], name: str) -> list[str]:
    async with store.redis.pipeline(transaction=False) as pipe:
        for d in ids_:
            pipe.hget(store.shard_keys_for(d).delivery(d), name)  # type: ignore[union-attr]
        return [v or "" for v in await pipe.execute()]


async def job_done(replays: Replays, job_id: str) -> bool:
    return ((await replays.get(job_id)) or {}).get("state") == "done"


# ---------------------------------------------------------------------- the API


async def test_api_dry_run_start_read_list_cancel(make_store: Any, make_api: Any) -> None:
    store = await make_store()
    api = await make_api(store)
    ep = await endpoint(store)
    base = int(time.time() * 1000) - DAY
    dead = await seed(store, [ep], 30, created=base)
    await seed(store, [ep], 10, created=base, status="succeeded")
    await seed(store, [ep], 5, created=base, event_type="user.new")
    window = {"since": signing.rfc3339_ms(base), "until": signing.rfc3339_ms(base + 60_000)}

    async def post(body: dict[str, Any]) -> tuple[int, Any]:
        async with api("POST", "/v1/replays", json=body) as r:
            return r.status, await r.json()

    assert await post({**window, "dry_run": True}) == (200, {"dry_run": True, "matched": 35})
    status, counted = await post({**window, "dry_run": True, "type": "order.*"})
    assert counted["matched"] == 30
    status, counted = await post({**window, "dry_run": True, "status": ["dead", "succeeded"]})
    assert counted["matched"] == 45
    assert set(await field(store, dead, "status")) == {"dead"}  # a dry run changes nothing
    for bad in (
        {**window, "status": ["pending"]},
        {**window, "since": "yesterday"},
        {**window, "since": "2026-12-01T10:00:00"},  # no zone
        {"since": window["until"], "until": window["since"]},
        {**window, "event_type": "bad type!"},
    ):
        status, answer = await post(bad)
        assert status == 422 and answer["error"] == "validation_error", (bad, answer)
    status, answer = await post({**window, "endpoint_id": "ep_nope"})
    assert (status, answer["error"]) == (422, "unknown_endpoint")
    assert await store.list_replay_jobs() == []  # refused ones wrote nothing

    status, job = await post({**window, "event_type": "order.*"})
    assert status == 202 and job["id"].startswith("rpl_") and job["state"] == "running"
    async with api("GET", f"/v1/replays/{job['id']}") as r:
        assert (await r.json())["since"] == window["since"]
    async with api("GET", "/v1/replays") as r:
        assert [j["id"] for j in (await r.json())["data"]] == [job["id"]]
    async with api("POST", f"/v1/replays/{job['id']}/cancel") as r:
        assert r.status == 200 and (await r.json())["state"] == "cancelled"
    async with api("POST", f"/v1/replays/{job['id']}/cancel") as r:
        assert r.status == 409 and (await r.json())["error"] == "replay_not_running"
    assert await store.running_replay_jobs() == []


# ---------------------------------------------------------------------- 10,000


async def test_ten_thousand_deliveries_replayed(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no worker drains them here, so the pacing caps are lifted: this is the walk and the
    # replay calls at scale (the pacing has its own tests below)
    monkeypatch.setattr(replays_module, "OUTSTANDING_MAX", 20_000)
    store = await make_store(shards=2, replay_outstanding=20_000)
    eps = [await endpoint(store) for _ in range(4)]
    base = int(time.time() * 1000) - DAY
    before = await seed(store, eps, 50, created=base - 60_000)  # outside the range
    wanted = await seed(store, eps, 10_000, created=base)
    kept = await seed(store, eps, 300, created=base, status="succeeded")
    replays = Replays(store)
    job = await replays.start(spec(base, base + 20_000))
    stop = asyncio.Event()
    runner = asyncio.create_task(ReplayRunner(store, poll=0.05).run(stop))
    try:
        await until_true(lambda: job_done(replays, job["id"]))
    finally:
        stop.set()
        await runner
    final = await replays.get(job["id"])
    assert final is not None
    assert (final["matched"], final["replayed"], final["skipped"]) == (10_000, 10_000, 0)
    assert final["scan_done"] and final["waiting"] == 0
    assert set(await field(store, wanted, "status")) == {"pending"}
    assert set(await field(store, wanted, "replays")) == {"1"}
    assert set(await field(store, before, "status")) == {"dead"}
    assert set(await field(store, kept, "status")) == {"succeeded"}
    assert sum([await store.redis.zcard(sk.due) for sk in store.keys.all_shards()]) == 10_000


# ---------------------------------------------------------------------- pacing


async def lease_and_load(store: Store, runner: ReplayRunner, job_id: str) -> Job:
    assert (await store.replay_job("lease", job_id, owner=runner.owner, lease_ms=60_000)).ok
    return Job(await store.get_replay_job(job_id) or {})


async def test_outstanding_cap_per_endpoint_and_open_breaker(make_store: Any) -> None:
    """Step by step (no clock): at most RELAY_REPLAY_OUTSTANDING of the job's deliveries
    unfinished per endpoint; a finished one frees a place; an open breaker holds back its
    endpoint's deliveries, not the others'."""
    store = await make_store(replay_outstanding=5)
    slow, other = await endpoint(store), await endpoint(store)
    base = int(time.time() * 1000) - DAY
    slow_ids = await seed(store, [slow], 40, created=base)
    other_ids = await seed(store, [other], 12, created=base + 100)
    runner = ReplayRunner(store, owner="stepper")
    job_id = (await Replays(store).start(spec(base, base + 1000)))["id"]
    job = await lease_and_load(store, runner, job_id)
    for _ in range(3):
        await runner.step(job)
    assert job.matched == 52 and job.replayed == 10  # 5 + 5
    statuses = dict(zip(slow_ids, await field(store, slow_ids, "status"), strict=True))
    assert list(statuses.values()).count("pending") == 5
    # two of slow's finish: two more of slow's go
    done = [d for d, s in statuses.items() if s == "pending"][:2]
    for d in done:
        await store.redis.hset(store.shard_keys_for(d).delivery(d), "status", "succeeded")  # type: ignore[union-attr]
    await runner.step(job)
    assert job.replayed == 12
    # other's breaker opens and its deliveries finish: none of other's goes while it is open
    await store.redis.hset(
        store.keys.endpoint_state(other).breaker,
        mapping={"state": "open", "open_until": int(time.time() * 1000) + 60_000},
    )
    for d in other_ids:
        await store.redis.hset(store.shard_keys_for(d).delivery(d), "status", "dead")  # type: ignore[union-attr]
    await runner.step(job)
    assert job.replayed == 12
    assert sum(1 for _, e in job.waiting if e == other) == 7
    await store.redis.delete(store.keys.endpoint_state(other).breaker)  # closed again
    await runner.step(job)
    assert job.replayed == 17 and sum(1 for _, e in job.waiting if e == other) == 2


async def test_rate_limited_endpoint_never_sees_more_than_its_rate(
    make_store: Any, receiver: Any
) -> None:
    """A replay through a real worker to an endpoint limited to 25/s: in every 1 s window
    of arrival times (the receiver's clock) at most 25 + the limiter's burst (2) + 1."""
    rate = 25.0
    store = await make_store(replay_outstanding=10)
    ep = await endpoint(store, receiver.url + "/paced", rate_limit=rate)
    base = int(time.time() * 1000) - DAY
    await seed(store, [ep], 75, created=base)
    replays = Replays(store)
    job = await replays.start(spec(base, base + 1000))
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(ReplayRunner(store, poll=0.05).run(stop)),
        asyncio.create_task(Worker(store, store.settings).run(stop)),
    ]
    try:
        await receiver.wait_for(75, within=60, path="/paced")
        await until_true(lambda: job_done(replays, job["id"]))
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    arrivals = sorted(r.at for r in receiver.for_path("/paced"))
    assert len(arrivals) == 75
    burst = max(1, int(rate // 10))
    worst = max(sum(1 for b in arrivals if a <= b < a + 1.0) for a in arrivals)
    assert worst <= rate + burst + 1, worst


# ---------------------------------------------------------------------- overlap


async def test_two_overlapping_jobs_never_put_a_delivery_in_flight_twice(
    make_store: Any, receiver: Any
) -> None:
    """Two jobs over the same range (dead and succeeded), on two runners, while a worker
    sends: the receiver holds each request 20 ms and records every delivery id with two
    requests open at once. None may have; each job's matched = replayed + skipped."""
    store = await make_store(replay_outstanding=4, worker_concurrency=32)
    open_now: set[str] = set()
    twice: list[str] = []

    async def hold(request: web.Request) -> web.Response:
        d = request.headers["x-relay-delivery-id"]
        if d in open_now:
            twice.append(d)
        open_now.add(d)
        await asyncio.sleep(0.02)
        open_now.discard(d)
        return web.Response(text="ok")

    receiver.responses["/o"] = hold
    eps = [await endpoint(store, receiver.url + "/o") for _ in range(3)]
    base = int(time.time() * 1000) - DAY
    made = await seed(store, eps, 120, created=base)
    made += await seed(store, eps, 60, created=base + 500, status="succeeded")
    replays = Replays(store)
    both = ["dead", "succeeded"]
    jobs = [(await replays.start(spec(base, base + 1000, status=both)))["id"] for _ in range(2)]
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(ReplayRunner(store, poll=0.05, owner="a").run(stop)),
        asyncio.create_task(ReplayRunner(store, poll=0.05, owner="b").run(stop)),
        asyncio.create_task(Worker(store, store.settings).run(stop)),
    ]

    async def all_done() -> bool:
        return all([await job_done(replays, j) for j in jobs])

    try:
        await until_true(all_done, within=90)
        await until_true(lambda: finished(store, made))
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    assert twice == []
    for j in jobs:
        view = await replays.get(j) or {}
        assert view["matched"] == view["replayed"] + view["skipped"], view
    counts = [int(x) for x in await field(store, made, "replays")]
    assert max(counts) <= 2  # each job replays a delivery at most once
    assert sum(1 for r in receiver.for_path("/o")) == sum(counts)


async def finished(store: Store, made: list[str]) -> bool:
    statuses = await store.delivery_statuses(made)
    return all(s in ("succeeded", "dead") for s in statuses.values())


# ---------------------------------------------------------------------- cancel, takeover


async def test_cancel_mid_run(make_store: Any) -> None:
    store = await make_store(replay_outstanding=5, replay_lease=1.5)
    ep = await endpoint(store)
    base = int(time.time() * 1000) - DAY
    made = await seed(store, [ep], 50, created=base)
    replays = Replays(store)
    job = await replays.start(spec(base, base + 1000))
    stop = asyncio.Event()
    runner = ReplayRunner(store, poll=0.05)
    task = asyncio.create_task(runner.run(stop))
    try:
        # no worker: 5 go, then the job waits for them to finish (the cap)
        await until_true(lambda: _replayed(replays, job["id"], 5))
        cancelled = await replays.cancel(job["id"])
        assert cancelled["state"] == "cancelled" and cancelled["finished_at"]
        # the runner's next save is refused and it lets the job go
        await until_true(lambda: _no_tasks(runner))
    finally:
        stop.set()
        await task
    assert (await replays.get(job["id"]) or {})["replayed"] == 5
    statuses = await field(store, made, "status")
    assert statuses.count("pending") == 5 and statuses.count("dead") == 45
    with pytest.raises(ReplayNotRunning):
        await replays.cancel(job["id"])


async def _replayed(replays: Replays, job_id: str, n: int) -> bool:
    return ((await replays.get(job_id)) or {}).get("replayed", 0) >= n


async def _no_tasks(runner: ReplayRunner) -> bool:
    return all(t.done() for t in runner._tasks.values())


async def test_job_resumed_by_another_worker_after_the_first_is_killed(make_store: Any) -> None:
    """Worker A walks two pages and saves, replays one of them and dies before saving
    that (it just stops: no hand-back). B takes the job over once A's lease runs out,
    from A's saved state: the page A replayed unsaved is refused (skipped), never
    replayed twice, and every delivery ends replayed exactly once."""
    # B holds the default lease, so one slow step on a loaded machine cannot lose it;
    # A's lease is the 1 s its save below sets
    store = await make_store(replay_outstanding=10_000)
    eps = [await endpoint(store) for _ in range(3)]
    base = int(time.time() * 1000) - DAY
    made = await seed(store, eps, 3000, created=base)
    replays = Replays(store)
    job_id = (await replays.start(spec(base, base + 10_000)))["id"]
    a = ReplayRunner(store, owner="worker-a")
    job = await lease_and_load(store, a, job_id)
    page = replays_module.PAGE
    await a._walk(job)  # two pages matched and waiting, saved
    await a._walk(job)
    saved = await store.replay_job(
        "save", job_id, owner=a.owner, lease_ms=1000, fields=job.fields("running")
    )
    assert saved.ok and (job.matched, job.replayed) == (2 * page, 0)
    assert await a._release(job)  # one page of them replayed, never saved: A dies here
    assert job.replayed == page

    stop = asyncio.Event()
    b = ReplayRunner(store, poll=0.05, owner="worker-b")
    task = asyncio.create_task(b.run(stop))
    try:
        await until_true(lambda: job_done(replays, job_id))
    finally:
        stop.set()
        await task
    final = await replays.get(job_id) or {}
    assert final["takeovers"] == 1
    assert final["matched"] == 3000
    assert final["skipped"] == page  # A's unsaved page, refused for B
    assert final["replayed"] + final["skipped"] == 3000
    assert set(await field(store, made, "replays")) == {"1"}
    assert set(await field(store, made, "status")) == {"pending"}


# ---------------------------------------------------------------------- cluster


@pytest.mark.realredis
async def test_type_filter_reads_the_type_from_the_header(make_store: Any) -> None:
    """A claimed delivery's hash holds no type (claim.lua leaves it in the event's header):
    a replay filtered by type finds it through the events index and through an endpoint's.
    Fails with replay_scan.lua's ``type_of`` fallback removed: the endpoint-scoped counts
    are 0."""
    store = await make_store()
    eps = [await endpoint(store) for _ in range(2)]
    base = int(time.time() * 1000) - DAY
    await seed(store, eps, 40, created=base)
    await seed(store, eps, 20, created=base + 100, event_type="invoice.sent")
    replays = Replays(store)
    assert await replays.count(spec(base, base + 5000, type="order.paid")) == 40
    assert await replays.count(spec(base, base + 5000, type="invoice.*")) == 20
    one = spec(base, base + 5000, endpoint_id=eps[0], type="order.paid")
    assert await replays.count(one) == 20
    one = spec(base, base + 5000, endpoint_id=eps[1], type="invoice.sent")
    assert await replays.count(one) == 10


async def test_replay_job_on_the_cluster(cluster_store: Any) -> None:
    store = await cluster_store(replay_outstanding=10_000)
    assert store.settings.shards == 3
    eps = [await endpoint(store) for _ in range(2)]
    base = int(time.time() * 1000) - DAY
    made = await seed(store, eps, 1200, created=base)
    replays = Replays(store)
    assert await replays.count(spec(base, base + 5000)) == 1200
    assert await replays.count(spec(base, base + 5000, endpoint_id=eps[0])) == 600
    job = await replays.start(spec(base, base + 5000))
    stop = asyncio.Event()
    task = asyncio.create_task(ReplayRunner(store, poll=0.05).run(stop))
    try:
        await until_true(lambda: job_done(replays, job["id"]))
    finally:
        stop.set()
        await task
    final = await replays.get(job["id"]) or {}
    assert (final["matched"], final["replayed"], final["skipped"]) == (1200, 1200, 0)
    assert set(await field(store, made, "status")) == {"pending"}


# ---------------------------------------------------------------------- the CLI


async def test_cli_dry_run_job_with_progress_and_cancel(make_store: Any) -> None:
    from click.testing import CliRunner

    from relay.cli import main

    store = await make_store()
    env = {
        "RELAY_REDIS_URL": store.settings.redis_url,
        "RELAY_KEY_PREFIX": store.settings.key_prefix,
        "RELAY_SHARDS": "1",
    }

    async def cli(*args: str) -> Any:
        runner = CliRunner()
        return await asyncio.to_thread(runner.invoke, main, list(args), env=env)

    ep = await endpoint(store)
    base = int(time.time() * 1000) - DAY
    made = await seed(store, [ep], 20, created=base)
    since, until = signing.rfc3339_ms(base), signing.rfc3339_ms(base + 1000)
    got = await cli("replay", "--since", since, "--until", until, "--dry-run", "--json")
    assert got.exit_code == 0, got.output
    assert orjson.loads(got.stdout) == {"dry_run": True, "matched": 20}
    got = await cli("replay", "--since", since, "--until", until, "--status", "pending")
    assert got.exit_code == 2 and "status" in got.output
    got = await cli("replay", "--since", since, "--until", until, "--endpoint", "ep_nope")
    assert got.exit_code == 1 and "does not exist" in got.output
    got = await cli("replay", "--until", until)
    assert got.exit_code == 2

    stop = asyncio.Event()
    runner = asyncio.create_task(ReplayRunner(store, poll=0.05).run(stop))
    try:
        got = await cli("replay", "--since", since, "--until", until, "--endpoint", ep)
    finally:
        stop.set()
        await runner
    assert got.exit_code == 0, got.output
    assert re.search(r"^state\s+done$", got.stdout, re.M), got.stdout
    assert re.search(r"^replayed\s+20$", got.stdout, re.M), got.stdout
    assert "matched 20, replayed 20" in got.stderr  # the progress line
    assert set(await field(store, made, "status")) == {"pending"}

    got = await cli("replay", "--since", since, "--until", until, "--no-wait", "--json")
    job = orjson.loads(got.stdout)
    assert job["state"] == "running"
    got = await cli("replay", "--cancel", job["id"], "--json")
    assert got.exit_code == 0 and orjson.loads(got.stdout)["state"] == "cancelled"
    got = await cli("replay", "--cancel", job["id"])
    assert got.exit_code == 1 and "not running" in got.output


async def test_a_stopping_worker_hands_its_job_over_at_once(make_store: Any) -> None:
    """A worker that stops (SIGTERM) saves its job and lets the lease go: the next worker
    goes on at once, not after RELAY_REPLAY_LEASE (60 s here, past the 10 s wait)."""
    store = await make_store(replay_outstanding=3, replay_lease=60.0)
    ep = await endpoint(store)
    base = int(time.time() * 1000) - DAY
    made = await seed(store, [ep], 10, created=base)
    replays = Replays(store)
    job_id = (await replays.start(spec(base, base + 1000)))["id"]
    stop_a = asyncio.Event()
    a = asyncio.create_task(ReplayRunner(store, poll=0.05, owner="a").run(stop_a))
    await until_true(lambda: _replayed(replays, job_id, 3), within=10)
    stop_a.set()
    await a
    # the three finish (as a worker would record them): room for three more, for B
    for d in made:
        sk = store.shard_keys_for(d)
        assert sk is not None
        if await store.redis.hget(sk.delivery(d), "status") == "pending":
            await store.redis.hset(sk.delivery(d), "status", "succeeded")
    stop_b = asyncio.Event()
    b = asyncio.create_task(ReplayRunner(store, poll=0.05, owner="b").run(stop_b))
    try:
        await until_true(lambda: _replayed(replays, job_id, 6), within=10)
    finally:
        stop_b.set()
        await b
    view = await replays.get(job_id) or {}
    assert view["takeovers"] == 1 and view["state"] == "running"
