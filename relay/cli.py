"""The ``relay`` command: processes (api, worker, dev) and operator commands.

Operator commands talk to the same Redis as the services, through the same scripts,
so ``relay replay`` is exactly as safe as the API's replay. They print tables for people
and, with ``--json``, JSON for scripts; bad input exits 2 (usage error), an unknown id or
an unreachable Redis exits 1 with a one-line message.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson

from relay.domain.retry import parse_duration
from relay.endpoints.health import Health
from relay.ops.retention import Retention
from relay.queue.store import Store, connect
from relay.settings import Settings, SettingsError

T = TypeVar("T")


def _settings(**overrides: Any) -> Settings:
    try:
        return Settings.from_env(**overrides)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None


def _with_store(fn: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``fn`` against a started Store; Redis trouble becomes a one-line error, exit 1."""
    settings = _settings()

    async def go() -> T:
        store = Store(connect(settings), settings)
        try:
            await store.start()
            return await fn(store)
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except (OSError, ConnectionError) as exc:
        raise click.ClickException(f"cannot reach Redis (RELAY_REDIS_URL): {exc}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("redis"):
            if "connect" in str(exc).lower() or "Connection" in type(exc).__name__:
                raise click.ClickException(f"cannot reach Redis (RELAY_REDIS_URL): {exc}") from None
            raise click.ClickException(f"Redis error: {exc}") from None
        raise


def _iso(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _cut(text: Any, width: int = 60) -> str:
    s = "" if text is None else str(text).replace("\n", " ")
    return s if len(s) <= width else s[: width - 1] + "…"


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


class TimeParam(click.ParamType):
    """A point in time: ISO 8601 (UTC unless it says otherwise) or a duration ago (2h)."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        try:
            return int((datetime.now(UTC).timestamp() - parse_duration(text)) * 1000)
        except ValueError:
            pass
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            self.fail(
                f"{text!r} is neither an ISO 8601 time (2026-01-31T14:00:00Z) "
                "nor a duration ago (30m, 2h, 7d)",
                param,
                ctx,
            )
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return int(when.timestamp() * 1000)


TIME = TimeParam()
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (for scripts) instead of a table."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="relay", help="Show the version and exit.")
def main() -> None:
    """relay: webhook delivery on Redis.

    Settings come from RELAY_* environment variables (see the README); the operator
    commands (stats, dead, replay, endpoints, inspect, purge) use RELAY_REDIS_URL,
    RELAY_KEY_PREFIX and RELAY_SHARDS to find the data.

    TIME arguments take an ISO 8601 time (2026-01-31T14:00:00Z; UTC when no offset is
    given) or a duration meaning that long ago (90s, 30m, 2h, 7d).
    """


# ---------------------------------------------------------------------- processes


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
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve /metrics on this port, on RELAY_HOST (RELAY_METRICS_PORT; 0 = off).",
)
def worker(concurrency: int | None, metrics_port: int | None) -> None:
    """Run a delivery worker: claim due deliveries and send them.

    Each worker also sweeps expired deliveries (RELAY_RETENTION, RELAY_DEAD_RETENTION)
    every RELAY_SWEEP_INTERVAL.
    """
    from relay.runner import run

    settings = _settings(worker_concurrency=concurrency, metrics_port=metrics_port)
    run(settings, with_api=False, with_worker=True)


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


@main.command(short_help="A local demo receiver that prints every webhook.")
@click.option("--port", type=int, default=9000, show_default=True, help="Port to listen on.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0 inside a container so workers can reach it).",
)
@click.option(
    "--status",
    type=int,
    default=200,
    show_default=True,
    help="Status code to answer with (e.g. 500 to see retries, 410 to see dead).",
)
@click.option("--secret", help="Verify signatures with this whsec_ secret.")
def receiver(port: int, host: str, status: int, secret: str | None) -> None:
    """A demo receiver (on 127.0.0.1 by default) that prints every webhook it gets."""
    from relay.demo import run_receiver

    run_receiver(host=host, port=port, status=status, secret=secret)


# ---------------------------------------------------------------------- operator commands


@main.command()
@json_option
def stats(as_json: bool) -> None:
    """Counts by status, queue depth, oldest due age.

    \b
    Example:
      relay stats
      relay stats --json | jq .queue.due
    """
    data = _with_store(lambda s: s.stats())

    def table(d: dict[str, Any]) -> None:
        q = d["queue"]
        _rows(
            [[f"deliveries {k}", v] for k, v in d["counts"].items()]
            + [
                ["queue due now", q["due"]],
                ["queue scheduled later", q["scheduled"]],
                ["queue processing", q["processing"]],
                ["oldest due age (s)", q["oldest_due_age_seconds"]],
                ["leases reclaimed (all time)", d["reclaimed_total"]],
                ["shards", d["shards"]],
            ],
            ["metric", "value"],
        )

    _emit(data, as_json, table)


@main.command()
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
    rows, more = _with_store(
        lambda s: s.list_deliveries(status="dead", endpoint_id=endpoint_id, limit=limit)
    )

    def table(rs: list[dict[str, Any]]) -> None:
        _rows(
            [
                [
                    r["id"],
                    r["endpoint_id"],
                    r.get("type"),
                    r["attempts"],
                    r["last_status_code"],
                    _cut(r["last_error"], 40),
                    _iso(r.get("finished_at")),
                ]
                for r in rs
            ],
            ["delivery", "endpoint", "type", "attempts", "status", "last_error", "died_at"],
        )
        if more:
            click.echo(f"(showing the newest {limit}; raise --limit for more)", err=True)

    _emit(rows, as_json, table)


async def _replay_all_dead(store: Store, endpoint_id: str | None, since: int | None) -> dict:
    """Walk dead letters page by page (newest first) and replay each page in one go."""
    total = 0
    for sk in store.keys.all_shards():
        total += int(await store.redis.zcount(sk.dead, since if since else "-inf", "+inf"))
    with click.progressbar(length=total, label="replaying dead deliveries", file=sys.stderr) as bar:
        replayed, refused = await store.replay_dead(
            endpoint_id=endpoint_id, since=since, on_page=bar.update
        )
        bar.update(max(0, total - bar.pos))  # the total was an upper bound: finish the bar
    return {"replayed": replayed, "not_replayable": refused}


@main.command(short_help="Replay deliveries by ID, or all dead ones.")
@click.argument("delivery_ids", nargs=-1, metavar="[ID]...")
@click.option(
    "--all-dead", is_flag=True, help="Replay every dead delivery (narrow with the options below)."
)
@click.option(
    "--endpoint", "endpoint_id", metavar="ID", help="With --all-dead: only this endpoint's."
)
@click.option("--since", type=TIME, help="With --all-dead: only those that died at or after TIME.")
@json_option
def replay(
    delivery_ids: tuple[str, ...],
    all_dead: bool,
    endpoint_id: str | None,
    since: int | None,
    as_json: bool,
) -> None:
    """Put dead or succeeded deliveries back to pending, with a fresh attempt budget.

    Give delivery IDs, or --all-dead. Exits 1 when any ID was not replayed (unknown, or
    pending/delivering).

    \b
    Examples:
      relay replay dlv_01J... dlv_01J...
      relay replay --all-dead --endpoint ep_01J... --since 2h
    """
    if all_dead:
        if delivery_ids:
            raise click.UsageError("give delivery IDs or --all-dead, not both")
        result = _with_store(lambda s: _replay_all_dead(s, endpoint_id, since))
        if as_json:
            _emit(result, True, lambda _: None)
        else:
            click.echo(f"replayed {result['replayed']} dead deliveries")
            if result["not_replayable"]:
                click.echo(f"{result['not_replayable']} were no longer dead (replayed meanwhile)")
        return
    if endpoint_id is not None or since is not None:
        raise click.UsageError("--endpoint and --since go with --all-dead")
    if not delivery_ids:
        raise click.UsageError("give one or more delivery IDs, or --all-dead")
    result = _with_store(lambda s: s.replay(list(delivery_ids)))
    _emit(
        result,
        as_json,
        lambda r: _rows(
            [
                [k, "replayed" if v == "ok" else f"not replayed: {v or 'not found'}"]
                for k, v in r.items()
            ],
            ["delivery", "result"],
        ),
    )
    failed = sum(1 for v in result.values() if v != "ok")
    if failed:
        click.echo(f"Error: {failed} of {len(result)} not replayed", err=True)
        sys.exit(1)


async def _inspect(store: Store, ident: str) -> dict[str, Any] | None:
    if ident.startswith("evt_"):
        event = await store.get_event(ident)
        sk = store.shard_keys_for(ident)
        if event is None or sk is None:
            return None
        rows = await store.get_deliveries(sk, [d["id"] for d in event["deliveries"]])
        found = {r["id"]: r for r in rows}
        for d in event["deliveries"]:
            row = found.get(d["id"])
            d["status"] = row["status"] if row else "expired"
            d["attempts"] = row["attempts"] if row else None
        return {"kind": "event", **event}
    delivery = await store.get_delivery(ident)
    return None if delivery is None else {"kind": "delivery", **delivery}


def _show_delivery(d: dict[str, Any]) -> None:
    _rows(
        [
            ["delivery", d["id"]],
            ["status", d["status"]],
            ["event", d["event_id"]],
            ["endpoint", d["endpoint_id"]],
            ["type", d.get("type")],
            ["attempts", f"{d['attempts']} of {d['max_attempts']}"],
            ["created", _iso(d.get("created_at"))],
            ["next attempt", _iso(d.get("next_attempt_at"))],
            ["finished", _iso(d.get("finished_at"))],
            ["last status", d.get("last_status_code")],
            ["last error", _cut(d.get("last_error"), 100)],
            ["worker", d.get("worker")],
        ],
        ["field", "value"],
    )
    click.echo()
    _rows(
        [
            [
                e.get("n"),
                _iso(e.get("at")),
                e.get("attempt"),
                e.get("duration_ms"),
                e.get("status_code"),
                _cut(e.get("error") or "", 30) + (" (fenced)" if e.get("fenced") else ""),
                e.get("outcome"),
                e.get("worker"),
            ]
            for e in d.get("attempt_log", [])
        ],
        ["n", "at", "attempt", "ms", "status", "error", "outcome", "worker"],
    )


def _show_event(e: dict[str, Any]) -> None:
    _rows(
        [
            ["event", e["id"]],
            ["type", e["type"]],
            ["app", e["app"]],
            ["created", _iso(e["created_at"])],
            ["payload", _cut(orjson.dumps(e["payload"]).decode(), 100)],
        ],
        ["field", "value"],
    )
    click.echo()
    _rows(
        [[d["id"], d["endpoint_id"], d["status"], d["attempts"]] for d in e["deliveries"]],
        ["delivery", "endpoint", "status", "attempts"],
    )


@main.command(short_help="Show a delivery with its attempt log, or an event.")
@click.argument("ident", metavar="ID")
@json_option
def inspect(ident: str, as_json: bool) -> None:
    """Show a delivery (dlv_...) with its attempt log, or an event (evt_...) with its
    deliveries. Exits 1 when ID is not found.

    \b
    Example:
      relay inspect dlv_01J...
    """
    data = _with_store(lambda s: _inspect(s, ident))
    if data is None:
        raise click.ClickException(f"{ident} not found")
    if as_json:
        _emit(data, True, lambda _: None)
    elif data["kind"] == "event":
        _show_event(data)
    else:
        _show_delivery(data)


async def _endpoints(store: Store, app: str | None) -> list[dict[str, Any]]:
    return await Health(store).endpoint_views(await store.list_endpoints(app))


@main.command(short_help="List endpoints with their breaker state.")
@click.option("--app", help="Only this app's endpoints.")
@json_option
def endpoints(app: str | None, as_json: bool) -> None:
    """List endpoints with their breaker state (secrets are never shown).

    \b
    Example:
      relay endpoints --app shop
    """
    rows = _with_store(lambda s: _endpoints(s, app))
    _emit(
        rows,
        as_json,
        lambda rs: _rows(
            [
                [
                    r["id"],
                    r["app"],
                    _cut(r["url"], 50),
                    ",".join(r["event_types"]),
                    "yes" if r["enabled"] else "no",
                    r["breaker"]["state"],
                    r.get("rate_limit") or "-",
                    r.get("max_in_flight") or "-",
                ]
                for r in rs
            ],
            [
                "endpoint",
                "app",
                "url",
                "event_types",
                "enabled",
                "breaker",
                "rate/s",
                "max_in_flight",
            ],
        ),
    )


async def _purge(store: Store, before: int) -> dict[str, Any]:
    cutoff = before - 1  # expire.lua removes "at or before" its cutoff; TIME is exclusive
    total = 0
    for sk in store.keys.all_shards():
        total += int(await store.redis.zcount(sk.succeeded, "-inf", cutoff))
    with click.progressbar(length=total, label="purging", file=sys.stderr) as bar:
        done = await Retention(store).expire(
            succeeded_before=cutoff, progress=lambda got: bar.update(got.deliveries)
        )
    return {"deliveries": done.deliveries, "events": done.events, "before": _iso(before)}


@main.command(short_help="Remove succeeded deliveries finished before TIME.")
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
    result = _with_store(lambda s: _purge(s, before))
    if as_json:
        _emit(result, True, lambda _: None)
    else:
        click.echo(
            f"removed {result['deliveries']} succeeded deliveries and {result['events']} "
            f"events (finished before {result['before']})"
        )


if __name__ == "__main__":
    main()
