"""Operator commands over deliveries: ``stats``, ``dead``, ``replay``, ``purge``."""

from __future__ import annotations

import sys
from typing import Any

import click

from relay.archive.history import History
from relay.cli.output import (
    TIME,
    cut,
    emit,
    iso,
    json_option,
    operator_settings,
    outbox_backlog,
    per_id_outcome,
    print_rows,
    with_history,
    with_store,
)
from relay.cli.replays import cancel_job, job_spec, run_job
from relay.ops.retention import Retention
from relay.queue.store import Store


async def _stats_with_redis(history: History) -> dict[str, Any]:
    data = await history.stats()
    data["redis"] = (await history.store.server_facts()).as_dict()  # role, persistence, replicas
    return data


@click.command()
@json_option
def stats(as_json: bool) -> None:
    """Counts by status, queue depth, oldest due age.

    \b
    Example:
      relay stats
      relay stats --json | jq .queue.due
    """
    data = with_history(_stats_with_redis)
    settings = operator_settings()
    if settings.outbox_dsn:  # the outbox backlog too, when this machine publishes from one
        data["outbox"] = outbox_backlog(settings.outbox_dsn, settings.outbox_table)

    def table(d: dict[str, Any]) -> None:
        q = d["queue"]
        outbox = d.get("outbox")
        print_rows(
            [[f"deliveries {k}", v] for k, v in d["counts"].items()]
            + [
                ["queue due now", q["due"]],
                ["queue scheduled later", q["scheduled"]],
                ["queue processing", q["processing"]],
                ["oldest due age (s)", q["oldest_due_age_seconds"]],
                ["leases reclaimed (all time)", d["reclaimed_total"]],
                ["ordered lanes blocked", d["blocked_lanes"]],
                ["shards", d["shards"]],
                ["redis role", d["redis"]["role"]],
                ["redis persistence", d["redis"]["persistence"]],
                ["redis replicas", d["redis"]["connected_replicas"]],
            ]
            + (
                [
                    ["outbox rows waiting", outbox["waiting"]],
                    ["outbox oldest row age (s)", outbox["oldest_age_seconds"]],
                    ["outbox dead rows", outbox["dead"]],
                ]
                if outbox
                else []
            ),
            ["metric", "value"],
        )

    emit(data, as_json, table)


async def known_endpoint(store: Store, endpoint_id: str | None) -> None:
    """An unknown endpoint id is an error (exit 1), not an empty answer."""
    if endpoint_id is not None and not await store.endpoint_known(endpoint_id):
        raise click.ClickException(f"endpoint {endpoint_id} not found")


async def _dead(
    history: History, endpoint_id: str | None, limit: int
) -> tuple[list[dict[str, Any]], str | None]:
    await known_endpoint(history.store, endpoint_id)
    return await history.list_deliveries(status="dead", endpoint_id=endpoint_id, limit=limit)


@click.command()
@click.option("--endpoint", "endpoint_id", metavar="ID", help="Only this endpoint's dead letters.")
@click.option(
    "--limit",
    type=click.IntRange(1, 500),
    default=50,
    show_default=True,
    help="Show at most this many (newest first).",
)
@json_option
def dead(endpoint_id: str | None, limit: int, as_json: bool) -> None:
    """List dead deliveries, newest first.

    \b
    Example:
      relay dead --endpoint ep_01J... --limit 20
    """
    rows, more = with_history(lambda h: _dead(h, endpoint_id, limit))

    def table(rs: list[dict[str, Any]]) -> None:
        print_rows(
            [
                [
                    r["id"],
                    r["endpoint_id"],
                    r.get("type"),
                    r["attempts"],
                    r["last_status_code"],
                    cut(r["last_error"], 40),
                    iso(r.get("finished_at")),
                ]
                for r in rs
            ],
            ["delivery", "endpoint", "type", "attempts", "last result", "last_error", "died_at"],
        )
        if more:
            click.echo(f"(showing the newest {limit}; raise --limit for more)", err=True)

    emit(rows, as_json, table)


async def _replay_all_dead(history: History, endpoint_id: str | None, since: int | None) -> dict:
    """Walk dead letters page by page (newest first) and replay each page in one go; then
    the archived ones (RELAY_ARCHIVE_URL), which come back to Redis live."""
    await known_endpoint(history.store, endpoint_id)
    total = await history.store.count_dead(since)
    with click.progressbar(length=total, label="replaying dead deliveries", file=sys.stderr) as bar:
        replayed, refused = await history.replay_dead(
            endpoint_id=endpoint_id, since=since, on_page=bar.update
        )
        bar.update(max(0, total - bar.pos))  # the total was an upper bound: finish the bar
    return {"replayed": replayed, "not_replayable": refused}


