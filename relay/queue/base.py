"""The client, the settings and the keys every part of the Store shares.

:class:`StoreBase` is what :class:`relay.queue.store.Store` is made of before its
parts (transitions, reads, endpoint records, dashboard reads) are mixed in: the Redis
client (held only by the queue layer), the key builder and the registered scripts.
"""

from __future__ import annotations

from typing import Any

import hiredis
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection, SSLConnection, parse_url
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MasterDownError

from relay.domain import ids
from relay.queue.keys import Keys, ShardKeys
from relay.queue.pool import BlockingPool
from relay.queue.scripts import Scripts
from relay.settings import Settings

# Replies are decoded as UTF-8, and bytes that are not (an event body stored compressed,
# relay.domain.eventrecord) come back as lone surrogates, which encode back to the exact
# bytes: nothing relay stores is ever refused or altered by decoding.
ENCODING_ERRORS = "surrogateescape"


def _pack_command(self: AbstractConnection, *args: Any) -> list[bytes]:
    """redis-py's asyncio ``pack_command``, the protocol written by hiredis (in C), as
    redis-py's own synchronous client does; its asyncio client builds each command in
    Python, one growing buffer per argument.
    The arguments are what redis-py's encoder makes of them: bytes and ints as they are,
    a str encoded as the client is configured, anything else through the encoder itself
    (a float as its repr, a bool or None refused).

    Most commands hold only bytes, ints and str that UTF-8 encodes: hiredis takes their
    tuple as it is. It refuses the rest with TypeError (a bool, None, a memoryview) or
    UnicodeEncodeError (a lone surrogate), and those go through the encoder one by one."""
    if isinstance(args[0], str):
        args = tuple(args[0].encode().split()) + args[1:]
    elif b" " in args[0]:
        args = tuple(args[0].split()) + args[1:]
    encoder = self.encoder
    if encoder.encoding == "utf-8":
        try:
            return [hiredis.pack_command(args)]
        except (TypeError, UnicodeEncodeError):
            pass
    out: list[Any] = []
    for arg in args:
        kind = type(arg)
        if kind is bytes or kind is int:
            out.append(arg)
        elif kind is str:
            out.append(arg.encode(encoder.encoding, encoder.encoding_errors))
        else:
            out.append(bytes(encoder.encode(arg)))
    return [hiredis.pack_command(tuple(out))]


REDIS_PY_PACK_COMMAND = AbstractConnection.pack_command  # kept: tests/unit/test_packing.py


def pack_with_hiredis() -> None:
    """Make redis-py's asyncio connections write commands with hiredis (:func:`_pack_command`).

    Works around redis-py's asyncio client packing every command in Python even when
    hiredis is installed, where its synchronous client uses hiredis
    (https://github.com/redis/redis-py/issues/4176). It can go once relay pins a redis-py
    release whose asyncio connections pack with hiredis themselves
    (https://github.com/redis/redis-py/pull/4191). Idempotent: :func:`connect` calls it.
    """
    AbstractConnection.pack_command = _pack_command  # type: ignore[method-assign]


def answers(url: str) -> bool:
    """Whether a Redis answers PING at ``url`` within half a second (``relay dev``)."""
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, retry=None)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


class _SentinelConnection(SentinelManagedConnection):
    """redis-py re-asks Sentinel after READONLY (a demoted primary); MASTERDOWN (a node
    that lost its own primary, so not the primary now) is the same: the command did not
    run, the connection is closed, and the retry is made to the primary Sentinel names."""

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except MasterDownError:
            await self.disconnect()
            raise RedisConnectionError("MASTERDOWN: this node is not the primary now") from None


class _SentinelSSLConnection(_SentinelConnection, SSLConnection):
    pass


class _BlockingSentinelPool(SentinelConnectionPool, BlockingPool):
    """Sentinel's pool (each new connection asks Sentinel where the primary is, and
    connections to a primary Sentinel no longer names are dropped), blocking as below."""


