"""A private PostgreSQL server for tests: ``initdb`` into a temp dir, ``postgres`` on a
free port on 127.0.0.1 (never the machine's own server on 5432), stopped at the end.

Postgres refuses to run as root; as root the data dir is given to the ``postgres`` OS
user and the binaries run as that user (``subprocess``'s ``user=``).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from relay.redisproc import free_port

INSTALL_HINT = (
    "no PostgreSQL server binaries (initdb, postgres): install them "
    "(Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql)"
)


def pg_bindir() -> Path | None:
    """Where ``initdb`` and ``postgres`` are: the newest /usr/lib/postgresql/*/bin, else PATH."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PgServer:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="relay-pg-"))
        self.data = self.root / "data"
        self.proc: subprocess.Popen[bytes] | None = None
        self.user: str | None = "postgres" if os.geteuid() == 0 else None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run(args, check=True, capture_output=True, user=self.user, cwd=self.root)

    def start(self) -> None:
        if self.user is not None:
            shutil.chown(self.root, self.user, self.user)
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        self._spawn()

    def _spawn(self) -> None:
        log = open(self.root / "postgres.log", "ab")
        self.proc = subprocess.Popen(
            [
                str(self.bindir / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.root}",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            user=self.user,
            cwd=self.root,
        )
        log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {(self.root / 'postgres.log').read_text()}")
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def pause(self) -> None:
        """Stop the server and keep its data (:meth:`start_again` brings it back)."""
        self._halt()

    def start_again(self) -> None:
        """The paused server again, on its port: clients reconnect to the same DSN."""
        self._spawn()

    def stop(self) -> None:
        self._halt()
        shutil.rmtree(self.root, ignore_errors=True)

    def _halt(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: ends open sessions
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
