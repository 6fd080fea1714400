"""Identifiers: ``evt_``, ``dlv_``, ``ep_`` followed by a ULID-like string.

Event and delivery ids carry their queue shard, so any process can find the keys of
an id without a lookup: 10 characters of millisecond time (Crockford base32, so ids
sort by creation), 2 characters of shard, 14 random characters. All deliveries of an
event live in the event's shard, which keeps a publish one atomic script.

Layout v3: a delivery's id is made from its event's, so it says which event it belongs
to and which of the event's deliveries it is, and needs no record of its own to say so.
An event id ends in ``00``; its delivery ``i`` (0-based, in the order of the event's
targets) is the same 24 characters and then ``i`` in two base32 characters::

    evt_01JDX3Z8QK00A7PC1W4HMX2R00   the event (12 random characters, then 00)
    dlv_01JDX3Z8QK00A7PC1W4HMX2R00   its first delivery
    dlv_01JDX3Z8QK00A7PC1W4HMX2R01   its second

so an event has at most 1,024 deliveries (:data:`MAX_DELIVERIES`). Deliveries of an
older layout keep their random ids; their records name their event (relay migrate).
"""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits as two characters
# Crockford's digits as int()'s base-32 digits; any other letter as one int() refuses
_AS_INT = str.maketrans(
    {c: "0123456789abcdefghijklmnopqrstuv"[i] for i, c in enumerate(_ALPHABET)}
    | {c: "z" for c in "abcdefghijklmnopqrstuvwxyzILOU"}
)
MAX_SHARDS = 32 * 32
MAX_DELIVERIES = 32 * 32  # per event: the two characters that number them


def _b32(value: int, width: int) -> str:
    """The low ``5 * width`` bits of ``value``: ``width`` characters, most significant
    first, two at a time from :data:`_PAIRS`."""
    out = []
    while width >= 2:
        out.append(_PAIRS[value & 1023])
        value >>= 10
        width -= 2
    if width:
        out.append(_ALPHABET[value & 31])
    return "".join(reversed(out))


def new_id(prefix: str, shard: int = 0, now_ms: int | None = None) -> str:
    """A new id such as ``evt_01JDX3Z8QK00A7PC1W4HMX2RTB``."""
    if not 0 <= shard < MAX_SHARDS:
        raise ValueError(f"shard {shard} out of range")
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    rand = secrets.randbits(70)
    return f"{prefix}_{_b32(ms, 10)}{_b32(shard, 2)}{_b32(rand, 14)}"


def new_event_id(shard: int = 0, now_ms: int | None = None) -> str:
    """A new event id (``evt_...00``), whose deliveries' ids derive from it."""
    return new_id("evt", shard, now_ms)[:-2] + "00"


def delivery_id(event_id: str, index: int) -> str:
    """The id of delivery ``index`` (0-based) of the event ``event_id``."""
    if not 0 <= index < MAX_DELIVERIES:
        raise ValueError(f"delivery index {index} out of range")
    return f"dlv_{event_id[4:-2]}{_b32(index, 2)}"


def is_delivery_of(delivery: str, event_id: str, index: int) -> bool:
    """Whether ``delivery`` is the id :func:`delivery_id` makes for delivery ``index`` of
    ``event_id`` (else it is one of an older layout, with an id of its own)."""
    return 0 <= index < MAX_DELIVERIES and delivery == delivery_id(event_id, index)


def derived(delivery: str) -> tuple[str, int] | None:
    """``(event id, index)`` for a delivery id made by :func:`delivery_id`, else None
    (a well-formed id is assumed: the caller knows it is a delivery of layout v3)."""
    if not delivery.startswith("dlv_") or len(delivery) != 30:
        return None
    try:
        index = _INDEX[delivery[28]] * 32 + _INDEX[delivery[29]]
    except KeyError:
        return None
    return f"evt_{delivery[4:28]}00", index


def created_ms(ident: str) -> int | None:
    """The creation time (ms) an event or delivery id carries, None when not one of ours."""
    _, sep, body = ident.partition("_")
    if not sep or len(body) != 26:
        return None
    head = body[:10]
    # int(_, 32) in C, once each character is made its digit; what int() would take but
    # Crockford does not (a sign, a space, "_", lower case, I L O U) is refused first
    if not (head.isascii() and head.isalnum()):
        return None
    try:
        return int(head.translate(_AS_INT), 32)
    except ValueError:
        return None


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
