"""taskiq, dramatiq and streaq: the same job as the arq and saq baselines (``baselines.py``).

Each runs in its own virtualenv (``bench/queues.py``) and is reached through
``python bench/baselines.py enqueue|work SYSTEM ...``. One worker process per library,
64 sends in flight, everything else at the library's defaults:

* **taskiq** (taskiq-redis ``RedisStreamBroker``: a Redis stream and consumer group, the
  broker with acknowledgements; no result backend, taskiq's default). taskiq's own
  worker loop (``taskiq.cli.worker.run.start_listen``, what ``taskiq worker`` runs in each
  child) runs in this process with ``--max-async-tasks 64``, so the pid metered is the
  one doing the work; ``taskiq worker`` would fork 2 children by default.
* **dramatiq** (``RedisBroker``) is thread-based: one process, ``Worker(worker_threads=64)``.
  The actor is ``async def`` (dramatiq's ``AsyncIO`` middleware runs it on one event-loop
  thread; each of the 64 worker threads waits on one coroutine), so the send is the
  same aiohttp code as everyone else's; a synchronous HTTP client in 64 threads would
  add a client difference on top of the queue one. ``dramatiq`` the CLI would start one
  process per core with 8 threads each.
* **streaq** (``Worker(concurrency=64)``; Redis streams through coredis). ``prefetch``
  stays at its default (= concurrency).

Enqueue: N jobs in chunks of 500 (taskiq ``kiq`` calls in flight at once, streaq
``enqueue_many`` pipelines, dramatiq ``send`` one after another: it is synchronous).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from bench.jobsend import send, startup

CHUNK = 500


# ---------------------------------------------------------------------------- taskiq


def _taskiq(redis_url: str, ctx: dict[str, Any]) -> tuple[Any, Any]:
    from taskiq_redis import RedisStreamBroker

    broker = RedisStreamBroker(url=redis_url)

    @broker.task(task_name="taskiq_send")
    async def taskiq_send(event_id: str) -> int:
        return await send(ctx, event_id, "bench-taskiq")

    return broker, taskiq_send


async def taskiq_enqueue(redis_url: str, n: int) -> None:
    broker, task = _taskiq(redis_url, {})
    await broker.startup()  # creates the consumer group before the first job is added
    for start in range(0, n, CHUNK):
        ids = range(start, min(n, start + CHUNK))
        await asyncio.gather(*(task.kiq(f"evt_taskiq_{i}") for i in ids))
    await broker.shutdown()


def taskiq_work(redis_url: str, url: str, concurrency: int) -> None:
    from taskiq import TaskiqEvents
    from taskiq.cli.worker.args import WorkerArgs
    from taskiq.cli.worker.run import start_listen

    ctx: dict[str, Any] = {}
    broker, _ = _taskiq(redis_url, ctx)

    @broker.on_event(TaskiqEvents.WORKER_STARTUP)
    async def _up(state: Any) -> None:
        await startup(ctx, url, concurrency)

    @broker.on_event(TaskiqEvents.WORKER_SHUTDOWN)
    async def _down(state: Any) -> None:
        await ctx["session"].close()

    args = WorkerArgs.from_cli(
        ["bench:broker", "--workers", "1", "--max-async-tasks", str(concurrency)]
    )
    args.broker = broker  # start_listen takes the broker object itself
    start_listen(args)  # until SIGTERM (its own handler)


# ---------------------------------------------------------------------------- dramatiq


def _dramatiq(redis_url: str, url: str = "", concurrency: int = 0) -> tuple[Any, Any, Any]:
    import dramatiq
    from dramatiq.asyncio import get_event_loop_thread
    from dramatiq.brokers.redis import RedisBroker
    from dramatiq.middleware import AsyncIO, Middleware

    ctx: dict[str, Any] = {}

    class CloseSession(Middleware):  # type: ignore[misc]
        def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
            if "session" in ctx:
                get_event_loop_thread().run_coroutine(ctx["session"].close())

    broker = RedisBroker(url=redis_url)
    broker.add_middleware(AsyncIO())
    broker.add_middleware(CloseSession())
    dramatiq.set_broker(broker)

    async def dramatiq_send(event_id: str) -> None:  # None: no Results middleware (default)
        if "session" not in ctx:  # first job, on the AsyncIO middleware's loop
            await startup(ctx, url, concurrency)
        await send(ctx, event_id, "bench-dramatiq")

    return dramatiq, broker, dramatiq.actor(dramatiq_send, broker=broker)


def dramatiq_enqueue(redis_url: str, n: int) -> None:
    _, broker, actor = _dramatiq(redis_url)
    for i in range(n):
        actor.send(f"evt_dramatiq_{i}")
    broker.close()


def dramatiq_work(redis_url: str, url: str, concurrency: int) -> None:
    from dramatiq import Worker

    _, broker, _ = _dramatiq(redis_url, url, concurrency)
    worker = Worker(broker, worker_threads=concurrency)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    worker.start()
    stop.wait()
    worker.stop()
    broker.close()


# ---------------------------------------------------------------------------- streaq


def _streaq(redis_url: str, url: str = "", concurrency: int = 64) -> tuple[Any, Any]:
    from streaq import Worker

    ctx: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan() -> Any:
        await startup(ctx, url, concurrency)
        try:
            yield ctx
        finally:
            await ctx["session"].close()

    worker = Worker(redis_url=redis_url, concurrency=concurrency, lifespan=lifespan)

    @worker.task
    async def streaq_send(event_id: str) -> int:
        return await send(ctx, event_id, "bench-streaq")

    return worker, streaq_send


async def streaq_enqueue(redis_url: str, n: int) -> None:
    worker, task = _streaq(redis_url)
    async with worker:
        for start in range(0, n, CHUNK):
            ids = range(start, min(n, start + CHUNK))
            await worker.enqueue_many([task.enqueue(f"evt_streaq_{i}") for i in ids])


def streaq_work(redis_url: str, url: str, concurrency: int) -> None:
    worker, _ = _streaq(redis_url, url, concurrency)
    worker.run_sync()  # until SIGTERM (its own handler)


# ---------------------------------------------------------------------------- entry


def main(action: str, system: str, redis_url: str, rest: list[str]) -> None:
    enqueue: dict[str, Callable[[str, int], Any]] = {
        "taskiq": lambda u, n: asyncio.run(taskiq_enqueue(u, n)),
        "dramatiq": dramatiq_enqueue,
        "streaq": lambda u, n: asyncio.run(streaq_enqueue(u, n)),
    }
    work: dict[str, Callable[[str, str, int], None]] = {
        "taskiq": taskiq_work,
        "dramatiq": dramatiq_work,
        "streaq": streaq_work,
    }
    if system not in work:
        raise SystemExit(f"unknown system {system!r}")
    if action == "enqueue":
        started = time.time()
        enqueue[system](redis_url, int(rest[0]))
        print(f"enqueued {rest[0]} {system} jobs in {time.time() - started:.2f}s", flush=True)
    elif action == "work":
        work[system](redis_url, rest[0], int(rest[1]))
    else:
        raise SystemExit(f"unknown action {action!r}")
