"""``relay migrate``: move a Redis written by key layout v1 or v2 to v3 (relay/queue/migrate.py)."""

from __future__ import annotations

import dataclasses

import click

from relay.cli.output import emit, json_option, print_rows, with_store
from relay.queue.keys import LAYOUT
from relay.queue.migrate import OLD
from relay.queue.store import Migrated, Store


@click.command()
@click.option("--dry-run", is_flag=True, help="Count the keys of older layouts; change nothing.")
@json_option
def migrate(dry_run: bool, as_json: bool) -> None:
    """Move relay's keys from layout v1 or v2 to v3, with no loss.

    Stop every relay api and worker first (they refuse to start while an old key is left).
    Each key is copied before its old key is deleted; a run cut short is simply run again.

    \b
    Example:
      relay migrate --dry-run
      relay migrate
    """

    async def go(store: Store) -> Migrated:
        return await store.migrate(dry_run=dry_run)

    done = with_store(go)
    data = {"from": list(OLD), "to": LAYOUT, "dry_run": dry_run, **dataclasses.asdict(done)}

    def table(d: dict[str, object]) -> None:
        verb = "would move" if dry_run else "moved"
        click.echo(f"{verb} {done.keys} keys from layouts {', '.join(OLD)} to {LAYOUT}")
        rows = [[kind, n] for kind, n in sorted(done.by_kind.items())]
        if rows:
            print_rows(rows, ["kind", "keys"])
        if done.dropped:
            click.echo(f"{done.dropped} of them deleted: v1's events index, which {LAYOUT} has not")
        if done.already:
            click.echo(f"{done.already} were under {LAYOUT} already (an earlier run)")

    emit(data, as_json, table)


COMMANDS = (migrate,)
