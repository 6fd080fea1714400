"""The ``relay`` command: processes (api, worker, dev) and operator commands.

Operator commands talk to the same Redis as the services, through the same scripts,
so ``relay replay`` is exactly as safe as the API's replay. They print tables for people
and, with ``--json``, JSON for scripts; bad input exits 2 (usage error), an unknown id or
an unreachable Redis exits 1 with a one-line message.
"""

from __future__ import annotations

import click

from relay.cli import deliveries, lanes, migrate, outbox, processes, views


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="relay", help="Show the version and exit.")
def main() -> None:
    """relay: webhook delivery on Redis.

    Settings come from RELAY_* environment variables (docs: reference/settings); the operator
    commands (stats, dead, replay, discard, blocked, endpoints, inspect, purge,
    migrate) use RELAY_REDIS_URL, RELAY_KEY_PREFIX and RELAY_SHARDS to find the data.

    TIME arguments take an ISO 8601 time (2026-01-31T14:00:00Z; UTC when no offset is
    given) or a duration meaning that long ago (90s, 30m, 2h, 7d).
    """


for _module in (processes, deliveries, lanes, views, outbox, migrate):
    for _command in _module.COMMANDS:
        main.add_command(_command)
