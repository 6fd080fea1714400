"""Events as the API lists and shows them: the seam between the routes and where events live.

:func:`list_events` pages through events newest first; its source is Redis
(:meth:`relay.queue.eventlist.EventListing.list_events`). Any other source of events
(an archive of older history) joins here: it lists the same summaries in the same order,
``(created ms, event id)`` descending, below the same position, and the two pages merge
by that order, so the routes and their cursors stay as they are.

:func:`event_page` is one event with, on request, every delivery expanded: its attempt
log and why it waits, and the endpoints they go to (for the headers the API shows).
"""

from __future__ import annotations

from typing import Any

from relay.archive.history import History
from relay.endpoints.health import Health
from relay.queue.store import EventFilter, Store

EXPANDED = 50  # deliveries an event page expands (the rest: GET /v1/deliveries?event_id=)


async def list_events(
    store: Store, f: EventFilter, *, limit: int, position: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of events matching ``f`` and the position after it (None: the end).
    Raises ValueError for a position no source made."""
    return await store.list_events(f, limit=limit, position=position)


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
