"""What the tracing hooks cost: publish and drain with tracing off, against the same code
with the hooks patched out, and (for information) with tracing on.

One process for API and worker, one fresh ``redis-server`` (no AOF), the benchmark's
receiver process (``bench/receiver.py``, answering 200), all on 127.0.0.1.
Each round publishes ``--events`` events through the real API
(``POST /v1/events`` over HTTP, 32 at a time, each with a caller ``traceparent``) to one
endpoint, then drains them with one in-process ``Worker`` in burst mode. Three modes,
interleaved round by round so that drift on a shared machine hits them alike:

* ``patched``: the hooks patched out: ``POST /v1/events`` routed straight to the untraced
  handler, ``_Call.__call__`` replaced by the untraced ``_Call.call`` (every script call),
  ``Attempter.attempt`` by ``Attempter.send_once`` (every attempt), ``Worker._record`` by
  a plain ``store.record`` (every group commit). What stays is one ``tracing.on`` check
  per claim batch, an empty ``trace`` argument and a dict pop per delivery.
* ``off``: relay as shipped with no ``OTEL_*`` variable: every hook is ``if tracing.on``.
* ``on``: tracing on with the SDK (a ``BatchSpanProcessor`` into an exporter that drops
  the spans): the spans, the stored ``tp`` field and its read at claim, ``traceparent``.

* ``patched-again``: ``patched`` once more, the control: ``patched-again / patched`` is
  what the same code measures against itself, the noise ``off / patched`` must stay in.

Prints, per mode, the median events/s (wall) and CPU microseconds of this process per
event (the API and its client while publishing, the worker while draining), and each
mode's ratio to ``patched`` in the same round (median and range over the rounds); writes
``bench/results/tracing.json``. Redis is flushed before every run.
Part of ``make bench``, not of ``make test``.

    python bench/tracing.py [--events 3000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Procs, Receiver, private_redis
from relay import logs, tracing
from relay.api import common, create_app, events
from relay.delivery.attempt import Attempter
from relay.delivery.worker import Worker
from relay.domain.schema import endpoint_record
from relay.queue.scripts import _Call
from relay.queue.store import Store, connect
from relay.redisproc import free_port
from relay.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "tracing.json"
CALLER = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
MODES = ("patched", "off", "on", "patched-again")
ORIGINAL = (_Call.__call__, Attempter.attempt, Worker._record, list(common.ROUTES))


async def _plain_record(self: Worker, sk: Any, outcomes: list[Any]) -> list[int]:
    return await self.store.record(sk, outcomes)


def patch(mode: str) -> None:
    """Put the hooks in place (``off``, ``on``) or take them out (``patched``)."""
    tracing.shutdown()
    call, attempt, record, routes = ORIGINAL
    _Call.__call__ = call  # type: ignore[method-assign]
    Attempter.attempt = attempt  # type: ignore[method-assign]
    Worker._record = record  # type: ignore[method-assign]
    common.ROUTES[:] = routes
    if mode.startswith("patched"):
        _Call.__call__ = _Call.call  # type: ignore[method-assign, assignment]
        Attempter.attempt = Attempter.send_once  # type: ignore[method-assign, assignment]
        Worker._record = _plain_record  # type: ignore[method-assign]
        common.ROUTES[:] = [
            dataclasses.replace(r, handler=events._publish) if r.handler is events.publish else r
            for r in routes
        ]
    elif mode == "on":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Drop(SpanExporter):
            def export(self, spans: Sequence[Any]) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Drop()))
        tracing.setup(Settings(), provider=provider)


async def one_round(redis_url: str, receiver_url: str, mode: str, n: int, events_n: int) -> dict:
    patch(mode)
    settings = Settings(
        redis_url=redis_url,
        key_prefix=f"bt{n}{mode}",
        allow_private_networks=True,
        api_tokens=("bench",),
        log_level="warning",
    )
    store = Store(connect(settings), settings)
    await store.start()
    runner = web.AppRunner(create_app(settings, store), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await store.put_endpoint(endpoint_record(url=receiver_url, app="default"))
        await asyncio.sleep(0.2)  # the API's endpoint cache hears of it
        url = f"http://127.0.0.1:{port}/v1/events"
        headers = {"Authorization": "Bearer bench", **CALLER}
        async with aiohttp.ClientSession(headers=headers) as http:

            async def post(i: int) -> None:
                body = {"type": "bench.trace", "payload": {"n": i}}
                async with http.post(url, json=body) as r:
                    assert r.status == 201, await r.text()

            started, cpu = time.perf_counter(), time.process_time()
            for start in range(0, events_n, 32):
                await asyncio.gather(*(post(i) for i in range(start, min(events_n, start + 32))))
            publish_s = time.perf_counter() - started
            publish_cpu = time.process_time() - cpu
        worker = Worker(store, settings)
        started, cpu = time.perf_counter(), time.process_time()
        await worker.run(asyncio.Event(), burst=True)
        drain_s = time.perf_counter() - started
        drain_cpu = time.process_time() - cpu
        assert worker.stats.sent == events_n, worker.stats.sent
    finally:
        await runner.cleanup()
        await store.close()
        patch("off")
    return {
        "round": n,
        "mode": mode,
        "publish_per_s": events_n / publish_s,
        "drain_per_s": events_n / drain_s,
        # CPU of this process (API + client, then worker) per event: what the hooks add,
        # unlike wall time, is not hidden by the pacing waits of a short drain
        "publish_cpu_us": publish_cpu / events_n * 1e6,
        "drain_cpu_us": drain_cpu / events_n * 1e6,
    }


async def flush(redis_url: str) -> None:
    """Each run starts on an empty Redis (this benchmark's own server)."""
    client = redis.asyncio.Redis.from_url(redis_url)
    await client.flushall()
    await client.aclose()


async def run(redis_url: str, events_n: int, rounds: int) -> list[dict]:
    procs = Procs()
    rec = Receiver(procs)  # bench/receiver.py in its own process, as in bench/run.py
    rows = []
    try:
        await rec.start()
        await one_round(redis_url, rec.url, "off", -1, min(events_n, 300))  # warm up
        for n in range(rounds):
            order = MODES if n % 2 == 0 else MODES[::-1]
            for mode in order:
                await flush(redis_url)
                gc.collect()
                rows.append(await one_round(redis_url, rec.url, mode, n, events_n))
                print(
                    f"  round {n} {mode:>7}: {rows[-1]['publish_per_s']:8.0f} publish/s "
                    f"{rows[-1]['drain_per_s']:8.0f} drain/s "
                    f"{rows[-1]['publish_cpu_us']:6.0f} / {rows[-1]['drain_cpu_us']:4.0f} us CPU",
                    flush=True,
                )
    finally:
        await rec.close()
        procs.close()
    return rows


def summary(rows: list[dict]) -> dict[str, Any]:
    """Per figure: each mode's median, and the median (and range) over the rounds of each
    mode's ratio to ``patched`` in the same round; ``patched-again`` / ``patched`` (the
    same code twice) is the noise that ``off`` / ``patched`` must stay within."""
    out: dict[str, Any] = {}
    rounds = sorted({r["round"] for r in rows})
    for what in ("publish_per_s", "drain_per_s", "publish_cpu_us", "drain_cpu_us"):
        at = {(r["round"], r["mode"]): r[what] for r in rows}
        ratios = {}
        for mode in MODES[1:]:
            each = [at[n, mode] / at[n, "patched"] for n in rounds]
            ratios[mode] = {
                "median": round(statistics.median(each), 3),
                "range": [round(min(each), 3), round(max(each), 3)],
            }
        out[what] = {
            "median": {m: round(statistics.median(at[n, m] for n in rounds), 1) for m in MODES},
            "over_patched": ratios,
        }
    return out


def table(result: dict[str, Any]) -> str:
    head = f"{'':>14} {'patched':>8} {'off':>8} {'on':>8}   " + "  ".join(
        f"{m + '/patched':>24}" for m in MODES[1:]
    )
    lines = [head]
    for what, s in result.items():
        m, r = s["median"], s["over_patched"]
        cells = "  ".join(
            f"{r[k]['median']:>7.3f} ({r[k]['range'][0]:.3f}-{r[k]['range'][1]:.3f})"
            for k in MODES[1:]
        )
        lines.append(f"{what:>14} {m['patched']:>8.0f} {m['off']:>8.0f} {m['on']:>8.0f}   {cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    logs.configure("json", "warning")  # no line per attempt on the terminal
    with private_redis() as url:
        rows = asyncio.run(run(url, args.events, args.rounds))
    result = summary(rows)
    print(table(result))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps({"events": args.events, "rounds": args.rounds, **result, "runs": rows}, indent=2)
        + "\n"
    )
    print(f"written {RESULTS}")


if __name__ == "__main__":
    main()
