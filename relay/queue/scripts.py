"""The Lua scripts in ``relay/queue/lua/``, one per state transition, registered once at start.

redis-py's ``register_script`` computes each SHA locally and its call runs ``EVALSHA``,
falling back to ``SCRIPT LOAD`` on ``NOSCRIPT`` (a Redis restart or ``SCRIPT FLUSH``),
so scripts are never re-sent inline on the hot path.

Each script is called from exactly one typed method of the queue layer (the Store's
mixins: :mod:`relay.queue.transitions`, :mod:`relay.queue.endpoints`), the only place
its KEYS and ARGV are built, from :mod:`relay.queue.keys`; each Lua file's header says
what it gets. Scripts name no key themselves: a key of an id only known inside the
script is a prefix from ARGV plus the id. A script with a list of items gets their
count in ARGV and never counts its KEYS or ARGV, so the slot guard below, or any other
trailing key, cannot shift its items.

Slot guard (Redis Cluster). Every call declares one more key after the script's own:
``<prefix>:v1:{tag}:guard`` (:func:`relay.queue.keys.guard_key`), under the hash tag
of the first key, which nobody ever writes. While a slot is being migrated, Redis
refuses (``TRYAGAIN`` or ``ASK`` then ``TRYAGAIN``) any multi-key command one of whose
keys is missing, on both nodes; so a script never runs while its slot's keys are split
between two nodes. Without it a script could run on the source with a delivery hash
already moved (the read fails mid-script, after earlier writes) or, after ``ASK``, on
the target with it not yet moved (the read silently finds nothing). Outside a
migration a missing key costs nothing.

Calls refused that way ran nothing, so they are retried here for up to
``MIGRATION_WAIT`` seconds (a slot moved here at ~60,000 keys/s), except
``claim`` and ``reclaim``, which the worker's claim loop already retries per shard.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
from redis.exceptions import AskError, ClusterError, TryAgainError

from relay.queue.keys import guard_key

log = structlog.get_logger("relay.scripts")

LUA_DIR = Path(__file__).resolve().parent / "lua"
NAMES = (
    "publish",
    "claim",
    "record",
    "extend",
    "release",
    "reclaim",
    "replay",
    "endpoint_put",
    "endpoint_delete",
    "endpoints_for_app",
    "admit",
    "settle",
    "hold",
    "resume",
    "expire",
)
# Refusals that mean "this script did not run: the slot is moving or the cluster is
# re-forming" (ClusterError covers redis-py's "TTL exhausted" after its own redirects
# and retries, and CLUSTERDOWN).
NOT_RUN = (TryAgainError, AskError, ClusterError)
MIGRATION_WAIT = 30.0
FAIL_FAST = frozenset({"claim", "reclaim"})

__all__ = ["LUA_DIR", "NAMES", "Scripts", "guard_key"]


class _Call:
    """One script: adds the slot guard, retries refusals that ran nothing."""

    def __init__(self, owner: Scripts, name: str, script: Any) -> None:
        self._owner = owner
        self._name = name
        self.script = script

    @property
    def sha(self) -> str:
        return str(self.script.sha)

    async def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        keys = [*keys, guard_key(str(keys[0]))]
        deadline = time.monotonic() + (0.0 if self._name in FAIL_FAST else MIGRATION_WAIT)
        delay = 0.01
        while True:
            try:
                return await self.script(keys=keys, args=args)
            except NOT_RUN as exc:
                self._owner.refused[self._name] = self._owner.refused.get(self._name, 0) + 1
                if time.monotonic() >= deadline:
                    raise
                log.info("script.retry", script=self._name, error=str(exc)[:120])
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)


class Scripts:
    """Name -> callable script (``await scripts.claim(keys=..., args=...)``), one client."""

    def __init__(self, client: Any, lua_dir: Path = LUA_DIR) -> None:
        self._client = client
        self._sources = {name: (lua_dir / f"{name}.lua").read_text() for name in NAMES}
        self._calls = {
            name: _Call(self, name, client.register_script(src))
            for name, src in self._sources.items()
        }
        # Calls refused (and so not run) because their slot was moving or the cluster
        # re-forming, by script name; every refusal but the last of a call is retried.
        self.refused: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        try:
            return self._calls[name]
        except KeyError:
            raise AttributeError(name) from None

    async def load(self) -> None:
        """``SCRIPT LOAD`` every script once (on every primary, for a cluster)."""
        for name, src in self._sources.items():
            sha = await self._client.script_load(src)
            if isinstance(sha, dict):  # a cluster answers per node
                sha = next(iter(sha.values()))
            self._calls[name].script.sha = sha
