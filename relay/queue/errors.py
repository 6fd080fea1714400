"""Which Redis failures mean "storage is unavailable, try again", in one place.

The layers above never import redis-py: they catch these tuples or ask
:func:`is_unavailable` / :func:`is_transient`. A failure listed here ran nothing that was
acknowledged (a script either ran whole or not at all), so the caller may retry it (a
worker's fenced write) or answer 503 with Retry-After (the API).

redis-py's ``TimeoutError`` and ``ConnectionError`` are ``RedisError`` subclasses, not
Python's built-ins, and several refusals arrive as a plain ``ResponseError`` whose reply
starts with a code (``BUSY``, ``MISCONF``, ...): both are covered here.
"""

from __future__ import annotations

from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Refusals a healthy-again Redis stops sending: a replica (READONLY, after REPLICAOF or a
# failover), a script running too long (BUSY), a replica cut from its master
# (MASTERDOWN), a failed background save with stop-writes-on-bgsave-error (MISCONF), a
# restart (LOADING), a cluster moving slots or missing a node (TRYAGAIN, CLUSTERDOWN),
# min-replicas-to-write not met (NOREPLICAS), maxmemory under noeviction (OOM).
REFUSAL_CODES = frozenset(
    {
        "BUSY",
        "MASTERDOWN",
        "MISCONF",
        "LOADING",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "READONLY",
        "NOREPLICAS",
        "OOM",
    }
)


class ReplicationTimeout(Exception):
    """A write ran on the primary, but fewer than ``RELAY_ACK_REPLICAS`` replicas
    confirmed it (``WAIT``) within ``RELAY_ACK_TIMEOUT``: not acknowledged. The API
    answers 503 ``replication_timeout``; a retry with the same Idempotency-Key writes
    nothing twice and confirms again."""

    def __init__(self, wanted: int, confirmed: int, timeout_ms: int) -> None:
        super().__init__(f"{confirmed} of {wanted} replica(s) confirmed within {timeout_ms} ms")
        self.wanted = wanted
        self.confirmed = confirmed


# The API answers these with 503 and Retry-After, never a 500.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    ReplicationTimeout,  # the write may be on the primary only: retry (idempotently)
    RedisConnectionError,  # includes BusyLoadingError (LOADING)
    RedisTimeoutError,
    BusyLoadingError,
    ClusterDownError,  # includes MasterDownError (MASTERDOWN)
    MasterDownError,
    ReadOnlyError,  # READONLY: a replica, e.g. after a failover or REPLICAOF
    OutOfMemoryError,  # maxmemory reached under noeviction: refuse, never drop
    TryAgainError,
    ConnectionError,
    TimeoutError,
)

# A process starting while Redis is down (or restarting) waits for it.
NOT_UP: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)

# A PING that got no answer: NOT_UP, or a Redis Cluster client with no node reachable.
NO_ANSWER: tuple[type[BaseException], ...] = (*NOT_UP, RedisClusterException)

# A worker's outcome write rides these out (until its lease is nearly over).
TRANSIENT_WRITE: tuple[type[BaseException], ...] = (*UNAVAILABLE, OSError)


def refusal_code(exc: BaseException) -> str | None:
    """The code an error reply starts with (``BUSY``, ``MISCONF``...), when it has one."""
    if not isinstance(exc, ResponseError):
        return None
    words = str(exc).split(maxsplit=1)
    return words[0] if words and words[0].isupper() else None


def is_unavailable(exc: BaseException) -> bool:
    """Redis could not run this now (down, stalled, read-only, busy, loading, full):
    nothing was written, and the same request may succeed shortly."""
    return isinstance(exc, UNAVAILABLE) or refusal_code(exc) in REFUSAL_CODES


def is_transient(exc: BaseException) -> bool:
    """A worker's write that failed this way is retried, not dropped."""
    return isinstance(exc, TRANSIENT_WRITE) or is_unavailable(exc)


def is_loading(exc: BaseException) -> bool:
    """Redis answered LOADING: it is reading its data back after a restart."""
    return isinstance(exc, BusyLoadingError) or (
        isinstance(exc, ResponseError) and "LOADING" in str(exc)
    )
