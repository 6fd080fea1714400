"""What the queue layer hands back: typed results of its scripts, and delivery records.

No Redis here: these are the values :class:`relay.queue.store.Store` returns, parsed
from script replies and hashes, so callers never index into a raw reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from relay.domain import attemptlog, eventrecord, ids

# Every status a delivery can have. "held": its endpoint is disabled; it waits, out of
# the due queue, until the endpoint is enabled again (hold.lua, resume.lua).
# "queued": it waits in its ordered lane behind the lane's head (publish.lua, replay.lua).
# "scheduled": published with a deliver_at still ahead, never attempted; it is in the due
# queue at that time and reads "pending" once the time has come (derived, not stored).
STATUSES = ("scheduled", "pending", "queued", "held", "delivering", "succeeded", "dead")

INT_FIELDS = (
    "attempts",
    "max_attempts",
    "created_at",
    "updated_at",
    "next_attempt_at",
    "last_attempt_at",
    "finished_at",
    "lease_until",
    "log_n",
    "replays",
    "replayed_at",
    "discarded_at",
)


# Claimed, ClaimResult and Outcome are made once per delivery on the hot path: plain slotted
# dataclasses, whose __init__ is far cheaper than a frozen one's.
@dataclass(slots=True)
class Claimed:
    """One delivery taken by a claim: what a worker needs to send it."""

    id: str
    token: str
    attempts: int
    max_attempts: int
    event_id: str
    endpoint_id: str
    body: bytes  # exactly as signed and sent (decompressed)
    trace: str = ""  # the publish span's context (relay.tracing), from the event's header
    event_type: str = ""  # from the event's header (every claim fills it in)


@dataclass(slots=True)
class ClaimResult:
    now_ms: int
    next_due_ms: int | None
    next_lease_ms: int | None
    items: list[Claimed]


@dataclass(slots=True)
class Outcome:
    """A finished send, ready for ``record``."""

    id: str
    token: str
    outcome: str  # "succeeded" | "retry" | "dead" | "defer"
    delay_ms: int
    status_code: int | None
    error: str
    entry: bytes  # attempt log entry, JSON object without "n"; b"" when inline says it
    inline: str = ""  # its short form for the hash (relay.domain.attemptlog), or ""
    endpoint_id: str = ""  # written into a hash that has none (a first claim's); "": the header's
    duration_ms: float = 0.0  # the request's, for the endpoint's counters (not written here)


@dataclass(frozen=True, slots=True)
class Admission:
    """An endpoint's breaker state and, per claim token, 0 (send now) or ms to wait."""

    state: str
    waits: list[int]


@dataclass(frozen=True, slots=True)
class Settled:
    """An endpoint's breaker after its results were settled."""

    state: str
    failures: int
    open_until: int
    failing_since: int
    last_success_at: int
    ops: int = 0  # operational events it appended to the endpoint's ops outbox


@dataclass(frozen=True, slots=True)
class Swept:
    """One bounded expire call: deliveries and events removed, and whether more is left."""

    deliveries: int
    events: int
    more: bool


def num(value: str | bytes | int | None) -> int | None:
    """An integer field or script result; None for absent, empty or the -1 sentinel."""
    if value is None or value == "" or value == b"":
        return None
    number = int(float(value))
    return None if number == -1 else number


def record_of(
    delivery_id: str,
    raw: dict[str, str],
    due: float | None,
    header: dict[str, Any] | None,
    lease: float | None = None,
    now_ms: int | None = None,
) -> dict[str, Any] | None:
    """A delivery as the API and the CLI show it, from its hash ``raw`` (layout v3: only
    what is nowhere else), its scores in the due queue and in processing (``lease``: its
    lease's expiry, while a worker holds it) and its event's header; None when there is
    no such delivery.

    A delivery without a hash is as published: pending while it is due, and its event's
    header lists it (by endpoint id, at the index its id ends with). One whose event was
    published for later (the header's ``at``) is ``scheduled`` while that time is past
    ``now_ms`` (Redis's clock): no claim takes it before.
    """
    if not raw:
        endpoint_id = eventrecord.endpoint_of(delivery_id, header) if header else None
        if due is None or endpoint_id is None:
            return None
        raw = {"endpoint_id": endpoint_id, "status": "pending", "attempts": "0"}
    out: dict[str, Any] = dict(raw)
    if "endpoint_id" not in out and header is not None:  # a first claim writes none
        out["endpoint_id"] = eventrecord.endpoint_of(delivery_id, header)
    if out.get("status") != "delivering":  # the claim whose outcome is written: not a lease
        out.pop("claim", None)
    if header is not None:  # its app and type: only an ordered or moved one's hash has them
        out.setdefault("app", header.get("app"))
        out.setdefault("type", header.get("type"))
    out.pop("recorded", None)  # record.lua's own bookkeeping (the last token it recorded)
    out.pop("lease_until", None)  # written by versions before processing held it alone
    if lease is not None:
        out["lease_until"] = lease
    a1 = out.pop("a1", None)  # the first request's log entry, short form (Reads._rows)
    out["id"] = delivery_id
    out.setdefault("event_id", (ids.derived(delivery_id) or ("", 0))[0])
    if "created_at" not in out:
        out["created_at"] = ids.created_ms(delivery_id)
    if "max_attempts" not in out and header is not None:
        out["max_attempts"] = header.get("max_attempts")
    out.setdefault("updated_at", out["created_at"])
    out.setdefault("log_n", 0)
    if a1 is not None:  # a first request that succeeded says when, and who made it
        first = attemptlog.expand(a1)
        out.setdefault("last_attempt_at", first["at"])
        out.setdefault("last_status_code", first["status_code"])
        out["worker"] = first["worker"]  # the request's (the claim's worker made it)
    for f in INT_FIELDS:
        if f in out:
            out[f] = num(out[f])
    code = out.get("last_status_code")
    out["last_status_code"] = int(code) if code else None
    out["last_error"] = out.get("last_error") or None
    if "lane" in out:  # ordered: a dead head that holds its lane says so
        out["blocking"] = out.get("blocking") == "1"
    # What an index holds: the next attempt of a pending one is its due score, and a
    # succeeded one finished when it was last updated (a dead one keeps finished_at).
    status = out.get("status")
    at = header.get("at") if header is not None else None
    if at is not None:
        out["deliver_at"] = int(at)
        # never claimed before it: pending with its time still ahead is still scheduled
        if status == "pending" and now_ms is not None and int(at) > now_ms:
            status = out["status"] = "scheduled"
    waits = status in ("pending", "scheduled") and due is not None
    out["next_attempt_at"] = int(due) if waits and due is not None else None
    if status == "succeeded":
        out.setdefault("finished_at", out["updated_at"])
    elif status != "dead":
        out["finished_at"] = None
    out.setdefault("finished_at", None)
    out.setdefault("last_attempt_at", None)
    return out
