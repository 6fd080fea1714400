"""Idempotent requests of the ``/api/v1`` API: one record per caller and ``idempotency-key``.

The Svix SDKs send an ``idempotency-key`` with every POST (``auto_<uuid>`` unless the
caller gives one) and send the same key again when they retry. The record
(``Keys.request``) is a JSON string: ``h``, the hash of the request (method, path, query,
body), and, once answered, ``status`` and ``body``. :meth:`RequestRecords.claim_request`
takes a key with ``SET NX`` (a record without an answer, for ``PENDING_MS``); the answer
replaces it for ``RELAY_IDEMPOTENCY_TTL``; a refused request drops it, so a retry runs
again.
"""

from __future__ import annotations

from typing import Any

import orjson

from relay.queue.base import StoreBase

PENDING_MS = 60_000  # a request still running holds its key at most this long


class RequestRecords(StoreBase):
    async def claim_request(self, caller: str, key: str, digest: str) -> dict[str, Any] | None:
        """None when the key is now this request's; else the record that holds it."""
        name = self.keys.request(caller, key)
        fresh = orjson.dumps({"h": digest})
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(name, fresh, nx=True, px=PENDING_MS)
            pipe.get(name)
            taken, raw = await pipe.execute()
        if taken or raw is None:
            return None
        found: dict[str, Any] = orjson.loads(raw)
        return found

    async def answer_request(
        self, caller: str, key: str, digest: str, status: int, body: bytes
    ) -> None:
        """Keep the answer to the request that holds ``key``, for the idempotency TTL."""
        record = {"h": digest, "status": status, "body": body.decode()}
        await self.redis.set(
            self.keys.request(caller, key),
            orjson.dumps(record),
            px=int(self.settings.idempotency_ttl * 1000),
        )

    async def drop_request(self, caller: str, key: str) -> None:
        """Free ``key`` after a refused request: its retry runs again."""
        await self.redis.delete(self.keys.request(caller, key))
