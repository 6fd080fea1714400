"""Operator commands over ordered lanes: ``discard``, ``blocked``."""

from __future__ import annotations

from typing import Any

import click

from relay.cli.output import emit, json_option, per_id_outcome, print_rows, with_store
from relay.queue.store import Store


@click.command(short_help="Discard dead deliveries; a blocked lane's head lets it go on.")
@click.argument("delivery_ids", nargs=-1, required=True, metavar="ID...")
@json_option
def discard(delivery_ids: tuple[str, ...], as_json: bool) -> None:
    """Give up on dead deliveries (they stay dead letters, marked discarded_at).

    A dead head that blocks its ordered lane (ordering_on_dead: block) leaves the lane,
    and the next delivery of the lane goes. To send the head again instead, use
    `relay replay ID`: it is retried in place, still first in its lane. Exits 1 when
    any ID was not discarded (unknown, or not dead).

    \b
    Example:
      relay blocked                 # the blocked lanes and their dead heads
      relay discard dlv_01J...
    """
    result = with_store(lambda s: s.discard(list(delivery_ids)))
    per_id_outcome(result, as_json, "discarded")


async def _blocked(store: Store) -> list[dict[str, Any]]:
    rows = []
    for sk in store.keys.all_shards():
        for lane, head in await store.blocked_lanes(sk):
            rows.append({"lane": lane, "head": head, "shard": sk.shard})
    return rows


@click.command(short_help="List ordered lanes blocked by a dead head.")
@json_option
def blocked(as_json: bool) -> None:
    """Ordered lanes stopped at a dead head (ordering_on_dead: block), oldest first.

    Unblock one with `relay replay HEAD` (send it again, in place) or
    `relay discard HEAD` (skip it).

    \b
    Example:
      relay blocked --json | jq -r '.[].head'
    """
    rows = with_store(_blocked)
    emit(
        rows,
        as_json,
        lambda r: print_rows([[x["lane"], x["head"]] for x in r], ["lane", "dead head"]),
    )


COMMANDS = (discard, blocked)
