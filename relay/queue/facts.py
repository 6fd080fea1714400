"""Read the Redis server's durability settings (:class:`relay.domain.redisfacts.RedisFacts`).

``CONFIG GET`` first; managed Redis often disables or renames ``CONFIG``, and then the
policy comes from ``INFO memory`` and AOF from ``INFO persistence`` (the ``save``
schedule is only in ``CONFIG``, so RDB is then unknown). On a Redis Cluster
:meth:`ServerFacts.server_facts` asks the client's default node, and
:meth:`ServerFacts.server_facts_by_node` asks every primary, each for itself (one node
with an evicting policy is enough to lose keys).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from relay.domain.redisfacts import RedisFacts
from relay.queue.base import StoreBase


class ServerFacts(StoreBase):
    async def _run(self, *args: Any, node: Any = None) -> Any:
        if isinstance(self.redis, RedisCluster):
            target = node if node is not None else self.redis.get_default_node()
            return await self.redis.execute_command(*args, target_nodes=target)
        return await self.redis.execute_command(*args)

    async def _config(self, name: str, node: Any = None) -> str | None:
        """One CONFIG GET value, or None when CONFIG is refused (disabled, renamed, ACL)."""
        try:
            reply = await self._run("CONFIG GET", name, node=node)
        except ResponseError:
            return None
        if isinstance(reply, dict):
            value = reply.get(name)
        elif isinstance(reply, list) and len(reply) >= 2:
            value = reply[1]
        else:
            value = None
        return None if value is None else str(value)

    async def _info(self, section: str, node: Any = None) -> dict[str, Any]:
        try:
            reply = await self._run("INFO", section, node=node)
        except ResponseError:
            return {}
        return reply if isinstance(reply, dict) else {}

    async def server_facts_by_node(self) -> list[tuple[str, RedisFacts]]:
        """``(host:port, facts)`` of every primary of a Redis Cluster; of a single Redis
        (or the primary Sentinel names), one entry named ``""``."""
        if not isinstance(self.redis, RedisCluster):
            return [("", await self.server_facts())]
        return [
            (f"{n.host}:{n.port}", await self.server_facts(node=n))
            for n in self.redis.get_primaries()
        ]

    async def server_facts(self, node: Any = None) -> RedisFacts:
        """Role, maxmemory-policy, AOF, RDB and connected replicas of this Redis (on a
        cluster: of ``node``, by default the client's default node)."""
        memory = await self._info("memory", node)
        persistence = await self._info("persistence", node)
        replication = await self._info("replication", node)
        policy = await self._config("maxmemory-policy", node)
        policy_from = "CONFIG GET"
        if policy is None and memory.get("maxmemory_policy") is not None:
            policy, policy_from = str(memory["maxmemory_policy"]), "INFO memory"
        elif policy is None:
            policy_from = ""
        aof_info = persistence.get("aof_enabled")
        aof: bool | None = None if aof_info is None else bool(int(aof_info))
        if aof is None:
            appendonly = await self._config("appendonly", node)
            aof = None if appendonly is None else appendonly == "yes"
        save = await self._config("save", node)
        rdb = None if save is None else bool(save.strip())
        replicas = replication.get("connected_slaves")
        return RedisFacts(
            role=replication.get("role"),
            maxmemory_policy=policy,
            aof=aof,
            rdb=rdb,
            connected_replicas=None if replicas is None else int(replicas),
            policy_from=policy_from,
        )
