"""A recording webhook receiver for the crash-injection suite (``scripts/crash.py``).

Binds 127.0.0.1 only. Every POST is recorded once its body has been read in full (a
sender killed mid-request is not a delivery): the ``webhook-id`` (the event id, the
receiver's dedupe key), ``x-relay-delivery-id``, ``x-relay-attempt`` and the arrival
time. It then waits a random ``--delay-ms`` (so sends are in flight when a worker is
killed) and answers 200.

``GET /stats`` answers ``{"requests", "unique", "duplicates"}`` (duplicates = requests
beyond the first per ``webhook-id``); ``GET /records`` answers every record. With
``--out`` each record is also appended to a JSON-lines file as it arrives.

    python scripts/receiver.py --port 9100 --out received.jsonl --delay-ms 0,30
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path
from typing import IO, Any

import orjson
from aiohttp import web

HOST = "127.0.0.1"


class Recorder:
    def __init__(self, out: Path | None, delay_ms: tuple[float, float]) -> None:
        self.records: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}
        self.delay_ms = delay_ms
        self._file: IO[bytes] | None = out.open("ab") if out else None

    async def hook(self, request: web.Request) -> web.Response:
        await request.read()
        h = request.headers
        record = {
            "id": h.get("webhook-id", ""),
            "dlv": h.get("x-relay-delivery-id", ""),
            "attempt": int(h.get("x-relay-attempt", "0") or 0),
            "at": time.time(),
        }
        self.records.append(record)
        self.counts[record["id"]] = self.counts.get(record["id"], 0) + 1
        if self._file is not None:
            self._file.write(orjson.dumps(record) + b"\n")
            self._file.flush()
        low, high = self.delay_ms
        if high > 0:
            await asyncio.sleep(random.uniform(low, high) / 1000)
        return web.Response(text="ok")

    async def stats(self, _request: web.Request) -> web.Response:
        requests, unique = len(self.records), len(self.counts)
        body = {"requests": requests, "unique": unique, "duplicates": requests - unique}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def dump(self, _request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.records), content_type="application/json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, help="append each record to this JSONL file")
    parser.add_argument("--delay-ms", default="0,0", help="answer after a random delay LO,HI")
    args = parser.parse_args()
    low, high = (float(x) for x in args.delay_ms.split(","))
    rec = Recorder(args.out, (low, high))
    app = web.Application()
    app.router.add_get("/stats", rec.stats)
    app.router.add_get("/records", rec.dump)
    app.router.add_post("/{tail:.*}", rec.hook)
    web.run_app(app, host=HOST, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