class _SentinelRedis(aioredis.Redis):
    """The primary's client; closing it closes the connections to the Sentinels too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        for sentinel in manager.sentinels if manager is not None else ():
            await sentinel.aclose()


def _sentinel_client(settings: Settings) -> Any:
    """A client for the primary Sentinel names ``settings.redis_sentinel_master``.

    The URL still gives the db number, username, password and options; its host and
    port are ignored. A command that fails on a dead or demoted primary (a connection
    error; READONLY or MASTERDOWN, turned into a connection error and a fresh look-up)
    leaves its connection closed, and the next connection is made to whatever primary
    Sentinel names then: no restart after a failover.
    """
    options: dict[str, Any] = dict(parse_url(settings.redis_url))
    for key in ("host", "port", "path"):
        options.pop(key, None)
    ssl = options.pop("connection_class", None) is SSLConnection
    options["connection_class"] = _SentinelSSLConnection if ssl else _SentinelConnection
    options = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0, **options}
    # Sentinels are asked on every new connection: a dead one is skipped at once
    # (refused), a stalled one after 1 s.
    sentinel_kwargs: dict[str, Any] = {"socket_timeout": 1.0, "socket_connect_timeout": 1.0}
    if settings.redis_sentinel_password:
        sentinel_kwargs["password"] = settings.redis_sentinel_password
    sentinel = Sentinel(list(settings.redis_sentinels), sentinel_kwargs=sentinel_kwargs)
    return sentinel.master_for(
        settings.redis_sentinel_master,
        redis_class=_SentinelRedis,
        connection_pool_class=_BlockingSentinelPool,
        decode_responses=True,
        encoding_errors=ENCODING_ERRORS,
        health_check_interval=30,
        max_connections=256,
        timeout=20,
        **options,
    )


def connect(settings: Settings) -> Any:
    """An asyncio Redis (or Redis Cluster) client for ``settings.redis_url``; with
    ``settings.redis_sentinels``, for the primary Sentinel names. Its commands are
    written with hiredis (:func:`pack_with_hiredis`)."""
    pack_with_hiredis()
    if settings.redis_sentinels:
        return _sentinel_client(settings)
    if settings.redis_cluster:
        # reinitialize_steps=0: a MOVED patches that slot in the client's map. The default
        # (5) closes every node connection on each 5th MOVED, under the commands other
        # tasks have in flight on them (redis-py 8.1: AttributeError 'writelines' there),
        # and a slot being migrated sends MOVED often (ASKING and the command it covers
        # may leave on different pooled connections). max_connections is per node, and
        # past it a command fails at once (MaxConnectionsError; no blocking pool here):
        # room for a busy API replica, opened only as needed. socket_timeout: as below.
        return RedisCluster.from_url(
            settings.redis_url,
            decode_responses=True,
            encoding_errors=ENCODING_ERRORS,
            reinitialize_steps=0,
            max_connections=1024,
            socket_timeout=5.0,
            socket_connect_timeout=5.0,
        )
    # A blocking pool: past max_connections a command waits for a free connection
    # instead of failing with MaxConnectionsError (a 500 on a busy API replica).
    # socket_timeout: a Redis that stops answering (stalled, partitioned) is an error
    # after 5 s (redis TimeoutError: 503 in the API, retried by a worker's writes) rather
    # than a hang; pub/sub listening blocks without it. The URL's ?socket_timeout= wins.
    # (relay.queue.pool: redis-py's blocking pool, without its condition and timeout
    # when a connection is free and nothing waits.)
    pool = BlockingPool.from_url(
        settings.redis_url,
        decode_responses=True,
        encoding_errors=ENCODING_ERRORS,
        socket_timeout=5.0,
        socket_connect_timeout=5.0,
        health_check_interval=30,
        max_connections=256,
        timeout=20,
    )
    return aioredis.Redis.from_pool(pool)


class StoreBase:
    """relay's Redis data model, for one client and one settings object."""

    def __init__(self, client: Any, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix, settings.shards)
        self.scripts = Scripts(client)
        # bumped by every endpoint write made through this Store, so a cache in the same
        # process never serves what was there before its own write
        self.endpoint_epoch = 0

    async def start(self) -> None:
        await self.scripts.load()

    async def close(self) -> None:
        await self.redis.aclose()

    async def ping(self) -> bool:
        """True when Redis answers (``/readyz``); raises when it does not."""
        return bool(await self.redis.ping())

    async def check_writable(self) -> None:
        """Raise unless Redis takes a write (``/readyz``): a replica (READONLY), a busy
        script (BUSY), MISCONF or a full Redis answer PING but refuse writes. SET, then
        DEL: nothing is left behind (the TTL covers a DEL that fails)."""
        await self.redis.set(self.keys.ready, "1", px=10_000)
        await self.redis.delete(self.keys.ready)

    async def now_ms(self) -> int:
        """Redis's clock (``TIME``), in ms since the epoch: the clock the scripts use.

        A command of its own: a cluster pipeline refuses keyless commands.
        """
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def wake_pubsub(self, attempt: int = 0) -> Any:
        """A pub/sub connection for the shards' wake channels (``attempt``: reconnects so far).

        On a cluster the scripts' PUBLISH reaches every node, so one node's connection
        hears all shards; each reconnect takes the next node the client knows, so a node
        that failed is not retried first.
        """
        if not isinstance(self.redis, RedisCluster):
            return self.redis.pubsub()
        nodes = self.redis.get_nodes()
        return self.redis.pubsub(node=nodes[attempt % len(nodes)])

    def shard_keys_for(self, ident: str) -> ShardKeys | None:
        shard = ids.shard_of(ident)
        if shard is None or shard >= self.settings.shards:
            return None
        return self.keys.shard(shard)
