"""Run the long-lived processes: ``api``, ``worker`` and ``dev`` (both, on a laptop)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import resource
import secrets
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import structlog

from relay import logs, tracing
from relay.api import create_app
from relay.api import server as api_server
from relay.archive.history import History
from relay.archive.tables import Tables
from relay.connectors.opsevents import OpsRelay
from relay.delivery.attempt import BeforeSend
from relay.delivery.worker import Worker, stop_tasks
from relay.domain import redisfacts
from relay.ops import metrics
from relay.ops.archiving import Mover
from relay.ops.replays import ReplayRunner
from relay.ops.retention import Retention
from relay.publishing import Publisher
from relay.queue.base import answers
from relay.queue.errors import NOT_UP
from relay.queue.store import Claimed, Store, connect
from relay.redisproc import RedisServer, free_port
from relay.sandbox import Sandbox
from relay.settings import DEV_REDIS_RECORD, Settings, TestHooks

T = TypeVar("T")

log = structlog.get_logger("relay")


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def _until_up(
    stop: asyncio.Event, ask: Callable[[], Awaitable[T]], redis: str
) -> tuple[bool, T | None]:
    """``ask()``, again while Redis is down or loading (a process started or restarted
    during a Redis restart or a failover waits for it rather than exiting), logging which
    Redis it waits for (``redis``, its password hidden): ``(True, its answer)``, or
    ``(False, None)`` when stopped first."""
    delay = 0.1
    while True:
        try:
            return True, await ask()
        except NOT_UP as exc:
            log.warning("redis.unavailable", redis=redis, error=str(exc), retry_in_s=delay)
        try:
            await asyncio.wait_for(stop.wait(), delay)
            return False, None
        except TimeoutError:
            delay = min(delay * 2, 2.0)


class RedisRefused(RuntimeError):
    """The Redis this process would run on is unsafe for it (see :func:`check_redis`)."""


class CannotListen(RuntimeError):
    """A port this process serves on is taken, or its address is not one of this host's."""


def listen_failure(host: str, port: int, exc: OSError) -> str:
    """Why ``host:port`` could not be listened on, in words (no errno, no bind tuple)."""
    if isinstance(exc, socket.gaierror) or not exc.errno or exc.errno < 0:
        why = exc.strerror or str(exc)
    else:
        why = os.strerror(exc.errno)
    return f"cannot listen on {host}:{port}: {why.lower()}"


async def listening(start: Awaitable[T], host: str, port: int, setting: str) -> T:
    """Await ``start`` (a server starting on ``host:port``); CannotListen, naming the
    address and the ``setting`` that gives it, when the bind fails."""
    try:
        return await start
    except OSError as exc:
        raise CannotListen(f"{listen_failure(host, port, exc)} ({setting})") from None


async def check_redis(store: Store) -> None:
    """Refuse an evicting Redis (RedisRefused); log a warning for one without persistence
    or whose settings cannot be read, and set ``relay_redis_persistence`` (the least
    durable node's). On a Redis Cluster every primary is checked."""
    try:
        by_node = await store.server_facts_by_node()
    except NOT_UP as exc:  # gone again since the scripts loaded: checked on the next start
        log.warning("redis.facts_unread", error=str(exc))
        return
    metrics.REDIS_PERSISTENCE.set(min(f.persistence_level for _, f in by_node))
    for node, facts in by_node:
        verdict = redisfacts.judge(facts)
        if verdict.refuse:
            raise RedisRefused(f"node {node}: {verdict.refuse}" if node else verdict.refuse)
        for warning in verdict.warnings:
            log.warning(
                "redis.unsafe", warning=warning, persistence=facts.persistence, node=node or None
            )


def crash_hook(marker: str) -> BeforeSend | None:
    """Test hook (``RELAY_TEST_CRASH_MARKER``): a delivery whose body contains ``marker``
    kills its worker process (exit 86) before its request, every time: a poison message."""
    if not marker:
        return None

    def crash(claim: Claimed) -> None:
        if marker.encode() in claim.body:
            os._exit(86)

    return crash


