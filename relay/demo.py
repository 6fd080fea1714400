"""A demo receiver for trying relay on a laptop: prints each webhook, checks its signature."""

from __future__ import annotations

import time

import click
from aiohttp import web

from relay.domain import ed25519, signing


def run_receiver(
    *,
    port: int,
    status: int,
    secret: str | None,
    host: str = "127.0.0.1",
    public_key: str | None = None,
) -> None:
    """Serve until Ctrl-C; OSError when ``host:port`` cannot be listened on."""
    key = signing.secret_bytes(secret) if secret else None

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        h = request.headers
        verdict = "not checked (pass --secret or --public-key)"
        if public_key is not None:
            ok = ed25519.verify(
                public_key,
                h.get("webhook-id", ""),
                h.get("webhook-timestamp", ""),
                body,
                h.get("webhook-signature", ""),
            )
            verdict = "valid (v1a)" if ok else "INVALID"
        elif key is not None:
            expected = signing.sign(
                [key], h.get("webhook-id", ""), int(h.get("webhook-timestamp", "0")), body
            ).split(",", 1)[1]
            offered = [s.split(",", 1)[-1] for s in h.get("webhook-signature", "").split()]
            verdict = "valid" if expected in offered else "INVALID"
        click.echo(
            f"{time.strftime('%H:%M:%S')} {request.method} {request.path} -> {status}  "
            f"webhook-id={h.get('webhook-id')} attempt={h.get('x-relay-attempt')} "
            f"signature {verdict}\n  {body.decode('utf-8', 'replace')[:500]}"
        )
        return web.Response(status=status, text="ok" if status < 300 else "failing on purpose")

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handle)
    banner = f"demo receiver on http://{host}:{port}/ answering {status}"
    # run_app calls ``print`` once its socket is bound: no banner for a port it cannot take
    web.run_app(app, host=host, port=port, print=lambda _: click.echo(banner), access_log=None)
