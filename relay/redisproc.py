"""Start and control real ``redis-server`` processes (stdlib + ``redis`` only).

Used by ``relay dev`` (a private Redis when none answers), the pytest session fixtures,
the crash-injection suites (SIGKILL Redis and restart it on the same data dir; SIGKILL a
Sentinel-watched primary) and the Redis Cluster tests. Servers bind to 127.0.0.1, keep
their files in ``data_dir`` and run in their own session: a runner's Ctrl-C misses them.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, Self

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = ["RedisBinaryMissing", "RedisCluster", "RedisSentinel", "RedisServer", "free_port"]
__all__ += ["redis_binary"]

HOST = "127.0.0.1"
_POLL = 0.02  # seconds between readiness probes
_MAX_CLUSTER_PORT = 55535  # a cluster node's bus listens on port + 10000
_INSTALL_HINT = (
    "redis-server not found on PATH: install it (Debian/Ubuntu: apt-get install redis-server; "
    "macOS: brew install redis) or make Docker available for testcontainers"
)


class RedisBinaryMissing(RuntimeError):
    """Raised when the ``redis-server`` (or ``redis-cli``) executable cannot be found."""


def _die_with_parent() -> None:
    """In the child: SIGTERM when the process that started us dies (Linux; elsewhere a
    no-op), so a test run or ``relay dev`` killed without cleanup leaves no redis-server."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port(host: str = HOST) -> int:
    """Return a TCP port that is free on ``host`` right now (bind to port 0, read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _free_cluster_port() -> int:
    """A free port P <= 55535 whose cluster bus port P + 10000 is free as well."""
    for _ in range(200):
        port = free_port()
        if port <= _MAX_CLUSTER_PORT:
            with suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bus:
                bus.bind((HOST, port + 10000))
                return port
    raise RuntimeError("no free port pair (P, P + 10000) found for a cluster node")


def redis_binary() -> str | None:
    """Return the path of ``redis-server`` on PATH, or None if it is not installed."""
    return shutil.which("redis-server")


def _probe_client(port: int) -> redis.Redis:
    # No retries: redis-py's default backoff spends ~4 s on each refused connection.
    no_retry = Retry(NoBackoff(), 0)
    return redis.Redis(HOST, port, socket_timeout=1, socket_connect_timeout=1, retry=no_retry)


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log file)"


class _Managed:
    """Context-manager support: ``with obj:`` calls ``start()``, leaving calls ``stop()``."""

    def start(self, timeout: float = 10.0) -> None: ...

    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@dataclass(kw_only=True)
class RedisServer(_Managed):
    """One ``redis-server`` process on 127.0.0.1 with its files in ``data_dir``.

    ``port`` defaults to a free port picked at the first ``start()`` (<= 55535 for cluster
    nodes) and is kept afterwards, so ``restart()`` comes back on the same address.  With
    ``appendonly`` and ``appendfsync="always"`` every acknowledged write survives SIGKILL.
    ``binary`` defaults to ``redis-server`` on PATH.
    """

    port: int | None = None
    data_dir: Path
    appendonly: bool = True
    appendfsync: str = "always"
    cluster: bool = False
    extra_args: Sequence[str] = ()
    binary: str | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://{HOST}:{self.port}/0"

    @property
    def log_file(self) -> Path:
        """The server's log file, ``data_dir/redis.log``."""
        return Path(self.data_dir) / "redis.log"

    @property
    def pid(self) -> int | None:
        """PID of the last started process, or None if never started."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def _resolve_binary(self) -> str:
        binary = shutil.which(self.binary) if self.binary else redis_binary()
        if binary is None:
            raise RedisBinaryMissing(_INSTALL_HINT)
        return binary

    def command(self) -> list[str]:
        """The full ``redis-server`` command line for the current settings."""
        data = Path(self.data_dir).resolve()
        args = [self._resolve_binary(), "--port", str(self.port), "--bind", HOST]
        args += ["--dir", str(data), "--logfile", str(data / "redis.log"), "--daemonize", "no"]
        args += ["--save", "", "--appendonly", "yes" if self.appendonly else "no"]
        args += ["--appendfsync", self.appendfsync, "--protected-mode", "no"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"]
            args += ["--cluster-config-file", str(data / "nodes.conf")]
        return [*args, *self.extra_args]

    def start(self, timeout: float = 10.0) -> None:
        """Spawn the server; return once it answers PING and has finished loading.

        Raises ``RedisBinaryMissing`` if the executable is missing, and ``RuntimeError``
        with the tail of ``redis.log`` if the process exits or ``timeout`` passes.
        """
        if self.running:
            raise RuntimeError(f"redis-server already running on port {self.port}")
        self._resolve_binary()
        if self.port is None:
            self.port = _free_cluster_port() if self.cluster else free_port()
        Path(self.data_dir).mkdir(parents=True, exist_ok=True)
        # Own session: a test runner's Ctrl-C (sent to its process group) does not hit Redis.
        null = subprocess.DEVNULL
        self._proc = subprocess.Popen(
            self.command(),
            stdin=null,
            stdout=null,
            stderr=null,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        try:
            self._wait_ready(self._proc, timeout)
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with _probe_client(self.port or 0) as client:
            while True:
                if proc.poll() is not None:
                    self._fail(f"exited with code {proc.returncode}")
                try:
                    # a Sentinel has no persistence section: nothing to load
                    if client.ping() and client.info("persistence").get("loading", 0) == 0:
                        return
                except redis.RedisError:  # refused, LOADING, timeout: keep polling
                    pass
                if time.monotonic() >= deadline:
                    self._fail(f"not ready after {timeout}s")
                time.sleep(_POLL)

    def _fail(self, why: str) -> NoReturn:
        tail = _log_tail(self.log_file)
        raise RuntimeError(f"redis-server on port {self.port} {why}; {self.log_file}:\n{tail}")

    def kill(self) -> None:
        """SIGKILL the process and reap it (crash simulation); no-op if not running."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGKILL)
            self._proc.wait()

    def stop(self) -> None:
        """SIGTERM (graceful shutdown), wait up to 5 s, then SIGKILL; no-op if not running."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self, timeout: float = 10.0) -> None:
        """Stop if running, start again on the same port and data dir (replaying the AOF)."""
        self.stop()
        self.start(timeout=timeout)


@dataclass(kw_only=True)
class RedisSentinel(RedisServer):
    """A Sentinel (``redis-server sentinel.conf --sentinel``) watching ``master_port`` as
    ``master`` (quorum 2, down after ``down_after_ms``, failover timeout 3 s)."""

    master_port: int
    master: str = "relay"
    down_after_ms: int = 1000

    def command(self) -> list[str]:
        data = Path(self.data_dir).resolve()
        conf, watch = data / "sentinel.conf", f"sentinel %s {self.master} "
        lines = [f"port {self.port}", f"bind {HOST}", f"dir {data}", "protected-mode no"]
        lines += [f"logfile {data / 'redis.log'}", "daemonize no"]
        lines += [watch % "monitor" + f"{HOST} {self.master_port} 2"]
        lines += [watch % "down-after-milliseconds" + str(self.down_after_ms)]
        lines += [watch % "failover-timeout" + "3000"]
        conf.write_text("\n".join(lines) + "\n")
        return [self._resolve_binary(), str(conf), "--sentinel"]


class RedisCluster(_Managed):
    """A Redis Cluster of ``masters`` nodes, each with ``replicas`` replicas, in
    ``data_dir/node<i>``.

    ``start()`` launches the nodes, joins them with ``redis-cli --cluster create`` and
    waits until every node reports ``cluster_state:ok`` and every master has its replicas
    linked.
    """

    def __init__(
        self, *, data_dir: Path, masters: int = 3, replicas: int = 0, binary: str | None = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.replicas = replicas
        self._nodes = [
            RedisServer(data_dir=self.data_dir / f"node{i}", cluster=True, binary=binary)
            for i in range(masters * (1 + replicas))
        ]

    @property
    def nodes(self) -> list[RedisServer]:
        """The node servers, in creation order."""
        return list(self._nodes)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every started node, for cluster clients."""
        return [(HOST, n.port) for n in self._nodes if n.port is not None]

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:P/0`` of the first node."""
        return self._nodes[0].url

    def start(self, timeout: float = 20.0) -> None:
        """Start all nodes, create the cluster and wait (``timeout``) for ``cluster_state:ok``."""
        try:
            for node in self._nodes:
                node.start()
            cli = shutil.which("redis-cli")
            if cli is None:
                raise RedisBinaryMissing(_INSTALL_HINT.replace("redis-server", "redis-cli", 1))
            addrs = [f"{host}:{port}" for host, port in self.startup_nodes]
            cmd = [cli, "--cluster", "create", *addrs, "--cluster-replicas", str(self.replicas)]
            cmd.append("--cluster-yes")
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
            if res.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{res.stdout}{res.stderr}")
            self._wait_ok(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ok(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with ExitStack() as stack:
            clients = [stack.enter_context(_probe_client(p)) for _, p in self.startup_nodes]
            while True:
                try:
                    ok = all(c.cluster("INFO")["cluster_state"] == "ok" for c in clients)
                    if ok and all(_linked(c, self.replicas) for c in clients):
                        return
                except redis.RedisError:  # a node not answering yet: keep polling
                    pass
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"cluster not ok after {timeout}s: {self.startup_nodes}")
                time.sleep(_POLL)

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 5 s)."""
        for node in self._nodes:
            node.stop()


def _linked(client: redis.Redis, replicas: int) -> bool:
    """A master has ``replicas`` replicas online; a replica is linked to its master."""
    info = client.info("replication")
    if info["role"] == "master":
        online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
        return sum(r.get("state") == "online" for r in online) >= replicas
    return bool(info.get("master_link_status") == "up")
