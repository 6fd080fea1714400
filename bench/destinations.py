"""Broker destinations: deliveries/s of one relay worker into each kind, against the same
client publishing straight to the broker, in the same process and run.

For each kind (Redis Streams, NATS JetStream, RabbitMQ) a private broker starts on a
free loopback port (tests/helpers/brokers.py), beside a private relay Redis. The
baseline publishes ``--events`` signed messages through the kind's own publisher
(relay/delivery/destinations/, the client library with confirms on) with as many in
flight as a worker's ``RELAY_WORKER_CONCURRENCY``; then ``--events`` events are
published to relay and one in-process worker drains them. Each run also checks what
arrived: every event exactly once, every signature accepted by the Standard Webhooks
verifier. Each kind runs ``--rounds`` rounds, the baseline and relay in turn, into fresh
destinations; the medians are compared. Prints the ratio per kind (goal: 0.5 or more),
and beside it the process's CPU per message, direct and through relay (the median of
the rounds' figures, taken apart from the rates; what a busy machine disturbs least),
and writes ``bench/results/destinations.json``. Part of ``make bench``, not of
``make test``.

    python bench/destinations.py [--events 10000] [--rounds 3] [--kinds redis,nats,amqp]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import private_redis
from relay import logs
from relay.delivery import sender
from relay.delivery.destinations import connector
from relay.delivery.destinations.base import Message
from relay.delivery.worker import Worker
from relay.domain import destinations, ids, signing
from relay.queue.store import Store, connect
from relay.runner import tune_gc
from relay.settings import Settings
from tests.helpers.brokers import NatsKit, RabbitKit, RedisKit
from tests.helpers.destinations import add, publish, store_done, until, verified

RESULTS = Path(__file__).resolve().parent / "results" / "destinations.json"
KITS = {"redis": RedisKit, "nats": NatsKit, "amqp": RabbitKit}
CONCURRENCY = 64


async def direct(kit: Any, dest: str, events: int) -> tuple[float, float]:
    """Messages/s through the kind's publisher alone, ``CONCURRENCY`` in flight, and the
    process's CPU seconds per message."""
    await kit.prepare(dest)
    target = destinations.parse(kit.url(dest))
    publisher = await connector(target.kind)(target, "127.0.0.1", 10.0)
    endpoint = {"secret": signing.generate_secret()}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(events):
        queue.put_nowait(n)

    async def one_sender() -> None:
        while not queue.empty():
            n = queue.get_nowait()
            event_id = ids.new_event_id(0, int(time.time() * 1000))
            body = signing.build_body(
                event_id, "order.paid", int(time.time() * 1000), b'{"n":%d}' % n
            )
            now = time.time()
            await publisher.publish(
                Message(
                    event_id,
                    "order.paid",
                    body,
                    str(int(now)),
                    sender.signature(endpoint, now, event_id, body),
                )
            )

    started, cpu = time.perf_counter(), time.process_time()
    try:
        await asyncio.gather(*(one_sender() for _ in range(CONCURRENCY)))
    finally:
        await publisher.close()
    rate = events / (time.perf_counter() - started)
    used = (time.process_time() - cpu) / events
    assert await kit.count(dest) == events
    return rate, used


async def through_relay(kit: Any, dest: str, events: int, redis_url: str) -> tuple[float, float]:
    """Deliveries/s of one worker draining ``events`` published events into ``dest``, and
    the process's CPU seconds per delivery."""
    await kit.prepare(dest)
    settings = Settings(
        redis_url=redis_url,
        key_prefix="b" + dest,
        allow_private_networks=True,
        worker_concurrency=CONCURRENCY,
        log_level="warning",
    )
    store = Store(connect(settings), settings)
    await store.start()
    try:
        endpoint = await add(store, kit.url(dest))
        published = await publish(store, events)
        stop = asyncio.Event()
        worker = Worker(store, settings)
        started, cpu = time.time(), time.process_time()
        task = asyncio.create_task(worker.run(stop))
        # polled every 50 ms: the observer's own reads stay out of the worker's measured time
        await until(lambda: store_done(store, events), within=600, every=0.05)
        used = (time.process_time() - cpu) / events
        # the drain ends when the last outcome was written (its succeeded score, Redis's
        # clock in ms), not when the poll saw it: up to 50 ms later, 7% of a 0.7 s drain
        rate = events / (await last_recorded(store) - started)
        stop.set()
        await task
        got = verified(endpoint, await kit.messages(dest))  # the verifier accepts each
        counts = Counter(b["id"] for b in got)
        assert counts == Counter(published), "not every event arrived exactly once"
        return rate, used
    finally:
        await store.close()


