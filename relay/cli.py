"""The ``relay`` command: processes (api, worker, dev) and operator commands.

Operator commands talk to the same Redis as the services, through the same scripts,
so ``relay replay`` is exactly as safe as the API's replay.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson

from relay.settings import Settings, SettingsError
from relay.store import Store, connect

T = TypeVar("T")


def _settings(**overrides: Any) -> Settings:
    try:
        return Settings.from_env(**overrides)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None


def _with_store(fn: Callable[[Store], Awaitable[T]]) -> T:
    async def go() -> T:
        store = Store(connect(_settings()), _settings())
        try:
            await store.start()
            return await fn(store)
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except (OSError, ConnectionError) as exc:
        raise click.ClickException(f"cannot reach Redis: {exc}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("redis"):
            raise click.ClickException(f"Redis error: {exc}") from None
        raise


def _emit(data: Any, as_json: bool, table: Callable[[Any], None]) -> None:
    if as_json:
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        table(data)


def _rows(rows: list[list[Any]], headers: list[str]) -> None:
    cells = [headers] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="relay")
def main() -> None:
    """relay: webhook delivery on Redis.

    Settings come from RELAY_* environment variables (see the README).
    """


@main.command()
@click.option("--host", help="Bind address (RELAY_HOST).")
@click.option("--port", type=int, help="Bind port (RELAY_PORT).")
def api(host: str | None, port: int | None) -> None:
    """Run the HTTP API, the dashboard and /metrics."""
    from relay.runner import run

    settings = _settings(host=host, port=port)
    if not settings.api_tokens and not settings.auth_disabled:
        raise click.UsageError(
            "RELAY_API_TOKENS is not set: set one or more tokens, or RELAY_AUTH_DISABLED=1"
        )
    run(settings, with_api=True, with_worker=False)


@main.command()
@click.option("--concurrency", type=int, help="Sends in flight (RELAY_WORKER_CONCURRENCY).")
def worker(concurrency: int | None) -> None:
    """Run a delivery worker: claim due deliveries and send them."""
    from relay.runner import run

    run(_settings(worker_concurrency=concurrency), with_api=False, with_worker=True)


@main.command()
@click.option("--host", help="Bind address (RELAY_HOST).")
@click.option("--port", type=int, help="Bind port (RELAY_PORT).")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=Path(".relay"),
    show_default=True,
    help="Where a private Redis keeps its data.",
)
def dev(host: str | None, port: int | None, data_dir: Path) -> None:
    """API and worker in one process, for a laptop.

    Starts a private redis-server (append-only file on) when RELAY_REDIS_URL is unset
    and nothing answers on the default URL; makes an API token when none is set;
    allows endpoints on loopback and private networks unless
    RELAY_ALLOW_PRIVATE_NETWORKS says otherwise.
    """
    from relay.runner import run_dev

    env = dict(os.environ)
    env.setdefault("RELAY_ALLOW_PRIVATE_NETWORKS", "1")
    if sys.stderr.isatty():
        env.setdefault("RELAY_LOG_FORMAT", "console")
    try:
        settings = Settings.from_env(env, host=host, port=port)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    run_dev(settings, redis_url_given="RELAY_REDIS_URL" in os.environ, data_dir=data_dir)


@main.command()
@json_option
def stats(as_json: bool) -> None:
    """Counts by status, queue depth, oldest due age."""
    data = _with_store(lambda s: s.stats())

    def table(d: dict[str, Any]) -> None:
        _rows(
            [[k, v] for k, v in d["counts"].items()]
            + [[k, v] for k, v in d["queue"].items()]
            + [["reclaimed_total", d["reclaimed_total"]]],
            ["metric", "value"],
        )

    _emit(data, as_json, table)


@main.command()
@click.option("--endpoint", "endpoint_id", help="Only this endpoint's dead letters.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@json_option
def dead(endpoint_id: str | None, limit: int, as_json: bool) -> None:
    """List dead deliveries, newest first."""
    rows, _ = _with_store(
        lambda s: s.list_deliveries(status="dead", endpoint_id=endpoint_id, limit=limit)
    )
    _emit(
        rows,
        as_json,
        lambda rs: _rows(
            [
                [
                    r["id"],
                    r["endpoint_id"],
                    r["type"],
                    r["attempts"],
                    r["last_status_code"],
                    r["last_error"],
                ]
                for r in rs
            ],
            ["delivery", "endpoint", "type", "attempts", "last_status", "last_error"],
        ),
    )


@main.command()
@click.argument("delivery_ids", nargs=-1)
@json_option
def replay(delivery_ids: tuple[str, ...], as_json: bool) -> None:
    """Replay dead or succeeded deliveries by id."""
    if not delivery_ids:
        raise click.UsageError("give one or more delivery ids")
    result = _with_store(lambda s: s.replay(list(delivery_ids)))
    _emit(
        result,
        as_json,
        lambda r: _rows(
            [
                [k, "replayed" if v == "ok" else f"refused ({v or 'not found'})"]
                for k, v in r.items()
            ],
            ["delivery", "result"],
        ),
    )
    if any(v != "ok" for v in result.values()):
        sys.exit(1)


@main.command()
@click.argument("ident")
@json_option
def inspect(ident: str, as_json: bool) -> None:
    """Show a delivery (with its attempt log) or an event."""
    if ident.startswith("evt_"):
        data = _with_store(lambda s: s.get_event(ident))
    else:
        data = _with_store(lambda s: s.get_delivery(ident))
    if data is None:
        raise click.ClickException(f"{ident} not found")
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


@main.command()
@click.option("--app", help="Only this app's endpoints.")
@json_option
def endpoints(app: str | None, as_json: bool) -> None:
    """List endpoints."""
    rows = _with_store(lambda s: s.list_endpoints(app))
    for r in rows:
        r.pop("secret", None)
        r.pop("previous_secrets", None)
    _emit(
        rows,
        as_json,
        lambda rs: _rows(
            [[r["id"], r["app"], r["url"], ",".join(r["event_types"]), r["enabled"]] for r in rs],
            ["endpoint", "app", "url", "event_types", "enabled"],
        ),
    )


@main.command()
@click.option("--port", type=int, default=9000, show_default=True)
@click.option(
    "--status",
    type=int,
    default=200,
    show_default=True,
    help="Status code to answer with (e.g. 500 to see retries, 410 to see dead).",
)
@click.option("--secret", help="Verify signatures with this whsec_ secret.")
def receiver(port: int, status: int, secret: str | None) -> None:
    """A local demo receiver on 127.0.0.1 that prints every webhook it gets."""
    from relay.demo import run_receiver

    run_receiver(port=port, status=status, secret=secret)


if __name__ == "__main__":
    main()