async def run_worker(
    store: Store,
    stop: asyncio.Event,
    worker: Worker | None = None,
    *,
    burst: bool = False,
    hooks: TestHooks | None = None,
) -> None:
    """What a worker process runs: the worker and, beside it, the retention sweeper
    (every ``RELAY_SWEEP_INTERVAL``), the replay jobs it leases (``ReplayRunner``), the ops
    relay (operational events) and, when ``RELAY_METRICS_PORT`` is set, a /metrics
    exporter, which stop with the worker."""
    if worker is None:
        hook = crash_hook(hooks.crash_marker) if hooks else None
        worker = Worker(store, store.settings, before_send=hook)
    settings = worker.settings
    exporter = None  # each replica serves its own /metrics when RELAY_METRICS_PORT is set
    if settings.metrics_port:
        host, port = settings.host, settings.metrics_port
        exporter = await listening(
            metrics.serve(store, host, port), host, port, "--metrics-port, RELAY_METRICS_PORT"
        )
    sweeper = asyncio.create_task(Retention(store).run(), name="relay-sweeper")
    replays_stop = asyncio.Event()  # reconciliation replay jobs (relay/ops/replays.py)
    history = History.of(store)  # replay jobs walk the archive too (RELAY_ARCHIVE_URL)
    replay_runner = ReplayRunner(store, history=history)
    replays = asyncio.create_task(replay_runner.run(replays_stop), name="relay-replays")
    # operational events from the ops outboxes into the ops app; the ops app's endpoint
    # filters and its types' schemas run in a sandbox, as every tenant's do
    sandbox = Sandbox()
    ops = OpsRelay(store, Publisher(store, judge=sandbox, relay_events=True))
    worker.on_ops = ops.poke
    relay_task = asyncio.create_task(ops.run(stop), name="relay-ops-events")
    mover = None  # the archive mover (relay/ops/archiving.py), with RELAY_ARCHIVE_URL set
    if settings.archive_url:
        tables = Tables(settings.archive_url, settings.archive_schema, size=2)
        mover = Mover(store, tables, on_behind=ops.archive_behind)
    moving = asyncio.create_task(mover.run(stop), name="relay-archive") if mover else None
    try:
        await worker.run(stop, burst=burst)
    finally:
        replays_stop.set()
        if moving is not None and mover is not None:
            await stop_tasks(moving)
            await mover.tables.close()
        await stop_tasks(sweeper, relay_task)
        await sandbox.close()
        await asyncio.gather(replays, return_exceptions=True)
        await history.close()
        if exporter is not None:
            await exporter.cleanup()


async def open_store(settings: Settings, stop: asyncio.Event) -> Store | None:
    """A Store ready to serve, waiting for Redis while it is down (None: stopped first):
    its scripts loaded, Redis checked (:func:`check_redis`), and no key of an older layout
    left (RedisRefused). The layout probe waits too: a process started during a failover
    never runs on a Redis it could not check."""
    store = Store(connect(settings), settings)
    shown = settings.redis_shown
    up, _ = await _until_up(stop, store.start, shown)  # the scripts loaded
    try:
        if up:
            await check_redis(store)
            up, old = await _until_up(stop, store.legacy_left, shown)
            if old:
                raise RedisRefused(
                    f"it holds relay's key layout {old} under the prefix "
                    f"{settings.key_prefix!r}: stop every relay process, run `relay migrate`,"
                    " then start this version"
                )
    except RedisRefused:
        await store.close()
        raise
    if not up:
        await store.close()
        return None
    return store


async def serve(
    settings: Settings, *, with_api: bool, with_worker: bool, hooks: TestHooks | None = None
) -> None:
    """Run the API and/or a worker until SIGTERM or SIGINT, or until the worker fails
    (its exception raised here, the API stopped with it)."""
    stop = asyncio.Event()
    _stop_on_signals(stop)
    store = await open_store(settings, stop)
    if store is None:
        return
    runner = None
    tasks = []
    try:
        if with_api:
            host, port = settings.host, settings.port
            runner = await listening(
                api_server.start(create_app(settings, store), settings, host, port),
                host,
                port,
                "--port, RELAY_PORT",
            )
            log.info(
                "api.listening",
                url=f"http://{host}:{port}",
                open_files=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            )
        if with_worker:
            tasks.append(asyncio.create_task(run_worker(store, stop, hooks=hooks)))
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        stop.set()
        log.info("shutdown.begin")
        await asyncio.gather(*tasks)
    finally:
        if runner is not None:
            await runner.cleanup()
        await store.close()


# The cyclic garbage collector's first generation is collected after this many net new
# container objects (Python's default: 700). A worker allocates tens of short-lived
# objects per send (tasks, futures, requests), the API as many per publish (the request,
# its headers, the parsed body and models): at 700 a worker would collect every dozen
# deliveries, and run a full collection (every object, the imported modules' too) every
# ~1,500. Reference counting frees nearly all of them anyway; at most this many objects
# of cyclic garbage wait for the next collection.
GC_GEN0_THRESHOLD = 10_000


def tune_gc() -> None:
    """Fewer, cheaper garbage collections for a long-lived relay process: what start-up
    made (modules, settings) is frozen out of every collection (``gc.freeze``), and the
    first generation is collected every ``GC_GEN0_THRESHOLD`` net allocations."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def run_loop(settings: Settings, main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to its end on the event loop ``RELAY_EVENT_LOOP`` names: uvloop (the
    default) or asyncio's own."""
    factory = None
    if settings.event_loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


