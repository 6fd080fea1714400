"""What ``relay dev`` checks before it starts anything: that no other ``relay dev`` runs
on its data folder, and that its API port is free.

Each refusal is a :class:`click.ClickException` (one line, exit 1), raised before a
redis-server is started or a file other than the lock is written, so a second
``relay dev`` leaves a running one's Redis, record and token alone.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import IO

import click

from relay.runner import listen_failure

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


def _reason(exc: OSError) -> str:
    return exc.strerror.lower() if exc.strerror else str(exc)
