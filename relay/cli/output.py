"""What every operator command shares: settings, a started Store, tables, JSON, TIME."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
import orjson

from relay.archive.history import History
from relay.domain.retry import parse_duration
from relay.queue.store import Store, connect
from relay.settings import Settings, SettingsError

T = TypeVar("T")


class BadSetting(click.ClickException):
    """A ``RELAY_*`` variable relay cannot use: one line, exit 2 (bad input)."""

    exit_code = 2


def settings_from_env(**overrides: Any) -> Settings:
    try:
        return Settings.from_env(**overrides)
    except SettingsError as exc:
        raise BadSetting(str(exc)) from None


def operator_settings() -> Settings:
    """The operator commands' settings: RELAY_REDIS_URL, else the Redis a running
    ``relay dev`` recorded in ``.relay/redis-url``, else the default URL."""
    try:
        return Settings.for_operator()
    except SettingsError as exc:
        raise BadSetting(str(exc)) from None


def _unreachable(settings: Settings, exc: BaseException) -> click.ClickException:
    hint = ""
    if settings.redis_url_source not in ("RELAY_REDIS_URL", "default"):
        hint = (
            f"; {settings.redis_url_source} was left by `relay dev`: if it is not running,"
            " delete that file or set RELAY_REDIS_URL"
        )
    return click.ClickException(f"cannot reach Redis at {settings.redis_shown}: {exc}{hint}")


def with_history(fn: Callable[[History], Awaitable[T]]) -> T:
    """Run ``fn`` against the reads of both tiers (Redis, and the archive when
    ``RELAY_ARCHIVE_URL`` is set), as the API answers them."""

    async def go(store: Store) -> T:
        history = History.of(store)
        try:
            return await fn(history)
        finally:
            await history.close()

    return with_store(go)


def with_store(fn: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``fn`` against a started Store. Every failure is one line on stderr, no
    traceback: Redis unreachable or failing, exit 1 (bad settings exit 2, usage errors)."""
    settings = operator_settings()

    async def go() -> T:
        store = Store(connect(settings), settings)
        try:
            await store.start()
            return await fn(store)
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except click.ClickException:
        raise
    except (OSError, ConnectionError) as exc:
        raise _unreachable(settings, exc) from None
    except Exception as exc:
        if type(exc).__module__.startswith("redis"):
            if "connect" in str(exc).lower() or "Connection" in type(exc).__name__:
                raise _unreachable(settings, exc) from None
            raise click.ClickException(f"Redis error at {settings.redis_shown}: {exc}") from None
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None


def iso(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def cut(text: Any, width: int = 60) -> str:
    s = "" if text is None else str(text).replace("\n", " ")
    return s if len(s) <= width else s[: width - 1] + "…"


def emit(data: Any, as_json: bool, table: Callable[[Any], None]) -> None:
    if as_json:
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        table(data)


def print_rows(rows: list[list[Any]], headers: list[str]) -> None:
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


def per_id_outcome(result: dict[str, str], as_json: bool, done: str) -> None:
    """Report a transition applied to delivery ids (``relay replay``, ``relay discard``):
    each id maps to "ok" or the status that refused it ("" for an unknown id); exits 1
    when any was refused."""
    emit(
        result,
        as_json,
        lambda r: print_rows(
            [[k, done if v == "ok" else f"not {done}: {v or 'not found'}"] for k, v in r.items()],
            ["delivery", "result"],
        ),
    )
    failed = sum(1 for v in result.values() if v != "ok")
    if failed:
        click.echo(f"Error: {failed} of {len(result)} not {done}", err=True)
        sys.exit(1)


def outbox_backlog(dsn: str, table: str) -> dict[str, Any]:
    """The outbox's rows waiting, oldest row age and dead rows (``relay stats``); a
    database that does not answer is one line, exit 1."""
    import psycopg

    from relay.connectors import outbox_admin

    try:
        d = outbox_admin.stats(dsn, table, dead_limit=0)
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise click.ClickException(f"outbox (RELAY_OUTBOX_DSN): {first}") from None
    return {k: d[k] for k in ("table", "waiting", "oldest_age_seconds", "dead")}
