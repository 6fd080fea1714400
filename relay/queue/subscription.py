"""One pub/sub subscription kept alive: subscribe, listen, reconnect with a back-off.

Used by the worker (the shards' wake channels) and by the API's endpoint cache (the
endpoint change channel). Each reconnect asks :meth:`Store.wake_pubsub` for a connection
with the attempt number, so on a cluster it takes the next node and a failed one is not
retried first. ``on_lost`` runs whenever the connection is gone (an error, the end of
the stream or cancellation), before any back-off: a subscriber must assume it missed
messages from then on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from relay.queue.store import Store

RECONNECT_AFTER = 0.5  # seconds between a failed connection and the next one
CLOSE_WITHIN = 5.0  # seconds a pub/sub connection gets to close; then it is dropped
# An idle subscriber looks up at least this often (seconds) for a cancellation that
# redis-py swallowed (below).
LOOK_UP_EVERY = 1.0

log = structlog.get_logger("relay.pubsub")


async def keep_subscribed(
    store: Store,
    channels: Sequence[str],
    on_message: Callable[[dict[str, Any]], None],
    *,
    on_subscribed: Callable[[], None] | None = None,
    on_lost: Callable[[], None] | None = None,
    name: str = "pubsub",
) -> None:
    """Run until cancelled. ``on_message`` gets each published message, ``on_subscribed``
    each subscribe confirmation (one per channel); a failure is logged as
    ``<name>.reconnect``."""
    attempt = 0
    while True:
        pubsub = store.wake_pubsub(attempt)
        attempt += 1
        failed = False
        try:
            await pubsub.subscribe(*channels)
            while True:
                # redis-py 8.1 can swallow a cancellation that lands while it subscribes
                # (about 1 cancel in 5 in the first milliseconds, tests/redis/test_subscription.py):
                # the task then listened on, and a worker stopped then never exited.
                # The request is still on the task (``cancelling()``), so honour it here.
                if _cancel_requested():
                    raise asyncio.CancelledError
                if not pubsub.subscribed:  # the end of the stream: subscribe again
                    break
                msg = await pubsub.get_message(timeout=LOOK_UP_EVERY)
                if msg is None:
                    continue
                kind = msg.get("type")
                if kind == "message":
                    on_message(msg)
                elif kind == "subscribe" and on_subscribed is not None:
                    on_subscribed()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(f"{name}.reconnect", error=str(exc))
            failed = True
        finally:
            # Bounded: closing a connection to a server that vanished mid-failover must
            # not hold a cancelled subscriber (and the shutdown waiting for it) forever.
            try:
                await asyncio.wait_for(pubsub.aclose(), CLOSE_WITHIN)
            except Exception as exc:  # a connection being dropped anyway
                log.warning(f"{name}.close_failed", error=str(exc) or type(exc).__name__)
            if on_lost is not None:
                on_lost()
        if failed:
            await asyncio.sleep(RECONNECT_AFTER)


def _cancel_requested() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
