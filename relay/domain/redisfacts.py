"""What relay needs of the Redis it runs on, decided from facts the queue reads.

Pure: :meth:`relay.queue.store.Store.server_facts` reads the facts (``CONFIG GET``, and
``INFO`` when ``CONFIG`` is disabled or renamed, as on managed Redis); :func:`judge`
says whether a process may start on them and what to warn about.

* ``maxmemory-policy`` other than ``noeviction`` is refused: under any eviction policy a
  full Redis silently drops keys (a delivery, an event, a lease), so an acknowledged
  event can vanish. With ``noeviction`` a full Redis refuses writes (503) instead.
* Neither AOF nor RDB on is a warning: a Redis restart then loses everything.
* A policy that cannot be read at all is a warning, and the process starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SAFE_POLICY = "noeviction"
# relay_redis_persistence: what survives a Redis restart (-1: could not be read).
PERSISTENCE_LEVELS = {"none": 0, "rdb": 1, "aof": 2, "aof+rdb": 3}


@dataclass(frozen=True)
class RedisFacts:
    """One Redis server's settings that matter to durability (``None``: unreadable)."""

    role: str | None = None  # "master" or "slave" (INFO replication)
    maxmemory_policy: str | None = None
    aof: bool | None = None
    rdb: bool | None = None  # a `save` schedule is configured
    connected_replicas: int | None = None
    policy_from: str = "CONFIG GET"  # or "INFO memory", or "" when unread

    @property
    def persistence(self) -> str:
        """``none``, ``rdb``, ``aof``, ``aof+rdb``, or ``unknown``."""
        if self.aof is None and self.rdb is None:
            return "unknown"
        if self.aof and self.rdb:
            return "aof+rdb"
        if self.aof:
            return "aof"
        if self.rdb:
            return "rdb"
        if self.aof is False and self.rdb is False:
            return "none"
        return "unknown"  # AOF off and the save schedule unreadable

    @property
    def persistence_level(self) -> int:
        return PERSISTENCE_LEVELS.get(self.persistence, -1)

    def as_dict(self) -> dict[str, object]:
        return {
            "role": self.role,
            "maxmemory_policy": self.maxmemory_policy,
            "persistence": self.persistence,
            "aof": self.aof,
            "rdb": self.rdb,
            "connected_replicas": self.connected_replicas,
        }


@dataclass(frozen=True)
class Verdict:
    refuse: str | None = None  # why the process must not start on this Redis
    warnings: list[str] = field(default_factory=list)


def judge(facts: RedisFacts) -> Verdict:
    """Refuse an evicting Redis; warn about one without persistence or an unreadable one."""
    warnings: list[str] = []
    policy = facts.maxmemory_policy
    if policy is None:
        warnings.append(
            "could not read Redis' maxmemory-policy (CONFIG GET and INFO both failed): "
            f"make sure it is {SAFE_POLICY}, or evicted keys are lost deliveries"
        )
    elif policy != SAFE_POLICY:
        return Verdict(
            refuse=f"Redis maxmemory-policy is {policy} (read by {facts.policy_from}): relay "
            f"needs {SAFE_POLICY}, since eviction silently drops deliveries; set "
            f"maxmemory-policy {SAFE_POLICY} in redis.conf (or CONFIG SET)",
            warnings=warnings,
        )
    if facts.persistence == "none":
        warnings.append(
            "Redis has neither AOF nor RDB persistence on: a Redis restart loses every "
            "event and delivery (appendonly yes, appendfsync always: see deploy/redis.conf)"
        )
    elif facts.persistence == "unknown":
        warnings.append("could not read whether Redis persists to disk (AOF/RDB)")
    return Verdict(warnings=warnings)
