"""Endpoint lifecycle: every change of an endpoint's state, in one place.

* create, update (PATCH), rotate the secret: written through ``Store.put_endpoint`` /
  ``Store.update_endpoint`` (a compare-and-set, retried when another writer got in);
* re-enable (``enabled`` false -> true): the failure streak is forgotten and the held
  deliveries go back to due;
* disable (the workers' auto-disable): a compare-and-set that leaves an endpoint an
  operator (or another worker) already disabled alone; :func:`should_disable` is the
  policy;
* hold: a disabled endpoint's claimed deliveries are parked, then the endpoint is read
  again, and if it was re-enabled (or deleted) meanwhile they are resumed at once;
* delete: the endpoint goes, its held deliveries come back (and, their endpoint gone,
  are recorded dead), and its breaker, rate and in-flight state is dropped, a tombstone
  left so that sends still in flight settle nothing back.

Writers always write the endpoint before they resume, so the re-check in :meth:`hold`
closes the race with a re-enable that lands between a worker's read and its hold.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from relay.domain.schema import check_headers_sent, endpoint_record, new_secret
from relay.endpoints.catalog import Catalog
from relay.endpoints.health import Health, Settled
from relay.queue.keys import ShardKeys
from relay.queue.store import Store

log = structlog.get_logger("relay.worker")

ROTATION_GRACE_MS = 24 * 3600 * 1000  # an old secret keeps signing this long
# Bounded rotation (docs/design/decisions.md): at most this many old secrets sign beside the
# current one (each adds a signature to every request), and one rotation per interval.
MAX_PREVIOUS_SECRETS = 2
ROTATION_INTERVAL_MS = 60 * 1000


class RotationTooSoon(Exception):
    """The endpoint's secret was rotated less than ``ROTATION_INTERVAL_MS`` ago."""

    def __init__(self, retry_after_ms: int) -> None:
        super().__init__(f"secret rotated less than {ROTATION_INTERVAL_MS // 1000} s ago")
        self.retry_after_ms = retry_after_ms


def should_disable(settled: Settled, disable_after: float, now_ms: float) -> bool:
    """Auto-disable policy: failing, without one success, for ``disable_after`` seconds."""
    return bool(settled.failing_since) and now_ms - settled.failing_since >= disable_after * 1000


class Lifecycle:
    def __init__(self, store: Store, health: Health | None = None) -> None:
        self.store = store
        self.health = health if health is not None else Health(store)

    async def create(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """A new endpoint from validated fields (its id and, when absent, its secret made).
        Strict mode: raises ``UnknownEventTypes`` for subscriptions outside the catalog."""
        endpoint = endpoint_record(**fields)
        await Catalog(self.store).check_subscriptions(endpoint["event_types"])
        await self.store.put_endpoint(endpoint)
        return endpoint

    async def update(self, endpoint_id: str, changes: Mapping[str, Any]) -> dict[str, Any] | None:
        """Apply validated changes; re-enabling resumes held deliveries. None: no such one.
        Strict mode: raises ``UnknownEventTypes`` for subscriptions outside the catalog.
        Raises ``HeadersOnBroker`` (nothing written) when changes of its url or headers
        make an endpoint that names a broker and has custom headers (other changes leave
        headers stored before that check alone)."""
        if changes.get("event_types") is not None:
            await Catalog(self.store).check_subscriptions(changes["event_types"])

        def apply(endpoint: dict[str, Any]) -> dict[str, Any]:
            if "url" in changes or "headers" in changes:
                check_headers_sent({**endpoint, **changes})
            endpoint.update(changes, updated_at=int(time.time() * 1000))
            if endpoint["enabled"]:
                endpoint.pop("disabled_reason", None)
            return endpoint

        done = await self.store.update_endpoint(endpoint_id, apply)
        if done is None:
            return None
        before, endpoint = done
        if endpoint["enabled"] and not before.get("enabled", True):
            await self.reenabled(endpoint["id"])
        return endpoint

    async def reenabled(self, endpoint_id: str) -> None:
        """After ``enabled`` went false -> true: a fresh failure streak, held ones resume."""
        await self.health.reset_failing(endpoint_id)
        await self.health.resume(endpoint_id, confirm=True)

    async def rotate_secret(self, endpoint_id: str) -> dict[str, Any] | None:
        """A new secret; the old one keeps signing for ``ROTATION_GRACE_MS`` (the
        ``MAX_PREVIOUS_SECRETS`` newest old ones do). Raises :class:`RotationTooSoon`
        within ``ROTATION_INTERVAL_MS`` of the last rotation."""

        def rotated(endpoint: dict[str, Any]) -> dict[str, Any]:
            now = int(time.time() * 1000)
            previous = [p for p in endpoint.get("previous_secrets", []) if p["expires_at"] > now]
            if previous:  # the newest old secret was rotated out at expires_at - grace
                last = max(p["expires_at"] for p in previous) - ROTATION_GRACE_MS
                if now - last < ROTATION_INTERVAL_MS:
                    raise RotationTooSoon(last + ROTATION_INTERVAL_MS - now)
            previous.append({"secret": endpoint["secret"], "expires_at": now + ROTATION_GRACE_MS})
            previous = sorted(previous, key=lambda p: p["expires_at"])[-MAX_PREVIOUS_SECRETS:]
            fresh = new_secret(endpoint.get("signing", "hmac"))  # same scheme
            endpoint.update(secret=fresh, previous_secrets=previous, updated_at=now)
            return endpoint

        done = await self.store.update_endpoint(endpoint_id, rotated)
        return None if done is None else done[1]

    async def delete(self, endpoint: dict[str, Any]) -> None:
        await self.store.delete_endpoint(endpoint)
        # Held deliveries come back and, their endpoint gone, are recorded dead.
        await self.health.resume(endpoint["id"], confirm=True)
        await self.store.delete_endpoint_state(endpoint["id"])

    async def disable(self, endpoint_id: str, failing_since: int) -> bool:
        """Auto-disable; False when it was already disabled (or is gone)."""

        def disabled(endpoint: dict[str, Any]) -> dict[str, Any] | None:
            if not endpoint.get("enabled", True):
                return None  # already disabled (by an operator or another worker)
            endpoint.update(
                enabled=False,
                disabled_reason=f"auto-disabled: no success since {failing_since} (ms)",
                updated_at=int(time.time() * 1000),
            )
            return endpoint

        # a worker's write: it waits for no replica (RELAY_ACK_REPLICAS is for clients)
        done = await self.store.update_endpoint(endpoint_id, disabled, confirm=False)
        if done is None or done[0] is done[1]:
            return False
        log.warning("endpoint.disabled", endpoint_id=endpoint_id, failing_since=failing_since)
        return True

    async def hold(self, sk: ShardKeys, endpoint_id: str, claims: Sequence[tuple[str, str]]) -> int:
        """Park claimed deliveries ``(id, token)`` of a disabled endpoint; how many were."""
        n = await self.health.hold(sk, endpoint_id, claims)
        # Re-enabled (or deleted) since the caller read it? Its resume may have run before
        # this hold: resume again, or these stay parked (writers write before they resume).
        current = await self.store.get_endpoint(endpoint_id)
        if n and (current is None or current.get("enabled", True)):
            await self.health.resume(endpoint_id)
        return n
