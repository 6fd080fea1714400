"""``make bench`` step ``ordered``: ordered delivery (issue 14) against unordered, same run.

One worker drains N deliveries of one endpoint published beforehand (the ``drain1``
shape), four times on a fresh Redis each: the endpoint unordered (``ordering: none``),
then ``ordering: key`` with the events spread over 1,000, 10 and 1 ordering keys
(round-robin, so every lane holds N / keys). Each ordered rate is also given as a
ratio of the unordered one of the same run. One key is one lane: its deliveries go one
at a time by contract (claim, send, record, next), so that run drains ``N1`` (at most
2,000) deliveries rather than N.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

from bench import load
from bench.common import HOST, Receiver, RedisMeter, drain_rate, drain_with_cpu
from bench.payloads import EVENT_TYPE, SECRET, payload
from bench.scenarios import SHARD, TOKEN, Cfg, _pids, _timeout, relay

KEYS = (1000, 10, 1)
ONE_LANE_MAX = 2000


async def _endpoint(port: int, ordering: str, url: str) -> str:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    spec = {"url": url, "secret": SECRET, "ordering": ordering}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.post(f"http://{HOST}:{port}/v1/endpoints", json=spec) as resp:
            if resp.status != 201:
                raise RuntimeError(f"endpoint create: {resp.status} {await resp.text()}")
            return str((await resp.json())["id"])


async def drain(receiver: Receiver, cfg: Cfg, keys: int | None) -> dict[str, Any]:
    """Publish ``n`` events (keys None: unordered), then one worker drains them."""
    n = cfg.n if keys != 1 else min(cfg.n, ONE_LANE_MAX)
    name = "ordered-none" if keys is None else f"ordered-{keys}"
    async with relay(receiver, name, cfg, endpoints=0) as r:
        await _endpoint(r.api_port, "none" if keys is None else "key", receiver.url)
        counter = iter(range(10**9))

        def body() -> bytes:
            doc: dict[str, Any] = {"type": EVENT_TYPE, "payload": payload()}
            if keys is not None:
                doc["ordering_key"] = f"k{next(counter) % keys}"
            return orjson.dumps(doc)

        pub = await load.publish(r.api_port, TOKEN, n, cfg.clients, body)
        await receiver.reset()
        r.start_workers(1)
        st, cpu = await drain_with_cpu(receiver, n, _timeout(n), _pids(r, receiver), r.watch())
        await asyncio.sleep(0.5)  # the last group commit lands
        meter = RedisMeter(r.redis.url)
        try:
            succeeded = meter.client.zcard(SHARD.succeeded)
            queued = meter.client.zcard(SHARD.queued)
        finally:
            meter.close()
    if succeeded != n or queued:
        raise RuntimeError(f"ordered drain: {succeeded} succeeded of {n}, {queued} queued")
    return {**drain_rate(st), "keys": keys, "cpu_ms": cpu, "publish_per_s": pub["per_s"]}


async def run(receiver: Receiver, cfg: Cfg) -> dict[str, Any]:
    unordered = await drain(receiver, cfg, None)
    out: dict[str, Any] = {"unordered": unordered, "per_s": unordered["per_s"]}
    for keys in KEYS:
        got = await drain(receiver, cfg, keys)
        got["vs_unordered"] = round(got["per_s"] / unordered["per_s"], 3)
        out[f"keys_{keys}"] = got
    return out


def lines(res: dict[str, Any]) -> list[str]:
    """The report's lines for this step (empty when it did not run)."""
    r = res.get("ordered")
    if not r:
        return []
    out = [
        "ordered delivery, 1 worker, drain of one endpoint (issue 14):",
        f"  unordered                {r['unordered']['per_s']:>9,.0f}/s   1.00x",
    ]
    for keys in KEYS:
        k = r[f"keys_{keys}"]
        label = f"ordering: key, {keys:,} key{'s' if keys > 1 else ''}"
        out.append(
            f"  {label:24s} {k['per_s']:>9,.0f}/s   {k['vs_unordered']:.2f}x (n={k['count']:,})"
        )
    return out
