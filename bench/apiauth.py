"""What an app-scoped API key costs per request, against the operator's token (issue 13).

A private ``redis-server`` and the API in this process (one aiohttp app on 127.0.0.1).
The operator's token is checked in the process (no Redis); an API key costs one script
call (``authenticate.lua``: credential look-up and rate limit), and a route on one
endpoint, event or delivery one ``HGET`` more (the owner check). Measures
``GET /v1/endpoints/{id}`` and ``GET /v1/endpoints`` with each, ``--requests`` times at
``--concurrency`` in flight, and writes ``bench/results/apiauth.json``. Part of
``make bench``, not of ``make test``.

    python bench/apiauth.py [--requests 3000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from relay.api import create_app
from relay.domain.schema import endpoint_record
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer, free_port
from relay.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "apiauth.json"


async def measure(url: str, token: str, requests: int, concurrency: int) -> dict[str, float]:
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
        for _ in range(100):  # warm up
            async with s.get(url) as resp:
                assert resp.status == 200, resp.status
        left = requests

        async def one() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with s.get(url) as resp:
                    await resp.read()
                    assert resp.status == 200

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return {
        "requests_per_s": round(requests / wall),
        "ms_per_request": round(wall / requests * 1000 * concurrency, 3),
    }


async def main(requests: int, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(data_dir=Path(tmp), appendonly=False)
        server.start()
        settings = Settings(
            redis_url=server.url, key_prefix="ba", api_tokens=("admin-token",), api_rate=0.0
        )
        store = Store(connect(settings), settings)
        runner = web.AppRunner(create_app(settings, store), access_log=None)
        try:
            await runner.setup()
            port = free_port()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            base = f"http://127.0.0.1:{port}"
            for n in range(10):
                await store.put_endpoint(endpoint_record(url=f"http://127.0.0.1:9/{n}", app="A"))
            ep = (await store.list_endpoints("A"))[0]["id"]
            async with (
                aiohttp.ClientSession(headers={"Authorization": "Bearer admin-token"}) as admin,
                admin.post(base + "/v1/api-keys", json={"app": "A", "scopes": ["read"]}) as resp,
            ):
                key = (await resp.json())["token"]
            out: dict[str, Any] = {"requests": requests, "concurrency": concurrency}
            for name, path in (("read_one", f"/v1/endpoints/{ep}"), ("list", "/v1/endpoints")):
                for who, token in (("admin", "admin-token"), ("key", key)):
                    out[f"{name}_{who}"] = await measure(base + path, token, requests, concurrency)
            return out
        finally:
            await runner.cleanup()
            await store.close()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    result = asyncio.run(main(args.requests, args.concurrency))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for k, v in result.items():
        print(f"{k:20} {v}")
