"""The job every baseline runs: one webhook send, written once for all of them.

It signs the same ~1 KiB body with ``relay.domain.signing`` and POSTs it through one
aiohttp session shared by the worker process (connection limit = the concurrency),
failing the job on a non-2xx answer. Imported inside the baselines' own virtualenvs
(``bench/queues.py``), so it needs nothing but aiohttp, orjson and relay's signing module.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from bench.payloads import SECRET, headers, signed_body
from relay.domain import signing


async def startup(ctx: dict[str, Any], url: str, concurrency: int) -> None:
    """Fill ``ctx`` with the session, the receiver URL, the body and the signing key.
    Awaits nothing, so a lazy first call cannot race another on the same loop."""
    ctx["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
    ctx["url"] = url
    ctx["body"] = signed_body()
    ctx["key"] = [signing.secret_bytes(SECRET)]


async def send(ctx: dict[str, Any], event_id: str, agent: str) -> int:
    body = ctx["body"]
    hdrs = headers(ctx["key"], event_id, body, agent)
    async with ctx["session"].post(ctx["url"], data=body, headers=hdrs) as resp:
        await resp.read()
        if not 200 <= resp.status < 300:
            raise RuntimeError(f"webhook answered {resp.status}")
        return resp.status
