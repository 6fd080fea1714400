"""Events as the API lists and shows them: the seam between the routes and where events live.

:func:`list_events` pages through events newest first from Redis
(:meth:`relay.queue.eventlist.EventListing.list_events`) and, when ``RELAY_ARCHIVE_URL``
is set, from the archive (:meth:`relay.archive.tables.Tables.event_page`): both list
the same summaries in the same order, ``(created ms, event id)`` descending, below the
same position, and the two pages merge by that order under one cursor
(:func:`relay.archive.history.merged`); an event in both tiers while it moves comes
once, as Redis has it. A payload filter (containment, ``@>``) searches the archive
only: an event is searchable by payload once it has moved there.

:func:`event_page` is one event with, on request, every delivery expanded: its attempt
log and why it waits, and the endpoints they go to (for the headers the API shows).
"""

from __future__ import annotations

from typing import Any

from relay.archive.history import ARCHIVED, History, merged
from relay.archive.tables import Filters
from relay.domain import eventrecord
from relay.endpoints.health import Health
from relay.queue.eventlist import summary
from relay.queue.store import EventFilter, Store

EXPANDED = 50  # deliveries an event page expands (the rest: GET /v1/deliveries?event_id=)


class ArchiveRequired(Exception):
    """A payload search without an archive to search."""


async def list_events(
    store: Store,
    f: EventFilter,
    *,
    limit: int,
    position: str | None,
    history: History | None = None,
    payload: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of events matching ``f`` (and, archived ones, containing ``payload``) and
    the position after it (None: the end). Raises ValueError for a position no source
    made, ArchiveRequired for a payload search without an archive, ArchiveUnavailable
    when the archive does not answer."""
    archive = history is not None and history.tables is not None
    if payload is not None and not archive:
        raise ArchiveRequired
    if payload is None:
        hot, hot_next = await store.list_events(f, limit=limit, position=position)
    else:
        hot, hot_next = [], None
    if history is None or not archive or (f.status is not None and f.status not in ARCHIVED):
        return hot, hot_next
    filters = Filters(
        app=f.app,
        event_type=f.event_type,
        endpoint_id=f.endpoint_id,
        status=f.status,
        since=f.since,
        until=f.until,
        idempotency_key=f.idempotency_key,
        payload=payload,
    )
    found, last = await history.archived_events(filters, limit=limit, cursor=position)
    cold = [_archived(event_id, stored, rows) for event_id, stored, rows in found]
    return merged(hot, hot_next, cold, last, limit=limit)


def _archived(event_id: str, stored: bytes, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """An archived event's summary, its deliveries in the event's order."""
    header = eventrecord.header_of(stored)
    order = {d: i for i, (d, _) in enumerate(eventrecord.deliveries(event_id, header))}
    rows = sorted(rows, key=lambda r: order.get(r["id"], len(order)))
    return summary(event_id, header, rows)


async def event_page(
    store: Store, event_id: str, *, expand: bool, history: History | None = None
) -> dict[str, Any] | None:
    """The event (payload, delivery refs, ``idempotency_key``); with ``expand``, its first
    :data:`EXPANDED` deliveries in full, the endpoints they go to (``endpoints``: id ->
    record, without the gone ones) and the body's length (``body_length``). None: no
    such event. With ``history``, an event or delivery that moved to the archive is read
    from there (raises ArchiveUnavailable when the archive does not answer)."""
    event = await (store if history is None else history).get_event(event_id)
    if event is None:
        return None
    event["delivery_count"] = len(event["deliveries"])
    if not expand:
        return event
    rows = await store.event_deliveries(event_id, EXPANDED)
    if history is not None and len(rows) < min(len(event["deliveries"]), EXPANDED):
        rows = await _from_both(history, event["deliveries"][:EXPANDED])
    await Health(store).explain_waits(rows)
    event["deliveries"] = rows
    event["endpoints"] = await store.get_endpoints({r["endpoint_id"] for r in rows})
    event["body_length"] = await store.event_body_length(event_id)
    return event


async def _from_both(history: History, refs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The deliveries of ``refs`` in full, each from Redis or the archive."""
    rows = [await history.get_delivery(ref["id"]) for ref in refs]
    return [row for row in rows if row is not None]
