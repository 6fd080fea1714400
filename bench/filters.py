"""Publish cost with payload filters and without (issue 16, point 2).

A private ``redis-server``; one app with 10 endpoints; ``Publisher.publish`` (what
``POST /v1/events`` runs after parsing) called one at a time, ``--events`` times, first
with no filter on any endpoint, then with a CEL filter on each of the 10 (half of them
true for the payload). Prints the CPU (process time) and the wall time per publish and
the filter evaluation alone, and writes ``bench/results/filters.json``. The publisher
judges filters as the API's does: in a :class:`relay.sandbox.Sandbox` (child processes),
so the wall time includes the round trip to a child; the CPU column is this process's.
Part of ``make bench``, not of ``make test``.

    python bench/filters.py [--events 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import private_redis
from relay.domain import filters
from relay.domain.schema import EventIn, endpoint_record
from relay.publishing import Publisher
from relay.queue.store import Store, connect
from relay.sandbox import Sandbox
from relay.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "filters.json"
PAYLOAD = {
    "order": 1001,
    "amount": 4200,
    "currency": "EUR",
    "customer": {"id": "c_1", "vip": True, "country": "NL"},
    "items": [{"sku": f"SKU-{i}", "qty": i} for i in range(10)],
}
FILTERS = [
    "payload.amount > 1000",
    'payload.currency in ["EUR", "USD"]',
    "has(payload.customer.vip) && payload.customer.vip",
    'payload.items.exists(i, i.sku == "SKU-3")',
    'payload.customer.country == "NL"',
    "payload.amount < 10",
    'payload.currency == "GBP"',
    "payload.items.all(i, i.qty > 5)",
    'event_type.startsWith("invoice.")',
    'payload.customer.country == "DE"',
]


async def run(url: str, with_filters: bool, events: int) -> dict[str, Any]:
    settings = Settings(redis_url=url, key_prefix=f"bf{int(with_filters)}")
    store = Store(connect(settings), settings)
    await store.start()
    for text in FILTERS:
        await store.put_endpoint(
            endpoint_record(url="http://127.0.0.1:9/x", filter=text if with_filters else None)
        )
    endpoints = await store.list_endpoints("default")
    sandbox = Sandbox()
    publisher = Publisher(store, lambda app: _same(endpoints), judge=sandbox)
    event = EventIn(type="order.paid", payload=PAYLOAD)
    try:
        for _ in range(200):  # warm up (and compile the filters once)
            await publisher.publish(event)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(events):
            done = await publisher.publish(event)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        delivered = len(done.answer["deliveries"])
    finally:
        await sandbox.close()
        await store.close()
    # the filters alone, as a sandbox child runs them for a publish
    cache = filters.ProgramCache()
    texts = [e["filter"] for e in endpoints if e["filter"]]
    started = time.process_time()
    for _ in range(events):
        for _verdict in filters.judge(texts, cache, PAYLOAD, "order.paid", "default"):
            pass
    only = time.process_time() - started
    return {
        "filters": with_filters,
        "events": events,
        "deliveries_per_event": delivered,
        "cpu_ms_per_publish": round(cpu / events * 1000, 4),
        "wall_ms_per_publish": round(wall / events * 1000, 4),
        "narrow_cpu_ms_per_event": round(only / events * 1000, 4),
    }


async def _same(endpoints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return endpoints


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=3000)
    args = parser.parse_args()
    with private_redis() as url:
        rows = [asyncio.run(run(url, f, args.events)) for f in (False, True)]
    without, with_ = rows
    extra = with_["cpu_ms_per_publish"] - without["cpu_ms_per_publish"]
    print("publish, 10 endpoints        CPU ms/publish  wall ms/publish  deliveries  filters alone")
    for r in rows:
        print(
            f"{'with 10 CEL filters' if r['filters'] else 'no filters':<28}"
            f"{r['cpu_ms_per_publish']:>14.4f}{r['wall_ms_per_publish']:>17.4f}"
            f"{r['deliveries_per_event']:>12}{r['narrow_cpu_ms_per_event']:>15.4f}"
        )
    print(f"filters add {extra:.4f} ms CPU per publish ({extra / 10 * 1000:.1f} us per filter)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"rows": rows, "extra_cpu_ms": round(extra, 4)}, indent=2))


if __name__ == "__main__":
    main()
