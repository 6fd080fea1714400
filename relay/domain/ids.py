"""Identifiers: ``evt_``, ``dlv_``, ``ep_`` followed by a ULID-like string.

Event and delivery ids carry their queue shard, so any process can find the keys of
an id without a lookup: 10 characters of millisecond time (Crockford base32, so ids
sort by creation), 2 characters of shard, 14 random characters. All deliveries of an
event live in the event's shard, which keeps a publish one atomic script.
"""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
MAX_SHARDS = 32 * 32


def _b32(value: int, width: int) -> str:
    out = []
    for _ in range(width):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id(prefix: str, shard: int = 0, now_ms: int | None = None) -> str:
    """A new id such as ``evt_01JDX3Z8QK00A7PC1W4HMX2RTB``."""
    if not 0 <= shard < MAX_SHARDS:
        raise ValueError(f"shard {shard} out of range")
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    rand = secrets.randbits(70)
    return f"{prefix}_{_b32(ms, 10)}{_b32(shard, 2)}{_b32(rand, 14)}"


def shard_of(ident: str) -> int | None:
    """The shard encoded in an event or delivery id, or None when it is not one of ours."""
    _, sep, body = ident.partition("_")
    if not sep or len(body) != 26:
        return None
    try:
        return _INDEX[body[10]] * 32 + _INDEX[body[11]]
    except KeyError:
        return None


def looks_like(ident: str, prefix: str) -> bool:
    """True when ``ident`` is a well-formed id with this prefix."""
    return ident.startswith(prefix + "_") and shard_of(ident) is not None


def ops_entry_id() -> str:
    """A fresh id for the operational events one script call may append (``ops_...``);
    the script suffixes ``-1``, ``-2`` per event, and the entry's publish is keyed on it."""
    return new_id("ops")
