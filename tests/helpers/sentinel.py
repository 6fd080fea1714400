"""A Sentinel-watched Redis for tests and ``make crash``: 1 primary, 2 replicas, 3 Sentinels.

Every process is a real ``redis-server`` (the Sentinels: ``redis-server sentinel.conf
--sentinel``, :class:`relay.redisproc.RedisSentinel`) on a free port on 127.0.0.1 with
its files under ``data_dir``; every data node runs ``appendonly yes`` with ``appendfsync
always``. The Sentinels watch the primary as ``relay`` (quorum 2, down after 1 s).
:meth:`SentinelTopology.kill_primary` SIGKILLs whichever node is the primary now;
:meth:`wait_failover` waits until every Sentinel names another one and it takes writes;
:meth:`revive` starts a killed node again as a replica of the current primary.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import redis

from relay.redisproc import HOST, RedisSentinel, RedisServer

MASTER = "relay"
# a replica (re)joining gets its full sync at once, not after the default 5 s delay
NODE_ARGS = ["--repl-diskless-sync-delay", "0"]


def _client(port: int) -> redis.Redis:
    return redis.Redis(HOST, port, socket_timeout=1, socket_connect_timeout=1, retry=None)


def _until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
            if found:
                return found
        except redis.RedisError:
            pass
        if time.monotonic() >= deadline:
            raise RuntimeError(f"sentinel topology: {what} not reached after {timeout}s")
        time.sleep(0.05)


class SentinelTopology:
    """``start()`` / ``stop()`` (or ``with``); ``sentinels`` is what RELAY_REDIS_SENTINELS gets."""

    def __init__(
        self, data_dir: Path, *, replicas: int = 2, sentinels: int = 3, down_after_ms: int = 1000
    ) -> None:
        self.data_dir = Path(data_dir)
        self._down_after_ms = down_after_ms
        self.nodes = [RedisServer(data_dir=self.data_dir / "node0", extra_args=NODE_ARGS)]
        self._replicas = replicas
        self._sentinel_count = sentinels
        self.watchers: list[RedisSentinel] = []

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [(HOST, s.port) for s in self.watchers if s.port is not None]

    @property
    def sentinels_env(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.sentinels)

    def start(self) -> None:
        try:
            self.nodes[0].start()
            first = self.nodes[0].port
            for i in range(1, self._replicas + 1):
                node = RedisServer(
                    data_dir=self.data_dir / f"node{i}",
                    extra_args=[*NODE_ARGS, "--replicaof", HOST, str(first)],
                )
                node.start()
                self.nodes.append(node)
            self._wait_replicas(first, self._replicas)
            for i in range(self._sentinel_count):
                watcher = RedisSentinel(
                    data_dir=self.data_dir / f"sentinel{i}",
                    master_port=first,
                    down_after_ms=self._down_after_ms,
                )
                watcher.start()
                self.watchers.append(watcher)
            self._wait_sentinels_agree(first)
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> SentinelTopology:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
        for node in self.nodes:
            node.stop()

    def _wait_replicas(self, port: int, count: int, timeout: float = 15.0) -> None:
        def linked() -> bool:
            with _client(port) as c:
                info = c.info("replication")
            ups = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
            return len([u for u in ups if u.get("state") == "online"]) >= count

        _until(linked, timeout, f"{count} replicas online on {port}")

    def _wait_sentinels_agree(self, port: int, timeout: float = 20.0) -> None:
        """Every Sentinel names ``port`` and knows the replicas and the other Sentinels
        (a failover needs a majority of them to vote)."""

        def agreed() -> bool:
            for _, sport in self.sentinels:
                with _client(sport) as c:
                    info = c.sentinel_master(MASTER)
                if int(info["port"]) != port or info.get("is_sdown"):
                    return False
                if int(info["num-slaves"]) < self._replicas:
                    return False
                if int(info["num-other-sentinels"]) < self._sentinel_count - 1:
                    return False
            return True

        _until(agreed, timeout, f"all Sentinels agree on {port}")

    def primary_port(self) -> int:
        """The primary's port as the first answering Sentinel names it."""
        for _, sport in self.sentinels:
            try:
                with _client(sport) as c:
                    _, port = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
                    return int(port)
            except redis.RedisError:
                continue
        raise RuntimeError("no Sentinel answered")

    def node(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def primary(self) -> RedisServer:
        return self.node(self.primary_port())

    def replicas_have_everything(self, timeout_ms: int = 1000) -> int:
        """A write on a connection of its own, then ``WAIT <replicas> timeout_ms``: the
        number of replicas that have everything the primary acknowledged before it."""
        with _client(self.primary_port()) as c:
            c.set("test:wait-marker", "1")
            return int(c.execute_command("WAIT", self._replicas, timeout_ms))

    def kill_primary(self) -> RedisServer:
        """SIGKILL the primary. Sentinel tries a failover of one master at most once per
        2 x failover-timeout (6 s): kills closer together wait longer to be healed."""
        node = self.primary()
        node.kill()
        return node

    def wait_failover(self, old_port: int, timeout: float = 20.0) -> int:
        """Until every Sentinel names a primary other than ``old_port`` and it takes
        writes; returns its port."""

        def promoted() -> int | None:
            ports = set()
            for _, sport in self.sentinels:
                with _client(sport) as c:
                    _, port = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
                ports.add(int(port))
            if len(ports) != 1 or old_port in ports:
                return None
            (port,) = ports
            with _client(port) as c:
                if c.info("replication").get("role") != "master":
                    return None
                c.set("test:failover-probe", "1")
            return port

        port: int = _until(promoted, timeout, f"a primary other than {old_port}")
        return port

    def revive(self, node: RedisServer) -> None:
        """Start a killed node again as a replica of the current primary."""
        primary = self.primary_port()
        node.extra_args = [*NODE_ARGS, "--replicaof", HOST, str(primary)]
        node.start()
        self._wait_replicas(primary, self._replicas)

        def all_seen() -> bool:  # a Sentinel may promote it (or the other) next time
            for _, sport in self.sentinels:
                with _client(sport) as c:
                    known = c.sentinel_slaves(MASTER)
                good = [
                    r
                    for r in known
                    if not r.get("is_sdown")
                    and not r.get("is_disconnected")
                    and r.get("master-link-status") == "ok"
                ]
                if len(good) < self._replicas:
                    return False
            return True

        _until(all_seen, 20.0, "every Sentinel sees the replicas up")
