"""The benchmark's webhook receiver: one aiohttp process, shared by every system measured.

``python bench/receiver.py --port P`` serves on 127.0.0.1 only:

* ``POST /hook``: answer 200 at once (or 500 for a deterministic share of requests when
  a failure rate is set), counting arrivals and noting the first and last arrival time
  (``time.time()``, the same clock the publisher stamps into payloads).
* ``POST /_reset``: zero the counters and set the mode: ``fail_pct`` (0..100, chosen by
  a CRC of ``webhook-id`` + ``x-relay-attempt``, so a retry of a failed request gets a
  fresh draw), ``max_attempts`` (to count finished deliveries on the retry path),
  ``record`` (keep ``[webhook-id, arrival, payload t, attempt, answered]`` per request
  answered 200, for latency), ``delay_ms`` (answer 200 only that long after arrival: a
  realistic receiver) and ``hang_pct`` with ``hang_s`` (that share of requests, 0..100
  and fractions of a percent, drawn like ``fail_pct`` but independently, is held
  ``hang_s`` seconds: longer than the sender's timeout, so the sender gives up first;
  such a request is counted in ``hung``, never in ``ok``).
* ``GET /_stats`` and ``GET /_arrivals``: the counters, and the recorded arrivals.

It does as little per request as it can, so that it is not what limits any system; the
same code answers the raw-client limit, relay, arq and saq alike.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
import zlib
from typing import Any

import orjson
from aiohttp import web


class State:
    def __init__(self) -> None:
        self.reset({})

    def reset(self, opts: dict[str, Any]) -> None:
        self.count = 0
        self.ok = 0
        self.failed = 0
        self.finished = 0  # deliveries answered 200, or failed on their last attempt
        self.first: float | None = None
        self.last: float | None = None
        self.ids: set[str] = set()
        self.fail_pct = int(opts.get("fail_pct", 0))
        self.max_attempts = str(opts.get("max_attempts", ""))
        self.record = bool(opts.get("record", False))
        self.delay = float(opts.get("delay_ms", 0)) / 1000
        self.hang_bp = round(float(opts.get("hang_pct", 0)) * 100)  # basis points
        self.hang_s = float(opts.get("hang_s", 0))
        self.hung = 0
        self.ok_ids: set[str] = set()
        self.arrivals: list[list[Any]] = []

    def stats(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "unique_ids": len(self.ids),
            "ok": self.ok,
            "failed": self.failed,
            "finished": self.finished,
            "hung": self.hung,
            "ok_unique": len(self.ok_ids),
            "first": self.first,
            "last": self.last,
        }


def make_app() -> web.Application:
    st = State()

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        now = time.time()
        st.count += 1
        if st.first is None:
            st.first = now
        st.last = now
        wid = request.headers.get("webhook-id", "")
        st.ids.add(wid)
        attempt = request.headers.get("x-relay-attempt", "")
        if st.fail_pct:
            if zlib.crc32(f"{wid}:{attempt}".encode()) % 100 < st.fail_pct:
                st.failed += 1
                if attempt == st.max_attempts:
                    st.finished += 1
                return web.Response(status=500)
        if st.hang_bp and zlib.crc32(f"hang:{wid}:{attempt}".encode()) % 10000 < st.hang_bp:
            st.hung += 1
            await asyncio.sleep(st.hang_s)  # the sender has timed out and gone by now
            return web.Response(status=200)
        st.ok += 1
        st.finished += 1
        st.ok_ids.add(wid)
        rec: list[Any] | None = None
        if st.record:
            sent = orjson.loads(body).get("data", {}).get("t")
            rec = [wid, now, sent, attempt, now]
            st.arrivals.append(rec)
        if st.delay:
            await asyncio.sleep(st.delay)
            if rec is not None:
                rec[4] = time.time()  # answered: the sender has its 200 from here on
        return web.Response(status=200)

    async def reset(request: web.Request) -> web.Response:
        st.reset(await request.json())
        return web.json_response({"ok": True})

    async def stats(request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(st.stats()), content_type="application/json")

    async def arrivals(request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(st.arrivals), content_type="application/json")

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/_reset", reset)
    app.router.add_get("/_stats", stats)
    app.router.add_get("/_arrivals", arrivals)
    return app


async def serve(port: int) -> None:
    runner = web.AppRunner(make_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