@click.command(short_help="Replay deliveries by ID, or all dead ones.")
@click.argument("delivery_ids", nargs=-1, metavar="[ID]...")
@click.option(
    "--all-dead", is_flag=True, help="Replay every dead delivery (narrow with the options below)."
)
@click.option(
    "--endpoint", "endpoint_id", metavar="ID", help="With --all-dead: only this endpoint's."
)
@click.option(
    "--since",
    type=TIME,
    help="With --all-dead: died at or after TIME. With --until: a replay job of the "
    "deliveries created from TIME.",
)
@click.option("--until", type=TIME, help="A replay job: deliveries created up to TIME.")
@click.option("--type", "event_type", metavar="PATTERN", help="Job: event type (order.*).")
@click.option(
    "--status", "statuses", default="dead", show_default=True, help="Job: dead,succeeded."
)
@click.option("--dry-run", is_flag=True, help="Job: only count what it would replay.")
@click.option("--no-wait", is_flag=True, help="Job: start it and print its id, do not watch.")
@click.option("--cancel", "cancel_id", metavar="RPL_ID", help="Cancel a running replay job.")
@json_option
def replay(
    delivery_ids: tuple[str, ...],
    all_dead: bool,
    endpoint_id: str | None,
    since: int | None,
    until: int | None,
    event_type: str | None,
    statuses: str,
    dry_run: bool,
    no_wait: bool,
    cancel_id: str | None,
    as_json: bool,
) -> None:
    """Put dead or succeeded deliveries back to pending, with a fresh attempt budget.

    Give delivery IDs, or --all-dead, or a time range (--since and --until) for a
    reconciliation replay job that the workers run, paced per endpoint. Exits 1 when
    any ID was not replayed (unknown, or pending/delivering).

    \b
    Examples:
      relay replay dlv_01J... dlv_01J...
      relay replay --all-dead --endpoint ep_01J... --since 2h
      relay replay --since 2026-12-01T10:00:00Z --until 2026-12-01T12:00:00Z --dry-run
      relay replay --since 6h --until 1h --type 'order.*' --status dead,succeeded
      relay replay --cancel rpl_01J...
    """
    if cancel_id is not None:
        cancel_job(cancel_id, as_json)
        return
    if until is not None:
        if delivery_ids or all_dead or since is None:
            raise click.UsageError("a replay job takes --since and --until (no IDs, no --all-dead)")
        spec = job_spec(since, until, endpoint_id, event_type, statuses, dry_run)
        run_job(spec, wait=not no_wait, as_json=as_json)
        return
    if event_type is not None or dry_run or no_wait or statuses != "dead":
        raise click.UsageError("--type, --status, --dry-run and --no-wait go with --until")
    if all_dead:
        if delivery_ids:
            raise click.UsageError("give delivery IDs or --all-dead, not both")
        result = with_history(lambda h: _replay_all_dead(h, endpoint_id, since))
        if as_json:
            emit(result, True, lambda _: None)
        else:
            click.echo(f"replayed {result['replayed']} dead deliveries")
            if result["not_replayable"]:
                click.echo(f"{result['not_replayable']} were no longer dead (replayed meanwhile)")
        return
    if endpoint_id is not None or since is not None:
        raise click.UsageError("--endpoint and --since go with --all-dead or --until")
    if not delivery_ids:
        raise click.UsageError("give one or more delivery IDs, or --all-dead")
    result = with_history(lambda h: h.replay(list(delivery_ids)))
    per_id_outcome(result, as_json, "replayed")


async def _purge(store: Store, before: int) -> dict[str, Any]:
    cutoff = before - 1  # expire.lua removes "at or before" its cutoff; TIME is exclusive
    total = await store.count_succeeded(cutoff)
    with click.progressbar(length=total, label="purging", file=sys.stderr) as bar:
        done = await Retention(store).expire(
            succeeded_before=cutoff, progress=lambda got: bar.update(got.deliveries)
        )
    return {"deliveries": done.deliveries, "events": done.events, "before": iso(before)}


@click.command(short_help="Remove succeeded deliveries finished before TIME.")
@click.option(
    "--succeeded-before",
    "before",
    type=TIME,
    required=True,
    help="Remove succeeded deliveries that finished before TIME (e.g. 2d, or an ISO time).",
)
@json_option
def purge(before: int, as_json: bool) -> None:
    """Remove succeeded deliveries now, rather than at RELAY_RETENTION.

    Removes each delivery's record and attempt log and its index entries, and an event
    with its last delivery (the same script the workers' retention sweeper runs).
    Pending, in-flight and dead deliveries are never touched.

    \b
    Example:
      relay purge --succeeded-before 1d
    """
    result = with_store(lambda s: _purge(s, before))
    if as_json:
        emit(result, True, lambda _: None)
    else:
        click.echo(
            f"removed {result['deliveries']} succeeded deliveries and {result['events']} "
            f"events (finished before {result['before']})"
        )


COMMANDS = (stats, dead, replay, purge)