# A soft open-files limit is raised to at most this when the hard one is unlimited.
OPEN_FILES_UNLIMITED = 1 << 20


def raise_open_files() -> int:
    """Raise this process's soft open-files limit (RLIMIT_NOFILE) to its hard limit:
    every connection, to a client, Redis or an endpoint, holds one. Returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = OPEN_FILES_UNLIMITED if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # a system cap under the hard limit (macOS)
            log.warning("open_files.not_raised", soft=soft, hard=hard, error=str(exc))
    return soft


def run(
    settings: Settings, *, with_api: bool, with_worker: bool, hooks: TestHooks | None = None
) -> None:
    logs.configure(settings.log_format, settings.log_level)
    raise_open_files()
    tune_gc()
    if tracing.setup(settings):  # only with OTEL_* set (docs/guides/tracing.md)
        log.info(
            "tracing.on",
            exporters=list(settings.tracing_exporters),
            service=settings.tracing_service,
        )
    try:
        run_loop(settings, serve(settings, with_api=with_api, with_worker=with_worker, hooks=hooks))
    except RedisRefused as exc:  # one line, no traceback, exit 1
        print(f"relay: refusing to start on {settings.redis_shown}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except CannotListen as exc:
        print(f"relay: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        tracing.shutdown()  # export the spans still buffered


def _which_redis(settings: Settings, data_dir: Path) -> tuple[RedisServer | None, str]:
    """The Redis ``relay dev`` uses and a sentence saying why: RELAY_REDIS_URL, else the
    default URL if something answers there (unless a private one is asked for), else a
    private redis-server started here."""
    shown = settings.redis_shown
    if settings.redis_url_given:
        return None, f"Redis {shown}"
    if not settings.dev_private_redis and answers(settings.redis_url):
        return None, (
            f"Redis {shown}: a Redis already answered there, and relay dev uses it (keys "
            f"under {settings.key_prefix}:). For a private one: relay dev --private-redis, "
            "RELAY_DEV_PRIVATE_REDIS=1 or make run PRIVATE_REDIS=1"
        )
    (data_dir / "redis").mkdir(exist_ok=True)
    server = RedisServer(
        port=free_port(), data_dir=data_dir / "redis", appendonly=True, appendfsync="everysec"
    )
    server.start()
    why = "asked for" if settings.dev_private_redis else f"none answered on {settings.redis_url}"
    return server, (
        f"Redis {server.url}: a private redis-server started here ({why}; append-only "
        f"file in {data_dir / 'redis'}; it stops with relay dev)"
    )


def run_dev(settings: Settings, *, data_dir: Path) -> None:
    """API + worker in one process, with a private redis-server when none answers (or
    when asked). The Redis it uses is printed and recorded in ``data_dir/redis-url`` for
    the operator commands, and the record removed when it stops."""
    data_dir.mkdir(parents=True, exist_ok=True)
    server, redis_line = _which_redis(settings, data_dir)
    overrides: dict[str, object] = {}
    token_from = ""
    if server is not None:
        overrides["redis_url"] = server.url
        overrides["redis_url_source"] = "relay dev's private redis-server"
    if not settings.api_tokens and not settings.auth_disabled:
        token_file = data_dir / "api-token"
        if not token_file.exists():
            token_file.write_text(secrets.token_urlsafe(24) + "\n")
            token_file.chmod(0o600)
        overrides["api_tokens"] = (token_file.read_text().strip(),)
        token_from = f"   (kept in {token_file})"
    if overrides:
        settings = dataclasses.replace(settings, **overrides)  # type: ignore[arg-type]
    record = data_dir / DEV_REDIS_RECORD
    written = settings.redis_url + "\n"
    record.write_text(written)  # may hold a password: only the owner reads it
    record.chmod(0o600)
    url = f"http://{settings.host}:{settings.port}"
    token = settings.api_tokens[0] if settings.api_tokens else "(auth disabled)"
    print(
        f"\nrelay dev: API on {url}, dashboard on {url}/ui/   (Ctrl-C stops)\n"
        f"relay dev: {redis_line}\n"
        f"relay dev: recorded in {record}: relay stats, relay dead, ... run from this "
        "folder use it\n"
        f"relay dev: API token: {token}{token_from}\n"
        f"relay dev: try  curl -H 'Authorization: Bearer {token}' {url}/v1/stats\n",
        file=sys.stderr,
        flush=True,
    )
    try:
        run(settings, with_api=True, with_worker=True)
    finally:
        with contextlib.suppress(OSError):
            if record.read_text() == written:  # not one a newer relay dev wrote
                record.unlink()
        if server is not None:
            server.stop()
