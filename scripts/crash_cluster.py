"""``scripts/crash_failover.py --cluster``: the kill-the-master rounds on a Redis Cluster.

Per round, on 127.0.0.1 in the round's temporary directory: a cluster of 3 masters,
each with one replica (relay.redisproc: every node ``appendonly yes``, ``appendfsync
always``, ``cluster-node-timeout`` 2 s), ``RELAY_SHARDS=3`` with one shard on each
master, the API and the worker processes given ``RELAY_REDIS_CLUSTER=1`` and the
round's ``RELAY_ACK_REPLICAS``. Events are published and workers SIGKILLed as in the
Sentinel rounds; ``--kills`` times per round a master is SIGKILLed (one that has a
replica linked, never the node the processes were given as their start-up node), the
cluster promotes its replica by itself, and the dead node, started again, rejoins as
the new master's replica before the next kill. The outage runs from the SIGKILL to the
replica reporting itself master.

Before each kill the window of the Sentinel rounds is opened for ``--lag`` seconds, on
the victim alone: the workers are SIGSTOPped, the victim's replica is given credentials
its master refuses and its link is cut (``CLIENT KILL TYPE replica`` on the master),
publishing goes on; then the master is SIGKILLed, the replica gets its credentials back
(the cluster promotes it all the same: its data is younger than
``cluster-replica-validity-factor`` allows) and the workers go on. With
``RELAY_ACK_REPLICAS=1`` nothing published in the window is answered 201 (no replica
confirms it; the client's retry lands on the new master); with ``0`` what the victim
answered then is lost with it. ``--lag 0`` kills with the link intact.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from crash import PREFIX, Config, Round
from crash_failover import FailoverRound
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncCluster

from relay.domain import ids
from relay.queue.keys import Keys
from relay.redisproc import HOST, RedisCluster, RedisServer, free_port
from relay.redisslots import SlotControl

SHARDS = 3


class _Cluster:
    """What ``crash.Round`` asks of ``self.redis``, for a 3 + 3 cluster."""

    def __init__(self, data: Path, started: Callable[[], None]) -> None:
        self.proc = RedisCluster(data_dir=data, masters=3, replicas=1)
        self.slots: SlotControl | None = None
        self.started = started

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def port(self) -> int | None:
        return self.proc.nodes[0].port

    def start(self, timeout: float = 60.0) -> None:
        self.proc.start(timeout=timeout)
        self.slots = SlotControl(self.proc)
        self.slots.spread([Keys(PREFIX, SHARDS).shard(n).due for n in range(SHARDS)])
        self.started()

    def stop(self) -> None:
        if self.slots is not None:
            self.slots.close()
        self.proc.stop()

    def role(self, port: int) -> dict[str, Any]:
        with redis.Redis(HOST, port, decode_responses=True, socket_timeout=2) as c:
            return dict(c.info("replication"))

    def victim(self, rng: random.Random) -> tuple[RedisServer, int]:
        """A master other than the start-up node with a linked replica, and that replica."""
        live = [n for n in self.proc.nodes if n.pid is not None and n.port is not None]
        pairs = []
        for node in live:
            try:
                info = self.role(node.port)  # type: ignore[arg-type]
            except redis.RedisError:
                continue
            if info["role"] == "slave" and info.get("master_link_status") == "up":
                master = int(info["master_port"])
                if master != self.port:
                    pairs.append((master, node.port))
        if not pairs:
            raise RuntimeError("no master with a linked replica to kill")
        master, replica = rng.choice(sorted(pairs))
        return next(n for n in self.proc.nodes if n.port == master), int(replica)  # type: ignore[arg-type]

    def wait_promoted(self, replica: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.role(replica)["role"] == "master":
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the replica on {replica} was not promoted within {timeout} s")

    def wait_linked(self, node: RedisServer, timeout: float = 60.0) -> None:
        """Until the restarted ``node`` is a replica with its link up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                info = self.role(node.port)  # type: ignore[arg-type]
                if info["role"] == "slave" and info.get("master_link_status") == "up":
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"node {node.port} did not rejoin as a replica within {timeout} s")


class ClusterFailoverRound(FailoverRound):
    def __init__(
        self, number: int, cfg: Config, kills: int, ack: int, rng: random.Random, lag: float
    ) -> None:
        Round.__init__(self, number, cfg, False, rng)
        self.lag = lag
        self.acked_in_cut = 0
        self._cut_from = 0
        self.cluster = _Cluster(self.dir / "redis", self._ports)
        self.redis = self.cluster  # type: ignore[assignment]
        self.kills_wanted = kills
        self.ack = ack
        self.at = sorted(int(cfg.events * (i + 1) / (kills + 1)) for i in range(kills))

    def _ports(self) -> None:
        """The API's and the receiver's ports again, once the nodes listen: a node on
        port P also takes P + 10000 for the cluster bus, which ``free_port`` could not
        know of before."""
        self.api_port = free_port()
        self.recv_port = free_port()

    def _env(self, **extra: str) -> dict[str, str]:
        env = Round._env(self, **extra)
        env["RELAY_REDIS_CLUSTER"] = "1"
        env["RELAY_SHARDS"] = str(SHARDS)
        env["RELAY_ACK_REPLICAS"] = str(self.ack)
        return env

    def _shard_keys(self, event_id: str | None = None) -> list[Any]:
        keys = Keys(PREFIX, SHARDS)
        if event_id is None:
            return list(keys.all_shards())
        return [keys.shard(ids.shard_of(event_id) or 0)]

    def _client(self) -> Any:
        nodes = [ClusterNode(HOST, port) for _, port in self.cluster.proc.startup_nodes]
        return AsyncCluster(startup_nodes=nodes, decode_responses=True)

    async def _kill_redis(self) -> None:
        for threshold in self.at:
            while len(self.st.acked) < threshold and not self.st.publish_done.is_set():  # noqa: ASYNC110 (polled state)
                await asyncio.sleep(0.02)
            node, replica = await asyncio.to_thread(self.cluster.victim, self.rng)
            assert node.port is not None
            cut = await self._cut_link(node.port, replica)
            killed = time.time()
            try:
                node.kill()
            finally:
                await self._restore(cut)
            await asyncio.to_thread(self.cluster.wait_promoted, replica)
            self.st.outages.append({"killed_at": killed, "ready_at": time.time()})
            await asyncio.to_thread(node.start, 30.0)
            await asyncio.to_thread(self.cluster.wait_linked, node)

    async def _cut_link(self, master: int, replica: int) -> list[Any]:
        """Open the window of the module docstring on ``master``; the replica cut off, for
        :meth:`FailoverRound._restore`, which closes it."""
        return await self._cut(master, [replica]) if self.lag > 0 else []

    async def _drain(self, client: Any) -> bool:
        while len(self.st.outages) < self.kills_wanted and not self._killer.done():  # noqa: ASYNC110 (polled state)
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        return await Round._drain(self, client)

    async def _collect(self, client: Any) -> dict[int, dict[str, Any]]:
        return await Round._collect(self, client)

    async def _kill_after_start(self) -> None:
        while not any(p.name == "api" for p in self.st.procs):  # noqa: ASYNC110 (polled state)
            await asyncio.sleep(0.05)
        while not self.st.acked:  # noqa: ASYNC110 (polled state)
            await asyncio.sleep(0.02)
        await self._kill_redis()
