"""Ordered delivery: which lane a delivery joins, and which shard an event goes to.

Pure, no I/O. An endpoint's ``ordering`` is ``"none"`` (no lane), ``"key"`` (one lane
per ``ordering_key``; an event without a key is unordered there) or ``"endpoint"`` (one
lane for the whole endpoint). A lane is ``<endpoint_id>`` or ``<endpoint_id>:<key>``
(endpoint ids hold no ``:``), the suffix of its Redis list (``ShardKeys.lane``).

Shard rule (all deliveries of a lane must be in one shard, and an event and all its
deliveries are one atomic publish in one shard): an event with an ordered target or an
``Idempotency-Key`` goes to ``crc32(app) % shards``; any other event to a random shard.
So every lane of an app lives in the app's shard, and the same Idempotency-Key lands on
the same shard whatever the body and whatever the endpoints' ordering is by then.
"""

from __future__ import annotations

import random
import zlib
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
    return zlib.crc32(app.encode()) % shards


def shard_for(app: str, idempotency_key: str | None, shards: int, *, ordered: bool) -> int:
    """The event's shard: the app's when it is ordered (its lanes live there) or guarded
    by an idempotency key (the guard lives there, so a key always lands on one shard);
    else any."""
    if ordered or idempotency_key is not None:
        return app_shard(app, shards)
    return random.randrange(shards)
