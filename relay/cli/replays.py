"""``relay replay --since --until ...``: a reconciliation replay job, and its progress.

The job runs in the workers (relay/ops/replays.py); this command starts it (or counts,
with ``--dry-run``), then prints its progress until it ends. Ctrl-C stops watching, not
the job: ``relay replay --cancel rpl_...`` cancels it.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click
from pydantic import ValidationError

from relay.cli.output import emit, print_rows, with_store
from relay.domain import signing
from relay.domain.replayspec import ReplayIn
from relay.domain.schema import refusal
from relay.ops.replays import ReplayNotRunning, Replays
from relay.queue.store import Store

FINAL = ("done", "cancelled", "failed")


def job_spec(
    since: int,
    until: int,
    endpoint_id: str | None,
    event_type: str | None,
    statuses: str,
    dry_run: bool,
) -> ReplayIn:
    """The same validation as ``POST /v1/replays``; a refusal is a usage error (exit 2)."""
    try:
        return ReplayIn(
            since=signing.rfc3339_ms(since),
            until=signing.rfc3339_ms(until),
            endpoint_id=endpoint_id,
            type=event_type,
            status=[s.strip() for s in statuses.split(",") if s.strip()],  # type: ignore[misc]
            dry_run=dry_run,
        )
    except ValidationError as exc:
        raise click.UsageError(refusal(exc, whole="range", most=1)[0]) from None


async def _start(store: Store, spec: ReplayIn, wait: bool, as_json: bool) -> dict[str, Any]:
    if spec.endpoint_id is not None and not await store.endpoint_known(spec.endpoint_id):
        raise click.ClickException(f"endpoint {spec.endpoint_id} does not exist")
    replays = Replays(store)
    if spec.dry_run:
        return {"dry_run": True, "matched": await replays.count(spec)}
    job = await replays.start(spec)
    if not wait:
        return job
    click.echo(f"replay {job['id']} started; the workers run it (Ctrl-C stops watching)", err=True)
    shown = ""
    while job["state"] not in FINAL:
        await asyncio.sleep(0.5)
        job = await replays.get(job["id"]) or job
        line = (
            f"{job['state']}: matched {job['matched']}, replayed {job['replayed']}, "
            f"skipped {job['skipped']}, waiting {job['waiting']}, "
            f"outstanding {job['outstanding']}"
        )
        if line != shown and not as_json:
            click.echo(line, err=True)
            shown = line
    return job


def run_job(spec: ReplayIn, *, wait: bool, as_json: bool) -> None:
    try:
        result = with_store(lambda s: _start(s, spec, wait, as_json))
    except KeyboardInterrupt:
        click.echo("stopped watching; the job goes on (relay replay --cancel ID)", err=True)
        return
    emit(result, as_json, _table)
    if result.get("state") == "failed":
        sys.exit(1)


def cancel_job(replay_id: str, as_json: bool) -> None:
    async def go(store: Store) -> dict[str, Any]:
        try:
            return await Replays(store).cancel(replay_id)
        except ReplayNotRunning as exc:
            raise click.ClickException(f"replay {replay_id}: {exc}") from None

    emit(with_store(go), as_json, _table)


def _table(job: dict[str, Any]) -> None:
    if job.get("dry_run"):
        click.echo(f"{job['matched']} deliveries would be replayed (dry run: nothing changed)")
        return
    keys = ["id", "state", "since", "until", "endpoint_id", "type", "status"]
    keys += ["matched", "replayed", "skipped", "waiting", "outstanding", "finished_at"]
    print_rows([[k, job.get(k)] for k in keys if job.get(k) not in (None, "")], ["field", "value"])
