"""The long-lived processes: ``relay api``, ``relay worker``, ``relay dev``, ``relay receiver``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from relay.cli.output import BadSetting, settings_from_env
from relay.domain import ed25519, signing
from relay.settings import DEV_DIR, Settings, SettingsError, TestHooks


@click.command()
@click.option("--host", help="Bind address (RELAY_HOST).")
@click.option("--port", type=int, help="Bind port (RELAY_PORT).")
def api(host: str | None, port: int | None) -> None:
    """Run the HTTP API, the dashboard and /metrics."""
    from relay.runner import run

    settings = settings_from_env(host=host, port=port)
    if not settings.api_tokens and not settings.auth_disabled:
        raise BadSetting(
            "RELAY_API_TOKENS is not set: set one or more tokens, or RELAY_AUTH_DISABLED=1"
        )
    run(settings, with_api=True, with_worker=False)


@click.command()
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

    settings = settings_from_env(worker_concurrency=concurrency, metrics_port=metrics_port)
    run(settings, with_api=False, with_worker=True, hooks=TestHooks.from_env())


@click.command()
@click.option("--host", help="Bind address (RELAY_HOST).")
@click.option("--port", type=int, help="Bind port (RELAY_PORT).")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=DEV_DIR,
    show_default=True,
    help="Where the API token, the record of the Redis in use and a private Redis's data go.",
)
@click.option(
    "--private-redis",
    is_flag=True,
    default=None,
    help="Always start a private redis-server, even when one answers on the default URL "
    "(RELAY_DEV_PRIVATE_REDIS=1; `make run PRIVATE_REDIS=1`).",
)
@click.option(
    "--redis-wait",
    type=click.FloatRange(min=0),
    default=30,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for the Redis RELAY_REDIS_URL names before giving up.",
)
def dev(
    host: str | None,
    port: int | None,
    data_dir: Path,
    private_redis: bool | None,
    redis_wait: float,
) -> None:
    """API and worker in one process, for a laptop.

    Uses RELAY_REDIS_URL when set; else the Redis answering on the default URL
    (redis://127.0.0.1:6379/0); else, or always with --private-redis, starts a private
    redis-server (append-only file on) on a free port. It prints which Redis it uses
    and records it in DATA_DIR/redis-url, so the operator commands (relay stats, relay
    dead, ...) run from the same folder find it; the record is removed when dev stops.
    Makes an API token when none is set (DATA_DIR/api-token); allows endpoints on
    loopback and private networks unless RELAY_ALLOW_PRIVATE_NETWORKS says otherwise.

    Before it starts anything it refuses, in one line, a DATA_DIR another relay dev runs
    on (DATA_DIR/dev.lock names it), a port already taken, and a RELAY_REDIS_URL that
    has not answered within --redis-wait seconds.
    """
    from relay.cli.devstart import check_port, hold_folder, wait_for_redis
    from relay.redisproc import RedisBinaryMissing
    from relay.runner import run_dev

    try:
        settings = Settings.for_dev(
            console=sys.stderr.isatty(), host=host, port=port, dev_private_redis=private_redis
        )
    except SettingsError as exc:
        raise BadSetting(str(exc)) from None
    if settings.dev_private_redis and settings.redis_url_given:
        raise BadSetting(
            "RELAY_REDIS_URL is set, so relay dev uses it: unset it to use a private Redis "
            "(--private-redis / RELAY_DEV_PRIVATE_REDIS=1)"
        )
    lock = hold_folder(data_dir, f"http://{settings.host}:{settings.port}")
    try:
        check_port(settings.host, settings.port)
        if settings.redis_url_given:
            wait_for_redis(settings, redis_wait)
        run_dev(settings, data_dir=data_dir)
    except (RedisBinaryMissing, RuntimeError) as exc:
        raise click.ClickException(f"relay dev: {str(exc).splitlines()[0]}") from None
    except OSError as exc:  # the data folder's files
        raise click.ClickException(f"relay dev: {exc}") from None
    finally:
        lock.close()


def _checked(parse: Callable[[str], object], value: str | None) -> str | None:
    """``value`` when ``parse`` takes it (or it is not given); else a usage error."""
    if value is not None:
        try:
            parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


@click.command(short_help="A local demo receiver that prints every webhook.")
@click.option("--port", type=int, default=9000, show_default=True, help="Port to listen on.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0 inside a container so workers can reach it).",
)
@click.option(
    "--status",
    type=click.IntRange(200, 599),
    default=200,
    show_default=True,
    help="Status code to answer with (e.g. 500 to see retries, 410 to see dead).",
)
@click.option(
    "--secret",
    callback=lambda ctx, param, value: _checked(signing.secret_bytes, value),
    help="Verify signatures with this whsec_ secret.",
)
@click.option(
    "--public-key",
    callback=lambda ctx, param, value: _checked(ed25519.verifying_key, value),
    help="Verify v1a (ed25519) signatures with this whpk_ key.",
)
def receiver(port: int, host: str, status: int, secret: str | None, public_key: str | None) -> None:
    """A demo receiver (on 127.0.0.1 by default) that prints every webhook it gets."""
    from relay.demo import run_receiver
    from relay.runner import listen_failure

    try:
        run_receiver(host=host, port=port, status=status, secret=secret, public_key=public_key)
    except OSError as exc:
        raise click.ClickException(f"relay receiver: {listen_failure(host, port, exc)}") from None


COMMANDS = (api, worker, dev, receiver)
