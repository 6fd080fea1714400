"""The Postgres outbox connector: rows a backend committed become relay events, once each.

A backend publishes with ``INSERT INTO relay_outbox (type, payload) VALUES (...)`` in its
own transaction. Each connector replica loops:

1. ``BEGIN``; take up to ``RELAY_OUTBOX_BATCH`` of the oldest rows with
   ``FOR UPDATE SKIP LOCKED`` (rows another replica holds are passed over, not waited on;
   rows of uncommitted or rolled-back transactions are invisible). A row with an
   ``ordering_key`` is taken only while no earlier row of its key and app is left in the
   table (:func:`relay.connectors.outbox_schema.claim`), so a key's rows become events
   in id order whichever replica takes them, one per batch, while rows of other keys go
   in parallel;
2. publish each through :class:`relay.publishing.Publisher` with the Idempotency-Key
   ``outbox:<table>:<id>`` (or the row's own ``idempotency_key``): the key is checked
   and set inside relay's publish script, so a row published again (the connector died
   after Redis acknowledged but before step 3) is answered with the first event and
   creates nothing;
3. ``DELETE`` the rows whose event Redis acknowledged, move the rows relay refused
   (``PublishError``, ``ValidationError``) to ``<table>_dead`` with the error, ``COMMIT``.
   A row whose publish was not acknowledged (Redis down) is left as it was.

The transaction lasts one batch of Redis round trips (milliseconds), and at most
:data:`BATCH_SECONDS`: a publish still running then (an app's filters queued in the
sandbox behind its earlier rows, each within the sandbox's budgets) is cancelled and
its row left for the next batch, so the transaction never idles into Postgres's
``idle_in_transaction_session_timeout`` (60 s). A crash anywhere rolls it back
(Postgres drops the connection's locks) and the rows are taken again.
The connector sleeps on ``LISTEN`` (the table's trigger notifies on commit) and sweeps
every ``RELAY_OUTBOX_POLL_INTERVAL`` anyway, for a notification lost while reconnecting.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import structlog
from psycopg.rows import dict_row
from pydantic import ValidationError

from relay.connectors import outbox_schema as q
from relay.domain.schema import EventIn, refusal
from relay.ops import metrics
from relay.publishing import IdempotencyKeyReused, Published, Publisher, PublishError
from relay.queue.errors import is_transient
from relay.queue.store import Store
from relay.sandbox import Sandbox, SandboxUnavailable
from relay.settings import Settings

log = structlog.get_logger("relay.outbox")

AfterPublish = Callable[[int], None]  # test hook: called with the row id once Redis acked
GAUGE_EVERY = 1.0  # seconds between backlog reads
IDLE_IN_TRANSACTION = 60.0  # Postgres ends a transaction left idle this long
BATCH_SECONDS = IDLE_IN_TRANSACTION / 3  # the publishes of one batch, at most


@dataclass
class Tally:
    """What this connector did (also exported as ``relay_outbox_*`` counters)."""

    created: int = 0
    duplicates: int = 0
    dead: int = 0
    errors: int = 0
    batches: int = 0


@dataclass(frozen=True, slots=True)
class Outcome:
    row_id: int
    kind: str  # created, duplicate, dead, retry, later (past the batch's time)
    error: str = ""


def _is_transient(exc: BaseException) -> bool:
    """A failure of Redis (or of the sandbox), never of the row: leave the row and try
    again later."""
    # any other redis-py error (a script error, say) is not the row's fault either, nor is
    # an evaluator for filters and schemas that could not start
    return (
        is_transient(exc)
        or type(exc).__module__.split(".")[0] == "redis"
        or isinstance(exc, SandboxUnavailable)
    )


def event_of(row: dict[str, Any]) -> EventIn:
    """The event a row asks for (raises ``ValidationError`` for a row relay refuses)."""
    return EventIn(
        type=row["type"],
        payload=row["payload"],
        app=row["app"] if row["app"] is not None else "default",
        endpoint_ids=row["endpoint_ids"],
        ordering_key=row["ordering_key"],
    )


async def connect(dsn: str, *, autocommit: bool) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(
        dsn, autocommit=autocommit, row_factory=dict_row, application_name="relay-outbox"
    )
    # a connector frozen mid-batch gives its rows back instead of holding them forever
    await conn.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION:g}s'")
    if not autocommit:
        await conn.commit()
    return conn


class OutboxConnector:
    def __init__(
        self, store: Store, settings: Settings, *, after_publish: AfterPublish | None = None
    ) -> None:
        if not settings.outbox_dsn:
            raise ValueError("RELAY_OUTBOX_DSN is not set")
        self.store = store
        self.settings = settings
        self.names = q.names(settings.outbox_table)
        # tenant logic (schemas, filters) runs in child processes, started on first need
        self.sandbox = Sandbox()
        self.publisher = Publisher(store, self._endpoints_for_app, judge=self.sandbox)
        self.after_publish = after_publish
        self.tally = Tally()
        self.batch_seconds = BATCH_SECONDS
        self.left_late = 0  # rows the last batch left for the next one (past its time)
        self.keyed = False  # whether the last batch had a row with an ordering_key
        self._memo: dict[str, asyncio.Future[list[dict[str, Any]]]] = {}
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._gauges_at = 0.0

    async def _endpoints_for_app(self, app: str) -> list[dict[str, Any]]:
        """One endpoint read per app per batch (the rows of a batch share it)."""
        fut = self._memo.get(app)
        if fut is None:
            fut = self._memo[app] = asyncio.ensure_future(self.store.list_endpoints(app))
        return await fut

    async def _publish(self, row: dict[str, Any]) -> Outcome:
        row_id = row["id"]
        try:
            event = event_of(row)
            key = row["idempotency_key"] or self.names.idempotency_key(row_id)
            done = await self._publish_event(event, key)
        except ValidationError as exc:
            return Outcome(row_id, "dead", "invalid row: " + _errors(exc))
        except PublishError as exc:
            return Outcome(row_id, "dead", f"{exc.code}: {exc.message}")
        except Exception as exc:
            if _is_transient(exc):
                return Outcome(row_id, "retry", f"{type(exc).__name__}: {exc}")
            return Outcome(row_id, "dead", f"{type(exc).__name__}: {exc}")
        if self.after_publish is not None:
            self.after_publish(row_id)
        return Outcome(row_id, "created" if done.created else "duplicate")

    async def _publish_event(self, event: EventIn, key: str) -> Published:
        try:
            return await self.publisher.publish(event, idempotency_key=key)
        except IdempotencyKeyReused:
            if event.ordering_key is None:
                raise
            # A row published by a connector that left its ordering_key out, and not yet
            # removed: the key holds that event, which is this row's (nothing is written).
            unordered = event.model_copy(update={"ordering_key": None})
            return await self.publisher.publish(unordered, idempotency_key=key)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await connect(self.settings.outbox_dsn, autocommit=False)
        return self._conn

    async def batch(self) -> tuple[int, bool]:
        """Claim, publish and settle one batch: (rows taken, whether all were settled)."""
        self.left_late, self.keyed = 0, False
        conn = await self._connection()
        try:
            async with conn.transaction():
                cur = await conn.execute(q.claim(self.names), [self.settings.outbox_batch])
                rows = await cur.fetchall()
                if not rows:
                    return 0, True
                self._memo.clear()
                self.keyed = any(r["ordering_key"] is not None for r in rows)
                outcomes = await self._publish_all(rows)
                self._memo.clear()
                await self._settle(conn, outcomes)
        except psycopg.Error:
            await self._drop_connection()
            raise
        self.tally.batches += 1
        return len(rows), all(o.kind != "retry" for o in outcomes)

    async def _publish_all(self, rows: list[dict[str, Any]]) -> list[Outcome]:
        """Publish the rows concurrently, for at most :attr:`batch_seconds`: the rows
        still publishing then are cancelled and left for the next batch (a publish
        cancelled after Redis took it is absorbed there by the row's Idempotency-Key)."""
        tasks = [asyncio.ensure_future(self._publish(r)) for r in rows]
        _, late = await asyncio.wait(tasks, timeout=self.batch_seconds)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        self.left_late = len(late)
        if late:
            log.warning("outbox.batch_past_its_time", rows=len(late), within_s=self.batch_seconds)
        return [
            Outcome(r["id"], "later") if t in late else t.result()
            for r, t in zip(rows, tasks, strict=True)
        ]

    async def _settle(self, conn: psycopg.AsyncConnection[Any], outcomes: list[Outcome]) -> None:
        gone = []
        for o in outcomes:
            if o.kind == "dead":
                await conn.execute(
                    q.bury(self.names), [o.error.replace("\x00", "")[:4000], o.row_id]
                )
                log.warning("outbox.dead_row", row=o.row_id, error=o.error)
                self.tally.dead += 1
                metrics.OUTBOX_DEAD_ROWS.inc()
            elif o.kind in ("retry", "later"):
                continue
            elif o.kind == "created":
                self.tally.created += 1
                metrics.OUTBOX_PUBLISHED.labels("created").inc()
            else:
                self.tally.duplicates += 1
                metrics.OUTBOX_PUBLISHED.labels("duplicate").inc()
            gone.append(o.row_id)
        if gone:
            await conn.execute(q.remove(self.names), [gone])
        retry = [o for o in outcomes if o.kind == "retry"]
        if retry:
            self.tally.errors += 1
            metrics.OUTBOX_ERRORS.labels("redis").inc()
            log.warning("outbox.publish_failed", rows=len(retry), error=retry[0].error)

    async def close(self) -> None:
        """End the sandbox's children and the Postgres connection."""
        await self.sandbox.close()
        await self._drop_connection()

    async def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
        self._conn = None

    async def drain(self, stop: asyncio.Event) -> bool:
        """Batches until the table has no row left for this replica; False: back off."""
        while not stop.is_set():
            taken, settled = await self.batch()
            if not settled:
                return False
            if taken == 0:
                return True
            # a batch with an ordered row: the next row of its key may be takeable now
            if taken < self.settings.outbox_batch and not self.left_late and not self.keyed:
                return True
        return True

    async def refresh_gauges(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._gauges_at < GAUGE_EVERY:
            return
        self._gauges_at = now
        conn = await self._connection()
        async with conn.transaction():
            row = await (await conn.execute(q.backlog(self.names))).fetchone()
        assert row is not None
        waiting, oldest, dead = row["waiting"], row["oldest"], row["dead"]
        metrics.set_outbox(waiting, oldest or 0.0, dead)

    async def _listen(self, wake: asyncio.Event, stop: asyncio.Event) -> None:
        """Set ``wake`` on every NOTIFY; reconnect (and wake once) when the link drops."""
        delay = 0.1
        while not stop.is_set():
            try:
                conn = await connect(self.settings.outbox_dsn, autocommit=True)
                async with conn:
                    await conn.execute(q.listen(self.names))
                    wake.set()  # rows committed while we were not listening
                    delay = 0.1
                    while not stop.is_set():
                        async for _ in conn.notifies(timeout=0.5):
                            wake.set()
            except psycopg.Error as exc:
                self.tally.errors += 1
                metrics.OUTBOX_ERRORS.labels("postgres").inc()
                log.warning("outbox.listen_failed", error=str(exc), retry_in_s=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, 5.0)

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``: drain on every notification and every poll interval."""
        wake = asyncio.Event()
        listener = asyncio.create_task(self._listen(wake, stop), name="relay-outbox-listen")
        delay = 0.1
        log.info("outbox.started", table=self.names.configured)
        try:
            while not stop.is_set():
                wake.clear()
                backoff = None
                try:
                    if await self.drain(stop):
                        delay = 0.1
                    else:  # Redis did not acknowledge: the rows wait, and so do we
                        backoff, delay = delay, min(delay * 2, 2.0)
                    await self.refresh_gauges()
                except psycopg.Error as exc:
                    self.tally.errors += 1
                    metrics.OUTBOX_ERRORS.labels("postgres").inc()
                    log.warning("outbox.postgres_failed", error=str(exc), retry_in_s=delay)
                    backoff, delay = delay, min(delay * 2, 5.0)
                if backoff is not None:  # a notification does not cut a backoff short
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), backoff)
                    continue
                await _first(wake, stop, within=self.settings.outbox_poll_interval)
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
            await self.close()
            log.info("outbox.stopped", **vars(self.tally))


async def _first(*events: asyncio.Event, within: float) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _errors(exc: ValidationError) -> str:
    return refusal(exc, whole="row")[0]
