"""Run the long-lived processes: ``api``, ``worker`` and ``dev`` (both, on a laptop)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import signal
import sys
from pathlib import Path

import structlog
from aiohttp import web

from relay import logs
from relay.api import create_app
from relay.delivery.attempt import BeforeSend
from relay.delivery.worker import Worker
from relay.ops import metrics
from relay.ops.retention import Retention
from relay.queue.base import answers
from relay.queue.errors import NOT_UP
from relay.queue.store import Claimed, Store, connect
from relay.redisproc import RedisServer, free_port
from relay.settings import Settings

log = structlog.get_logger("relay")


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def _start_store(store: Store, stop: asyncio.Event) -> bool:
    """Load the scripts, waiting while Redis is down or loading (a process started or
    restarted during a Redis restart waits for it rather than exiting). False: stopped."""
    delay = 0.1
    while True:
        try:
            await store.start()
            return True
        except NOT_UP as exc:
            log.warning("redis.unavailable", error=str(exc), retry_in_s=delay)
        try:
            await asyncio.wait_for(stop.wait(), delay)
            return False
        except TimeoutError:
            delay = min(delay * 2, 2.0)


def crash_hook(marker: str) -> BeforeSend | None:
    """Test hook (``RELAY_TEST_CRASH_MARKER``): a delivery whose body contains ``marker``
    kills its worker process (exit 86) before its request, every time: a poison message."""
    if not marker:
        return None

    def crash(claim: Claimed) -> None:
        if marker in claim.body:
            os._exit(86)

    return crash


async def run_worker(
    store: Store, stop: asyncio.Event, worker: Worker | None = None, *, burst: bool = False
) -> None:
    """What a worker process runs: the worker and, beside it, the retention sweeper
    (every ``RELAY_SWEEP_INTERVAL``) and, when ``RELAY_METRICS_PORT`` is set, a /metrics
    exporter, which stops with the worker."""
    if worker is None:
        hook = crash_hook(store.settings.test_crash_marker)
        worker = Worker(store, store.settings, before_send=hook)
    settings = worker.settings
    exporter = None  # each replica serves its own /metrics when RELAY_METRICS_PORT is set
    if settings.metrics_port:
        exporter = await metrics.serve(store, settings.host, settings.metrics_port)
    sweeper = asyncio.create_task(Retention(store).run(), name="relay-sweeper")
    try:
        await worker.run(stop, burst=burst)
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
        if exporter is not None:
            await exporter.cleanup()


async def serve(settings: Settings, *, with_api: bool, with_worker: bool) -> None:
    """Run the API and/or a worker until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    _stop_on_signals(stop)
    store = Store(connect(settings), settings)
    if not await _start_store(store, stop):
        await store.close()
        return
    runner = None
    tasks = []
    try:
        if with_api:
            runner = web.AppRunner(create_app(settings, store), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, settings.host, settings.port).start()
            log.info("api.listening", url=f"http://{settings.host}:{settings.port}")
        if with_worker:
            tasks.append(asyncio.create_task(run_worker(store, stop)))
        await stop.wait()
        log.info("shutdown.begin")
        await asyncio.gather(*tasks)
    finally:
        if runner is not None:
            await runner.cleanup()
        await store.close()


def run(settings: Settings, *, with_api: bool, with_worker: bool) -> None:
    logs.configure(settings.log_format, settings.log_level)
    asyncio.run(serve(settings, with_api=with_api, with_worker=with_worker))


def run_dev(settings: Settings, *, redis_url_given: bool, data_dir: Path) -> None:
    """API + worker in one process, with a private redis-server when none answers."""
    data_dir.mkdir(parents=True, exist_ok=True)
    server = None
    overrides: dict[str, object] = {}
    if not redis_url_given and not answers(settings.redis_url):
        server = RedisServer(
            port=free_port(), data_dir=data_dir / "redis", appendonly=True, appendfsync="everysec"
        )
        (data_dir / "redis").mkdir(exist_ok=True)
        server.start()
        overrides["redis_url"] = server.url
        print(
            f"relay dev: no Redis answered on {settings.redis_url}; started a private "
            f"redis-server at {server.url} (append-only file in {data_dir / 'redis'})",
            file=sys.stderr,
        )
    if not settings.api_tokens and not settings.auth_disabled:
        token_file = data_dir / "api-token"
        if not token_file.exists():
            token_file.write_text(secrets.token_urlsafe(24) + "\n")
            token_file.chmod(0o600)
        overrides["api_tokens"] = (token_file.read_text().strip(),)
    if overrides:
        settings = dataclasses.replace(settings, **overrides)  # type: ignore[arg-type]
    url = f"http://{settings.host}:{settings.port}"
    token = settings.api_tokens[0] if settings.api_tokens else "(auth disabled)"
    print(
        f"\nrelay dev: API on {url}, dashboard on {url}/ui/   (Ctrl-C stops)\n"
        f"relay dev: API token: {token}\n"
        f"relay dev: try  curl -H 'Authorization: Bearer {token}' {url}/v1/stats\n",
        file=sys.stderr,
        flush=True,
    )
    try:
        run(settings, with_api=True, with_worker=True)
    finally:
        if server is not None:
            server.stop()
