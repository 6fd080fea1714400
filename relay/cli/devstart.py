"""What ``relay dev`` checks before it starts anything: that no other ``relay dev`` runs
on its data folder, that its API port is free, and that the Redis it is given answers.

Each refusal is a :class:`click.ClickException` (one line, exit 1), raised before a
redis-server is started or a file other than the lock is written, so a second
``relay dev`` leaves a running one's Redis, record and token alone.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import time
from pathlib import Path
from typing import IO

import click

from relay.queue.errors import NO_ANSWER
from relay.queue.store import Store, connect
from relay.runner import listen_failure
from relay.settings import Settings

LOCK_FILE = "dev.lock"  # in the data folder: held (flock) by the relay dev running on it


def hold_folder(data_dir: Path, api_url: str) -> IO[str]:
    """Lock ``data_dir`` for this process: ``data_dir/dev.lock``, held (``flock``) while
    the returned file stays open and released by the kernel when the process ends, names
    this process and its API. Another relay dev holding it: refused, naming that one."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        lock = open(os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600), "r+")
    except OSError as exc:
        raise click.ClickException(f"relay dev: cannot use {data_dir}: {_reason(exc)}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock.read().strip() or "its pid not written yet"
        lock.close()
        raise click.ClickException(
            f"relay dev: another relay dev runs on {data_dir} ({holder}): stop it first, "
            "or give this one its own --data-dir and --port"
        ) from None
    lock.truncate(0)
    lock.write(f"pid {os.getpid()}, API on {api_url}\n")
    lock.flush()
    return lock


def check_port(host: str, port: int) -> None:
    """Refuse when ``host:port`` cannot be listened on (each address ``host`` names,
    as the API's own bind takes them)."""
    try:
        for family, _, _, _, address in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        ):
            socket.create_server(address, family=family).close()
    except OSError as exc:
        raise click.ClickException(
            f"relay dev: {listen_failure(host, port, exc)} (--port, RELAY_PORT)"
        ) from None


async def _ping(settings: Settings) -> None:
    store = Store(connect(settings), settings)
    try:
        await store.ping()
    finally:
        await store.close()


def wait_for_redis(settings: Settings, wait: float) -> None:
    """Return once the Redis of ``settings`` answers PING; after the first miss, say once
    which Redis relay dev waits for; refuse when it has not answered after ``wait``
    seconds."""
    deadline = time.monotonic() + wait
    said = False
    while True:
        try:
            asyncio.run(_ping(settings))
            return
        except NO_ANSWER as exc:
            error = (str(exc).strip().splitlines() or [type(exc).__name__])[0].rstrip(".")
        if time.monotonic() >= deadline:
            raise click.ClickException(
                f"relay dev: cannot reach Redis at {settings.redis_shown} after {wait:g}s: {error}"
            )
        if not said:
            click.echo(
                f"relay dev: waiting for Redis at {settings.redis_shown}: {error}; giving up "
                f"after {wait:g}s (--redis-wait SECONDS)",
                err=True,
            )
            said = True
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _reason(exc: OSError) -> str:
    return exc.strerror.lower() if exc.strerror else str(exc)
