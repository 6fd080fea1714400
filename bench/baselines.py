"""The queue libraries, doing relay's job the way a Python team would write it with them.

Runs in each library's own virtualenv (``bench/queues.py``: arq needs redis<6, relay pins 8.1):

    python bench/baselines.py enqueue SYSTEM REDIS_URL N
    python bench/baselines.py work SYSTEM REDIS_URL RECEIVER_URL CONCURRENCY

SYSTEM is arq or saq (here), taskiq, dramatiq or streaq (``bench/baselines_more.py``).
A job is one webhook send (``bench/jobsend.py``): it signs the same ~1 KiB body with
``relay.domain.signing`` and POSTs it through one aiohttp session shared by the process
(connection limit = the concurrency), failing the job on a non-2xx answer. Each library
keeps its defaults (result retention, job timeouts, polling) apart from the concurrency:
arq ``max_jobs``, saq ``concurrency`` (the others: ``bench/baselines_more.py``). ``work``
runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # relay.domain.signing and bench.payloads, without installing relay

from bench.jobsend import send as _send  # noqa: E402
from bench.jobsend import startup as _startup  # noqa: E402

CHUNK = 500  # enqueue calls in flight at once


# ---------------------------------------------------------------------------- arq


async def arq_send(ctx: dict[str, Any], event_id: str) -> int:
    return await _send(ctx, event_id, "bench-arq")


async def arq_enqueue(redis_url: str, n: int) -> None:
    from arq.connections import RedisSettings, create_pool

    pool = await create_pool(RedisSettings.from_dsn(redis_url))
    for start in range(0, n, CHUNK):
        ids = range(start, min(n, start + CHUNK))
        await asyncio.gather(*(pool.enqueue_job("arq_send", f"evt_arq_{i}") for i in ids))
    await pool.aclose()


async def arq_work(redis_url: str, url: str, concurrency: int) -> None:
    from arq.connections import RedisSettings
    from arq.worker import Worker

    async def startup(ctx: dict[str, Any]) -> None:
        await _startup(ctx, url, concurrency)

    async def shutdown(ctx: dict[str, Any]) -> None:
        await ctx["session"].close()

    worker = Worker(
        [arq_send],
        redis_settings=RedisSettings.from_dsn(redis_url),
        max_jobs=concurrency,
        on_startup=startup,
        on_shutdown=shutdown,
    )
    try:
        await worker.async_run()
    except asyncio.CancelledError:  # arq's SIGTERM handler cancels its main task
        pass
    finally:
        await worker.close()


# ---------------------------------------------------------------------------- saq


async def saq_send(ctx: dict[str, Any], *, event_id: str) -> int:
    return await _send(ctx, event_id, "bench-saq")


async def saq_enqueue(redis_url: str, n: int) -> None:
    from saq import Queue

    queue = Queue.from_url(redis_url)
    await queue.connect()
    for start in range(0, n, CHUNK):
        ids = range(start, min(n, start + CHUNK))
        await asyncio.gather(*(queue.enqueue("saq_send", event_id=f"evt_saq_{i}") for i in ids))
    await queue.disconnect()


async def saq_work(redis_url: str, url: str, concurrency: int) -> None:
    from saq import Queue, Worker

    queue = Queue.from_url(redis_url)

    async def startup(ctx: dict[str, Any]) -> None:
        await _startup(ctx, url, concurrency)

    async def shutdown(ctx: dict[str, Any]) -> None:
        await ctx["session"].close()

    worker = Worker(queue, [saq_send], concurrency=concurrency, startup=startup, shutdown=shutdown)
    await queue.connect()
    try:
        await worker.start()
    finally:
        await queue.disconnect()


def main(argv: list[str]) -> None:
    action, system, redis_url = argv[:3]
    if system not in ("arq", "saq"):  # taskiq, dramatiq, streaq: each runs its own loop
        from bench import baselines_more

        baselines_more.main(action, system, redis_url, argv[3:])
    elif action == "enqueue":
        started = time.time()
        fn = arq_enqueue if system == "arq" else saq_enqueue
        asyncio.run(fn(redis_url, int(argv[3])))
        print(f"enqueued {argv[3]} {system} jobs in {time.time() - started:.2f}s", flush=True)
    elif action == "work":
        fn2 = arq_work if system == "arq" else saq_work
        asyncio.run(fn2(redis_url, argv[3], int(argv[4])))
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
