"""A loopback TCP proxy that adds a fixed delay each way: Redis "over a network" for bench.

    python bench/delay_proxy.py --listen 40001 --to 40000 --delay-ms 1

Every chunk read from one side is written to the other ``delay-ms`` later, in order, so a
request and its answer cost ``2 x delay-ms`` more round-trip time; bandwidth is not
limited. Both ends stay on 127.0.0.1. It runs until killed (``make bench`` starts and
stops it around the step that uses it).
"""

from __future__ import annotations

import argparse
import asyncio
import time

HOST = "127.0.0.1"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay, data))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((0.0, b""))
    try:
        await sender
    except (ConnectionError, OSError):
        pass
    writer.close()


async def serve(listen: int, target: int, delay_ms: float) -> None:
    delay = delay_ms / 1000

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(HOST, target)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w, delay), _pipe(server_r, client_w, delay))

    server = await asyncio.start_server(handle, HOST, listen)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--to", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=1.0, help="added each way (1)")
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.to, args.delay_ms))


if __name__ == "__main__":
    main()
