"""Which Redis failures mean "storage is unavailable, try again", in one place.

The layers above never import redis-py: they catch these tuples. A failure listed here
ran nothing that was acknowledged, so the caller may retry it (a write through a
fenced script) or answer 503 (the API).
"""

from __future__ import annotations

from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    OutOfMemoryError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# The API answers these with 503 and Retry-After, never a 500.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
    ClusterDownError,
    OutOfMemoryError,  # maxmemory reached under noeviction: refuse, never drop
    TryAgainError,
    ConnectionError,
    TimeoutError,
)

# A process starting while Redis is down (or restarting) waits for it.
NOT_UP: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)

# A worker's outcome write rides these out rather than drop the outcome.
TRANSIENT_WRITE: tuple[type[BaseException], ...] = (
    ConnectionError,
    OSError,
    TimeoutError,
    RedisConnectionError,
)


def is_loading(exc: BaseException) -> bool:
    """Redis answered LOADING: it is reading its data back after a restart."""
    return isinstance(exc, ResponseError) and "LOADING" in str(exc)
