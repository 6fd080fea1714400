"""A relay (``relay api`` and ``relay worker`` processes) for the Svix SDK tests, and the
``/v1`` calls those tests make beside the SDKs (an app's API key)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from tests.helpers.hostile import healthy, relay_env, start_relay, tail

ADMIN = "svix-admin-token"
# two quick attempts: a delivery to a failing receiver is dead within a second
FAST_RETRIES = {"RELAY_RETRY_SCHEDULE": "200ms", "RELAY_RETRY_JITTER": "0"}


@contextlib.asynccontextmanager
async def running_relay(redis_url: str, tmp_path: Path) -> AsyncIterator[str]:
    """A relay API and one worker on one Redis namespace; yields the API's base URL."""
    env = relay_env(redis_url, ADMIN, prefix="svix", **FAST_RETRIES)
    api = await start_relay("api", env, tmp_path / "api.log")
    worker = await start_relay("worker", env, tmp_path / "worker.log")
    try:
        url = await healthy(api, env, tmp_path / "api.log")
        yield url
        assert worker.returncode is None, tail(tmp_path / "worker.log")
    finally:
        for proc in (api, worker):
            if proc.returncode is None:
                proc.terminate()
        for proc in (api, worker):
            await asyncio.wait_for(proc.wait(), 30)


async def app_key(url: str, app: str, scopes: list[str]) -> str:
    """A new API key (``rk_...``) of ``app`` with ``scopes``, made by the operator."""
    async with aiohttp.ClientSession() as s:
        async with s.post(
            url + "/v1/api-keys",
            json={"app": app, "scopes": scopes, "name": "svix-sdk"},
            headers={"Authorization": f"Bearer {ADMIN}"},
        ) as r:
            made: dict[str, Any] = await r.json()
            assert r.status == 201, made
    return str(made["token"])
