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

from relay.endpoints.health import Health
from relay.queue.store import EventFilter, Store

EXPANDED = 50  # deliveries an event page expands (the rest: GET /v1/deliveries?event_id=)


async def list_events(
    store: Store, f: EventFilter, *, limit: int, position: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of events matching ``f`` and the position after it (None: the end).
    Raises ValueError for a position no source made."""
    return await store.list_events(f, limit=limit, position=position)


async def event_page(store: Store, event_id: str, *, expand: bool) -> dict[str, Any] | None:
    """The event (payload, delivery refs, ``idempotency_key``); with ``expand``, its first
    :data:`EXPANDED` deliveries in full, the endpoints they go to (``endpoints``: id ->
    record, without the gone ones) and the body's length (``body_length``). None: no
    such event."""
    event = await store.get_event(event_id)
    if event is None:
        return None
    event["delivery_count"] = len(event["deliveries"])
    if not expand:
        return event
    rows = await store.event_deliveries(event_id, EXPANDED)
    await Health(store).explain_waits(rows)
    event["deliveries"] = rows
    event["endpoints"] = await store.get_endpoints({r["endpoint_id"] for r in rows})
    event["body_length"] = await store.event_body_length(event_id)
    return event