async def last_recorded(store: Store) -> float:
    """When the latest succeeded delivery of ``store``'s prefix was recorded (epoch s)."""
    shards = store.keys.all_shards()
    tops = [await store.redis.zrange(sk.succeeded, -1, -1, withscores=True) for sk in shards]
    return max(score for top in tops for _, score in top) / 1000


async def measure(kit: Any, kind: str, events: int, rounds: int, redis_url: str) -> dict[str, Any]:
    raws, relays = [], []
    for n in range(rounds):
        raws.append(await direct(kit, f"raw{kind}{n}", events))
        relays.append(await through_relay(kit, f"relay{kind}{n}", events, redis_url))
    raw, relay = statistics.median(r for r, _ in raws), statistics.median(r for r, _ in relays)
    raw_cpu = statistics.median(c for _, c in raws)
    relay_cpu = statistics.median(c for _, c in relays)
    return {
        "direct_per_s": round(raw),
        "relay_per_s": round(relay),
        "ratio": round(relay / raw, 3),
        "events": events,
        "direct_rounds": [round(r) for r, _ in raws],
        "relay_rounds": [round(r) for r, _ in relays],
        # the process's CPU per message: what a busy machine disturbs least
        "direct_cpu_us": round(raw_cpu * 1e6, 1),
        "relay_cpu_us": round(relay_cpu * 1e6, 1),
        "cpu_ratio": round(raw_cpu / relay_cpu, 3),
    }


def run_kind(kind: str, events: int, rounds: int, redis_url: str) -> dict[str, Any]:
    # in /tmp itself: RabbitMQ's node runs as user rabbitmq (tests/helpers/brokers.py)
    data = Path(tempfile.mkdtemp(prefix=f"relay-bench-{kind}-"))
    kit = KITS[kind](data)
    try:
        kit.start()  # outside the event loop: the RabbitMQ kit's readiness check runs one
        return uvloop.run(measure(kit, kind, events, rounds, redis_url))
    finally:
        getattr(kit, "close", kit.stop)()
        shutil.rmtree(data, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", default="redis,nats,amqp")
    args = ap.parse_args()
    # as `relay worker` does with the Settings below (log_level warning): structlog left
    # unconfigured prints a coloured line per attempt, a cost the baseline does not pay;
    # and the worker's garbage collector settings, which the baseline shares
    logs.configure("json", "warning")
    tune_gc()
    results: dict[str, Any] = {}
    with private_redis() as url:
        for kind in args.kinds.split(","):
            results[kind] = run_kind(kind, args.events, args.rounds, url)
    print(f"{args.events} events a round, median of {args.rounds} rounds (each round's rate)")
    print(
        f"{'kind':<6} {'direct/s':>10} {'relay/s':>10} {'ratio':>7}  (goal >= 0.5)"
        f"  {'CPU us/msg direct':>17} {'relay':>7} {'ratio':>6}"
    )
    for kind, r in results.items():
        print(
            f"{kind:<6} {r['direct_per_s']:>10} {r['relay_per_s']:>10} {r['ratio']:>7}"
            f"  {'':12}  {r['direct_cpu_us']:>17} {r['relay_cpu_us']:>7} {r['cpu_ratio']:>6}"
            f"  direct {r['direct_rounds']} relay {r['relay_rounds']}"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
