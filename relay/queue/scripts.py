"""The Lua scripts in ``relay/queue/lua/``, one per state transition, registered once at start.

redis-py's ``register_script`` computes each SHA locally and its call runs ``EVALSHA``,
falling back to ``SCRIPT LOAD`` on ``NOSCRIPT`` (a Redis restart or ``SCRIPT FLUSH``),
so scripts are never re-sent inline on the hot path.

Each script runs with ``lua/prelude.lua`` put in front of it (:func:`source`): the
helpers several scripts share (the clock in ms, chunked ZADD/ZREM/DEL, the dead-letter
tally). Each script is called from exactly one typed method of the queue layer (the Store's
mixins: :mod:`relay.queue.transitions`, :mod:`relay.queue.endpoints`), the only place
its KEYS and ARGV are built, from :mod:`relay.queue.keys`; each Lua file's header says
what it gets. Scripts name no key themselves: a key of an id only known inside the
script is a prefix from ARGV plus the id. A script with a list of items gets their
count in ARGV and never counts its KEYS or ARGV, so the slot guard below, or any other
trailing key, cannot shift its items.

Slot guard (Redis Cluster). Every call declares one more key after the script's own:
``<prefix>:v3:{tag}:guard`` (:func:`relay.queue.keys.guard_key`), under the hash tag
of the first key, which nobody ever writes. While a slot is being migrated, Redis
refuses (``TRYAGAIN`` or ``ASK`` then ``TRYAGAIN``) any multi-key command one of whose
keys is missing, on both nodes; so a script never runs while its slot's keys are split
between two nodes. Without it a script could run on the source with a delivery hash
already moved (the read fails mid-script, after earlier writes) or, after ``ASK``, on
the target with it not yet moved (the read silently finds nothing). Outside a
migration a missing key costs nothing.

Calls refused that way ran nothing, so they are retried here for up to
``MIGRATION_WAIT`` seconds (long enough for a large slot to move), except
``claim`` and ``reclaim``, which the worker's claim loop already retries per shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
from redis.asyncio.cluster import PipelineCommand, RedisCluster
from redis.client import NEVER_DECODE
from redis.exceptions import (
    AskError,
    ClusterError,
    MovedError,
    NoScriptError,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as LostConnection
from redis.exceptions import TimeoutError as RedisTimeout

from relay import tracing
from relay.queue.coalesce import Coalescer
from relay.queue.errors import ReplicationTimeout
from relay.queue.keys import guard_key

log = structlog.get_logger("relay.scripts")

LUA_DIR = Path(__file__).resolve().parent / "lua"
PRELUDE = "prelude"  # lua/prelude.lua: not a script, the helpers in front of each one
NAMES = (
    "publish",
    "claim",
    "record",
    "extend",
    "release",
    "reclaim",
    "replay",
    "discard",
    "endpoint_put",
    "endpoint_delete",
    "endpoint_forget",
    "endpoints_for_app",
    "admit",
    "settle",
    "hold",
    "resume",
    "expire",
    "archive_drop",
    "archive_restore",
    "replay_scan",
    "replay_job",
    "event_type_put",
    "event_type_delete",
    "authenticate",
    "apikey_create",
    "apikey_revoke",
    "portal_create",
    "ops_cut",
    "app_put",
    "reserve",
)
# Refusals that mean "this script did not run: the slot is moving or the cluster is
# re-forming" (ClusterError covers redis-py's "TTL exhausted" after its own redirects
# and retries, and CLUSTERDOWN).
NOT_RUN = (TryAgainError, AskError, ClusterError)
MIGRATION_WAIT = 30.0
FAIL_FAST = frozenset({"claim", "reclaim"})

__all__ = ["LUA_DIR", "NAMES", "PRELUDE", "Scripts", "guard_key", "source"]


def source(name: str, lua_dir: Path = LUA_DIR) -> str:
    """What Redis runs for script ``name``: the prelude, then ``lua/<name>.lua``."""
    prelude = (lua_dir / f"{PRELUDE}.lua").read_text()
    return prelude + "\n" + (lua_dir / f"{name}.lua").read_text()


class _Call:
    """One script: adds the slot guard, retries refusals that ran nothing."""

    def __init__(self, owner: Scripts, name: str, script: Any) -> None:
        self._owner = owner
        self._name = name
        self.script = script
        self._groups: dict[tuple[int, float], Coalescer[tuple[Any, Any]]] = {}

    @property
    def sha(self) -> str:
        return str(self.script.sha)

    async def __call__(
        self,
        keys: Sequence[Any] = (),
        args: Sequence[Any] = (),
        *,
        ack: tuple[int, float] = (0, 0.0),
        raw: bool = False,
    ) -> Any:
        """``ack``: ``(replicas, timeout s)`` that must confirm this write (see
        :meth:`_confirmed`); 0 replicas: the plain call. ``raw``: the reply's strings as
        bytes, not decoded (a claim's event bodies: binary when compressed). Inside a span,
        a child span (:func:`relay.tracing.script_span`)."""
        if tracing.on:
            with tracing.script_span(self._name):
                return await self.call(keys, args, ack=ack, raw=raw)
        return await self.call(keys, args, ack=ack, raw=raw)

    async def call(
        self,
        keys: Sequence[Any] = (),
        args: Sequence[Any] = (),
        *,
        ack: tuple[int, float] = (0, 0.0),
        raw: bool = False,
    ) -> Any:
        """The call itself, untraced."""
        if ack[0] > 0:
            return await self._confirmed(ack[0], ack[1], keys, args)
        keys = [*keys, guard_key(str(keys[0]))]
        deadline = time.monotonic() + (0.0 if self._name in FAIL_FAST else MIGRATION_WAIT)
        delay = 0.01
        while True:
            try:
                if raw:
                    return await self._undecoded(keys, args)
                return await self.script(keys=keys, args=args)
            except NOT_RUN as exc:
                self._owner.refused[self._name] = self._owner.refused.get(self._name, 0) + 1
                if time.monotonic() >= deadline:
                    raise
                log.info("script.retry", script=self._name, error=str(exc)[:120])
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)

    async def grouped(
        self, keys: Sequence[Any], args: Sequence[Any], *, ack: tuple[int, float]
    ) -> Any:
        """One call, sent together with this script's other ``grouped`` calls of the
        same event loop turn (:class:`relay.queue.coalesce.Coalescer`): on one Redis,
        one pipeline and one round trip for them all (then one ``WAIT`` when ``ack``
        asks for replicas), each call answered with its own reply or error. On a
        cluster or inside a span, the call on its own (:meth:`__call__`)."""
        if tracing.on or isinstance(self._owner._client, RedisCluster):
            return await self(keys, args, ack=ack)
        group = self._groups.get(ack)
        if group is None:
            group = self._groups[ack] = Coalescer(lambda calls: self._each(calls, ack))
        return await group((keys, args))

    async def _each(
        self, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]], ack: tuple[int, float]
    ) -> list[Any]:
        if len(calls) == 1:  # alone in its turn: the plain call
            return [await self.call(*calls[0], ack=ack)]
        return await self._pipelined(calls, ack, each=True)

    async def many(
        self, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]], *, ack: tuple[int, float]
    ) -> list[Any]:
        """Several calls of this script, ``(keys, args)`` each, their replies in order.

        On one Redis they go in one non-transactional pipeline (one connection, one round
        trip), run in the order given, then ``WAIT`` when ``ack`` asks for replicas (it
        counts every write of that connection). A call that failed raises after the
        pipeline, the others having run; ``NOSCRIPT`` loads the script and sends the
        calls that met it again. A cluster refuses scripts in a pipeline: there each call
        goes on its own, all at once, through :meth:`__call__`.
        """
        if len(calls) == 1:
            return [await self(*calls[0], ack=ack)]
        if isinstance(self._owner._client, RedisCluster):
            return list(await asyncio.gather(*(self(k, a, ack=ack) for k, a in calls)))
        if tracing.on:
            with tracing.script_span(self._name):
                return await self._pipelined(calls, ack)
        return await self._pipelined(calls, ack)

    async def _pipelined(
        self,
        calls: Sequence[tuple[Sequence[Any], Sequence[Any]]],
        ack: tuple[int, float],
        each: bool = False,
    ) -> list[Any]:
        """The calls in one pipeline; ``each``: a call's error is its reply, not raised."""
        replies: list[Any] = [NoScriptError()] * len(calls)
        timeout_ms = max(1, int(ack[1] * 1000))
        for _ in range(2):
            todo = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            async with self._owner._client.pipeline(transaction=False) as pipe:
                for i in todo:
                    keys = [*calls[i][0], guard_key(str(calls[i][0][0]))]
                    pipe.evalsha(self.sha, len(keys), *keys, *calls[i][1])
                if ack[0] > 0:
                    pipe.execute_command("WAIT", ack[0], timeout_ms)
                got = await pipe.execute(raise_on_error=False)
            for i, reply in zip(todo, got, strict=False):
                replies[i] = reply
            ran = any(not isinstance(replies[i], NoScriptError) for i in todo)
            if ack[0] > 0 and ran:
                _acked(self._owner, ack[0], got[-1], timeout_ms)
            if not any(isinstance(r, NoScriptError) for r in replies):
                break
            await self._reload()
        if not each:
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise reply
        return replies

    async def _undecoded(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """``EVALSHA`` with the reply left as bytes (redis-py's ``NEVER_DECODE``), loading
        the script on ``NOSCRIPT`` as ``register_script`` does."""
        client = self._owner._client
        for _ in range(2):
            try:
                return await client.execute_command(
                    "EVALSHA", self.sha, len(keys), *keys, *args, **{NEVER_DECODE: True}
                )
            except NoScriptError:
                await self._reload()
        raise NoScriptError(f"script {self._name} could not be loaded")

    async def _reload(self) -> None:
        """``SCRIPT LOAD`` this script (at start; again after a Redis restart or ``SCRIPT
        FLUSH``); a cluster loads it on every primary and answers per node."""
        sha = await self._owner._client.script_load(self._owner._sources[self._name])
        self.script.sha = next(iter(sha.values())) if isinstance(sha, dict) else sha

    async def _confirmed(
        self, replicas: int, timeout_s: float, keys: Sequence[Any], args: Sequence[Any]
    ) -> Any:
        """The call, then ``WAIT replicas timeout`` on the same connection: its reply once
        ``replicas`` replicas have every write of that connection (so this call's);
        :class:`ReplicationTimeout` when fewer confirm in time (the write did run on the
        primary). Only called with ``replicas`` > 0: with 0 no WAIT is sent at all.

        One non-transactional pipeline, so one pooled connection and one round trip:
        ``EVALSHA`` and ``WAIT`` (``WAIT`` counts the writes of the connection that sends
        it). ``NOSCRIPT`` (a Redis restart, ``SCRIPT FLUSH``) loads the script and sends
        both again: nothing ran. On a cluster the pair goes to the master that serves
        the keys' slot, on one of its connections (:meth:`_on_master`): ``WAIT`` names no
        key, so a cluster pipeline could not route it beside the script.
        """
        keys = [*keys, guard_key(str(keys[0]))]
        timeout_ms = max(1, int(timeout_s * 1000))
        client = self._owner._client
        for _ in range(2):
            if isinstance(client, RedisCluster):
                reply, acked = await self._on_master(keys, args, replicas, timeout_ms)
            else:
                async with client.pipeline(transaction=False) as pipe:
                    pipe.evalsha(self.sha, len(keys), *keys, *args)
                    pipe.execute_command("WAIT", replicas, timeout_ms)
                    reply, acked = await pipe.execute(raise_on_error=False)
            if isinstance(reply, NoScriptError):
                await self._reload()
                continue
            if isinstance(reply, BaseException):
                raise reply
            _acked(self._owner, replicas, acked, timeout_ms)
            return reply
        raise NoScriptError(f"script {self._name} could not be loaded")

    async def _on_master(
        self, keys: Sequence[Any], args: Sequence[Any], replicas: int, timeout_ms: int
    ) -> tuple[Any, Any]:
        """``EVALSHA`` and ``WAIT`` on one connection of the master serving ``keys[0]``'s
        slot, as the cluster client sees it: (script reply, replicas that confirmed), an
        error in place of a reply. A redirect or a refusal ran nothing: the client's slot
        map is refreshed and the pair sent again, for up to ``MIGRATION_WAIT`` seconds. A
        lost connection (a master that died) refreshes the map too and is raised: the
        write may or may not have run, as for any command."""
        client = self._owner._client
        deadline = time.monotonic() + MIGRATION_WAIT
        while True:
            node = client.get_node_from_key(str(keys[0]))
            pair = [
                PipelineCommand(0, "EVALSHA", self.sha, len(keys), *keys, *args),
                PipelineCommand(1, "WAIT", replicas, timeout_ms),
            ]
            try:
                await node.execute_pipeline(pair)
            except (LostConnection, RedisTimeout, OSError):
                await _refresh(client)
                raise
            except AttributeError as exc:  # redis-py: the connection closed under the write
                await _refresh(client)
                raise LostConnection(f"connection to {node.name} closed mid-write") from exc
            reply, acked = pair[0].result, pair[1].result
            if not isinstance(reply, (MovedError, *NOT_RUN)) or time.monotonic() >= deadline:
                return reply, acked
            self._owner.refused[self._name] = self._owner.refused.get(self._name, 0) + 1
            await _refresh(client)
            await asyncio.sleep(0.05)


async def _refresh(client: Any) -> None:
    """Ask the cluster for its slot map again (after a redirect or a lost master); a
    failure leaves the old map, which the client's own next command refreshes."""
    with contextlib.suppress(RedisError):
        await client.nodes_manager.initialize()


def _acked(owner: Scripts, replicas: int, acked: Any, timeout_ms: int) -> None:
    """Raise unless ``WAIT``'s reply ``acked`` counts ``replicas`` replicas."""
    if isinstance(acked, BaseException):
        raise acked
    if int(acked) < replicas:
        owner.replication_timeouts += 1
        raise ReplicationTimeout(replicas, int(acked), timeout_ms)


class Scripts:
    """Name -> callable script (``await scripts.claim(keys=..., args=...)``), one client."""

    def __init__(self, client: Any, lua_dir: Path = LUA_DIR) -> None:
        self._client = client
        self._sources = {name: source(name, lua_dir) for name in NAMES}
        self._calls = {
            name: _Call(self, name, client.register_script(src))
            for name, src in self._sources.items()
        }
        # Calls refused (and so not run) because their slot was moving or the cluster
        # re-forming, by script name; every refusal but the last of a call is retried.
        self.refused: dict[str, int] = {}
        # Confirmed calls (RELAY_ACK_REPLICAS) whose WAIT ran out before enough replicas.
        self.replication_timeouts = 0

    def __getattr__(self, name: str) -> Any:
        try:
            return self._calls[name]
        except KeyError:
            raise AttributeError(name) from None

    async def load(self) -> None:
        """``SCRIPT LOAD`` every script once (on every primary, for a cluster)."""
        for call in self._calls.values():
            await call._reload()
