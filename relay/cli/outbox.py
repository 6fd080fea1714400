"""``relay outbox``: run the Postgres outbox connector, or manage its table."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import Any

import click

from relay.cli.output import emit, json_option, print_rows, settings_from_env
from relay.settings import Settings, TestHooks


def _crash_hook(after: int) -> Any:
    """Test hook (``RELAY_TEST_OUTBOX_CRASH_AFTER``): exit 86 right after the Nth event of
    this process was acknowledged by Redis, before its row is removed."""
    if after <= 0:
        return None
    seen = [0]

    def hook(row_id: int) -> None:
        seen[0] += 1
        if seen[0] >= after:
            os._exit(86)

    return hook


async def _serve(settings: Settings, hooks: TestHooks) -> None:
    from relay.connectors.outbox import OutboxConnector
    from relay.ops import metrics
    from relay.queue.errors import NOT_UP
    from relay.queue.store import Store, connect
    from relay.runner import listening

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    store = Store(connect(settings), settings)
    delay = 0.1
    while True:  # started while Redis is down: wait for it (rows wait in the table)
        try:
            await store.start()
            break
        except NOT_UP as exc:
            print(
                f"relay outbox: Redis {settings.redis_shown} unavailable ({exc}); retrying",
                file=sys.stderr,
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            await store.close()
            return
        delay = min(delay * 2, 2.0)
    exporter = None
    try:
        if settings.metrics_port:
            host, port = settings.host, settings.metrics_port
            exporter = await listening(
                metrics.serve(store, host, port), host, port, "--metrics-port, RELAY_METRICS_PORT"
            )
        hook = _crash_hook(hooks.outbox_crash_after)
        await OutboxConnector(store, settings, after_publish=hook).run(stop)
    finally:
        if exporter is not None:
            await exporter.cleanup()
        await store.close()


def _need_dsn(settings: Settings) -> str:
    if not settings.outbox_dsn:
        raise click.UsageError("RELAY_OUTBOX_DSN is not set (a postgresql:// URL)")
    return settings.outbox_dsn


@click.command(short_help="Publish rows of a Postgres outbox table (the connector).")
@click.option("--print-schema", is_flag=True, help="Print the DDL (table, trigger) and exit.")
@click.option("--init", "init_", is_flag=True, help="Apply the DDL to RELAY_OUTBOX_DSN and exit.")
@click.option("--stats", "show_stats", is_flag=True, help="Backlog and dead rows, then exit.")
@click.option(
    "--replay-dead",
    "replay",
    multiple=True,
    metavar="ID|all",
    help="Put dead rows (by outbox id, or all) back into the outbox and exit.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve /metrics on this port, on RELAY_HOST (RELAY_METRICS_PORT; 0 = off).",
)
@json_option
def outbox(
    print_schema: bool,
    init_: bool,
    show_stats: bool,
    replay: tuple[str, ...],
    metrics_port: int | None,
    as_json: bool,
) -> None:
    """Run the outbox connector: every row committed to RELAY_OUTBOX_TABLE (default
    relay_outbox) in RELAY_OUTBOX_DSN becomes exactly one relay event, and leaves the
    table once Redis has acknowledged it. Run any number of replicas; SIGTERM stops one
    after its current batch.

    \b
    Example:
      RELAY_OUTBOX_DSN=postgresql://app@127.0.0.1/shop relay outbox --init
      RELAY_OUTBOX_DSN=postgresql://app@127.0.0.1/shop relay outbox
      relay outbox --stats --json
      relay outbox --replay-dead all
    """
    from relay.connectors import outbox_admin, outbox_schema

    settings = settings_from_env(metrics_port=metrics_port)
    if print_schema:
        click.echo(outbox_schema.ddl_text(outbox_schema.names(settings.outbox_table)), nl=False)
        return
    dsn = _need_dsn(settings)
    table = settings.outbox_table
    import psycopg

    try:
        if init_:
            outbox_admin.init(dsn, table)
            click.echo(f"relay outbox: {table} and {table}_dead are ready", err=True)
            return
        if show_stats:
            emit(outbox_admin.stats(dsn, table), as_json, _show_stats)
            return
        if replay:
            ids = None if "all" in replay else [_row_id(r) for r in replay]
            moved = outbox_admin.replay_dead(dsn, table, ids)
            emit({"replayed": moved}, as_json, lambda d: click.echo(f"replayed {len(moved)}"))
            return
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise click.ClickException(f"Postgres (RELAY_OUTBOX_DSN): {first}") from None
    from relay import logs
    from relay.runner import CannotListen, run_loop

    logs.configure(settings.log_format, settings.log_level)
    try:
        run_loop(settings, _serve(settings, TestHooks.from_env()))
    except CannotListen as exc:
        raise click.ClickException(f"relay outbox: {exc}") from None


def _row_id(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise click.BadParameter(f"{raw!r} is not a row id (or 'all')") from None


def _show_stats(d: dict[str, Any]) -> None:
    print_rows(
        [
            ["outbox rows waiting", d["waiting"]],
            ["oldest waiting row age (s)", d["oldest_age_seconds"]],
            ["dead rows", d["dead"]],
        ],
        ["metric", "value"],
    )
    if d["dead_rows"]:
        click.echo()
        print_rows(
            [[r["id"], r["type"], r["app"], r["failed_at"], r["error"]] for r in d["dead_rows"]],
            ["row", "type", "app", "failed", "error"],
        )


COMMANDS = (outbox,)
