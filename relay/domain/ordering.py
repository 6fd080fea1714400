"""Ordered delivery: which lane a delivery joins, and which shard an event goes to.

Pure, no I/O. An endpoint's ``ordering`` is ``"none"`` (no lane), ``"key"`` (one lane
per ``ordering_key``; an event without a key is unordered there) or ``"endpoint"`` (one
lane for the whole endpoint). A lane is ``<endpoint_id>`` or ``<endpoint_id>:<key>``
(endpoint ids hold no ``:``), the suffix of its Redis list (``ShardKeys.lane``).

Placement (docs/operating/placement.md). An event and all its deliveries are one atomic
publish in one shard, and all deliveries of a lane must be in one shard, so:

* an event with an ordered target goes to the shard of its ``ordering_key``
  (:func:`key_shard` of the app and that key), unless its app is *pinned*: an app with
  an ``ordering: endpoint`` endpoint keeps all its ordered events on :func:`app_shard`
  (one endpoint lane takes events of every ordering key, so they cannot be spread);
* else an event with an ``Idempotency-Key`` goes to the shard of that key;
* else any shard.

An ``Idempotency-Key``'s guard always lives on :func:`key_shard` of the app and the
key, whatever the body: the same key is found in one place whatever ordering key or
targets it comes with. When an ordered event's shard is not its guard's, the publish is
two steps (relay.idempotency).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable
from typing import Any, Literal

Ordering = Literal["none", "key", "endpoint"]
OnDead = Literal["skip", "block"]


def lane_of(endpoint: dict[str, Any], ordering_key: str | None) -> str | None:
    """The lane a delivery of an event with ``ordering_key`` to ``endpoint`` joins."""
    mode = endpoint.get("ordering") or "none"
    if mode == "endpoint":
        return str(endpoint["id"])
    if mode == "key" and ordering_key is not None:
        return f"{endpoint['id']}:{ordering_key}"
    return None


def on_dead(endpoint: dict[str, Any]) -> OnDead:
    return "block" if endpoint.get("ordering_on_dead") == "block" else "skip"


def app_shard(app: str, shards: int) -> int:
    """The app's own shard: its endpoint lanes (a pinned app's ordered events)."""
    return zlib.crc32(app.encode()) % shards


def key_shard(app: str, key: str, shards: int) -> int:
    """The shard of one key of an app: an ordering key's lanes, an Idempotency-Key's guard."""
    return zlib.crc32(f"{app}\n{key}".encode()) % shards


def pinned(endpoints: Iterable[dict[str, Any]]) -> bool:
    """Whether an app with these endpoints keeps its ordered events on its app shard:
    it has an ``ordering: endpoint`` endpoint (enabled or not: enabling one moves
    nothing)."""
    return any(e.get("ordering") == "endpoint" for e in endpoints)


def shard_for(
    app: str,
    shards: int,
    *,
    idempotency_key: str | None = None,
    ordering_key: str | None = None,
    ordered: bool = False,
    pin: bool = False,
) -> int:
    """The event's shard. ``ordered``: one of its deliveries joins a lane; ``pin``: its
    app is :func:`pinned`."""
    if ordered:
        if pin or ordering_key is None:  # an endpoint lane without a key: the app's shard
            return app_shard(app, shards)
        return key_shard(app, ordering_key, shards)
    if idempotency_key is not None:
        return key_shard(app, idempotency_key, shards)
    return random.randrange(shards)
