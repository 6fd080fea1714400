"""API keys and portal sessions in Redis, under the hash tag ``{auth}``.

A credential (``Keys.credential(sha256 of the token)``) is a JSON string: ``kind``
(``key`` or ``portal``), ``id``, ``app``, ``scopes``, ``hash`` and, for a portal session,
``expires_at`` (ms). An API key also has a record (``Keys.api_key``, a hash) and an entry
in the index ``Keys.api_keys``, for listing and revocation. A portal session's
credential carries a TTL: ``expires_at`` plus ``PORTAL_LINGER``, the while during which
it answers "expired" rather than "unknown"; one opened with an API key is noted under
that key (``Keys.key_sessions``), and revoking the key deletes it too.

The app a resource belongs to, which the API's access check reads before a scoped
request for one endpoint, event or delivery, is ``Reads.app_of``: a delivery's is read as
any other read of it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from relay.domain import cursors
from relay.queue.base import StoreBase

PORTAL_LINGER_MS = 86_400_000  # an expired portal token says "token_expired" for a day


@dataclass(frozen=True, slots=True)
class Authenticated:
    """``state``: ``unknown``, ``expired`` or ``ok``; ``wait_ms`` > 0: rate limited."""

    state: str
    record: dict[str, Any] | None = None
    wait_ms: int = 0


class AuthRecords(StoreBase):
    _cursor_key: bytes | None = None

    async def cursor_key(self, *, fresh: bool = False) -> bytes:
        """The key sealing list cursors, the same for every API replica: made at random
        by the first that needs it (``SET NX``), then kept in memory. ``fresh``: read it
        again (a cursor that does not open may be sealed with a key made after this
        process read its own: the first lost in a failover)."""
        if self._cursor_key is None or fresh:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.set(self.keys.cursor_key, cursors.new_key().hex(), nx=True)
                pipe.get(self.keys.cursor_key)
                _, value = await pipe.execute()
            self._cursor_key = bytes.fromhex(value)
        return self._cursor_key

    async def authenticate(self, token_hash: str, rate: float, burst: int) -> Authenticated:
        """The credential of ``token_hash``, its request charged to its rate limit."""
        res = await self.scripts.authenticate(
            keys=[self.keys.credential(token_hash), self.keys.api_rate(token_hash)],
            args=[repr(float(rate)), int(burst)],
        )
        state = int(res[0])
        if state == 0:
            return Authenticated("unknown")
        record = orjson.loads(res[1])
        if state == 2:
            return Authenticated("expired", record)
        return Authenticated("ok", record, int(res[2]))

    async def create_api_key(
        self, *, key_id: str, app: str, scopes: list[str], name: str, token_hash: str
    ) -> int:
        """Store a new key; returns its creation time (ms), 0 when the id is taken."""
        credential = orjson.dumps(
            {"kind": "key", "id": key_id, "app": app, "scopes": scopes, "hash": token_hash}
        )
        return int(
            await self.scripts.apikey_create(
                keys=[
                    self.keys.api_key(key_id),
                    self.keys.credential(token_hash),
                    self.keys.api_keys,
                ],
                args=[key_id, app, ",".join(scopes), name, token_hash, credential],
                ack=(self.settings.ack_replicas, self.settings.ack_timeout),
            )
        )

    async def list_api_keys(self, app: str | None = None) -> list[dict[str, Any]]:
        """Every key (of one app), oldest first, without its token hash."""
        ids = await self.redis.zrange(self.keys.api_keys, 0, -1)
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for key_id in ids:
                pipe.hgetall(self.keys.api_key(key_id))
            rows = await pipe.execute()
        out = []
        for row in rows:
            if not row or (app is not None and row.get("app") != app):
                continue
            out.append(_key_view(row))
        return out

    async def get_api_key(self, key_id: str) -> dict[str, Any] | None:
        row = await self.redis.hgetall(self.keys.api_key(key_id))
        return _key_view(row) if row else None

    async def revoke_api_key(self, key_id: str) -> bool:
        """Delete the key and its credential: the next request with its token is 401."""
        token_hash = await self.redis.hget(self.keys.api_key(key_id), "token_hash")
        if not token_hash:
            return False
        sessions = sorted(await self.redis.smembers(self.keys.key_sessions(key_id)))
        keys = [
            self.keys.api_key(key_id),
            self.keys.credential(token_hash),
            self.keys.api_rate(token_hash),
            self.keys.api_keys,
            self.keys.key_sessions(key_id),
            *(self.keys.credential(h) for h in sessions),
        ]
        done = await self.scripts.apikey_revoke(
            keys=keys,
            args=[key_id, token_hash, len(sessions)],
            ack=(self.settings.ack_replicas, self.settings.ack_timeout),
        )
        return bool(int(done))

    async def create_portal_session(
        self,
        *,
        session_id: str,
        app: str,
        scopes: list[str],
        token_hash: str,
        ttl_ms: int,
        opened_by: str | None = None,
        branding: dict[str, str] | None = None,
    ) -> int:
        """Store a portal session's credential, expiring ``ttl_ms`` from now (Redis's
        clock); returns ``expires_at`` (ms). ``opened_by``: the API key that opened it
        (revoking the key ends the session); None for the operator. ``branding``: kept
        beside it (``Keys.portal_branding``) for as long."""
        expires_at = await self.now_ms() + ttl_ms
        credential = {
            "kind": "portal",
            "id": session_id,
            "app": app,
            "scopes": scopes,
            "hash": token_hash,
            "expires_at": expires_at,
        }
        keys = [
            self.keys.credential(token_hash),
            self.keys.key_sessions(opened_by or "-"),
            self.keys.portal_branding(token_hash),
        ]
        args = [
            orjson.dumps(credential),
            ttl_ms + PORTAL_LINGER_MS,
            token_hash,
            int(bool(opened_by)),
            orjson.dumps(branding) if branding else "",
        ]
        ack = (self.settings.ack_replicas, self.settings.ack_timeout)
        if not int(await self.scripts.portal_create(keys=keys, args=args, ack=ack)):
            raise ValueError("portal session token hash taken")  # 256 random bits: never
        return expires_at

    async def portal_session(self, token_hash: str) -> dict[str, Any] | None:
        """A portal session as its page reads it: ``app``, ``scopes``, ``expires_at`` and
        ``branding`` (None when it had none); None for a token that is not a session's."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.credential(token_hash))
            pipe.get(self.keys.portal_branding(token_hash))
            raw, brand = await pipe.execute()
        record = orjson.loads(raw) if raw else None
        if record is None or record.get("kind") != "portal":
            return None
        return {
            "app": record["app"],
            "scopes": record["scopes"],
            "expires_at": record["expires_at"],
            "branding": orjson.loads(brand) if brand else None,
        }


def _key_view(row: dict[str, str]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "app": row["app"],
        "scopes": [s for s in row.get("scopes", "").split(",") if s],
        "name": row.get("name") or None,
        "created_at": int(row["created_at"]),
    }
