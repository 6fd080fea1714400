"""Request bodies as they arrive: their ``Content-Encoding`` decoded by relay.

aiohttp's server runs with ``auto_decompress=False`` (relay.api.server): its parser then
hands over the body's bytes as sent, and a body that does not decode is a JSON 400 here,
on a connection still in step, not a parser error that drops it. Accepted: ``identity``,
``gzip`` (``x-gzip``; several members in a row are one body) and ``deflate`` (zlib's
format, or raw deflate as some clients send it). What a body inflates to is bounded
while it inflates.
"""

from __future__ import annotations

import zlib

ACCEPTED = "gzip, deflate"  # for Accept-Encoding on the answer that refuses one
GZIP_MEMBERS = 1024  # most gzip members one body may hold
_GZIP = {"gzip", "x-gzip"}


class BodyError(ValueError):
    """A body that does not decode; ``str()`` says why."""


class BodyTooLarge(ValueError):
    """A body that inflates past the limit."""


def codings(header: str) -> list[str]:
    """The content codings ``header`` names, in the order they were applied, without
    ``identity``."""
    named = [c.strip().lower() for c in header.split(",")]
    return [c for c in named if c and c != "identity"]


def decode(header: str, raw: bytes, limit: int) -> bytes:
    """``raw`` decoded as the ``Content-Encoding`` header says, at most ``limit`` bytes
    (BodyTooLarge past it); BodyError when it does not decode."""
    applied = codings(header)
    if not applied or not raw:
        return raw
    if len(applied) > 1:
        raise BodyError(
            f"Content-Encoding {header.strip()} is not supported; send one Content-Encoding:"
            " identity, gzip or deflate"
        )
    coding = applied[0]
    if coding in _GZIP:
        return _gzip(raw, limit)
    if coding == "deflate":
        return _deflate(raw, limit)
    raise BodyError(f"Content-Encoding {coding} is not supported; send identity, gzip or deflate")


def _inflate(inflater: zlib._Decompress, data: bytes, limit: int, name: str) -> bytes:
    """One stream inflated, at most ``limit`` bytes; its trailing bytes stay in
    ``inflater.unused_data``."""
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise BodyError(f"request body is not valid {name} ({exc})") from None
    if len(out) > limit:
        raise BodyTooLarge(name)
    if not inflater.eof:
        raise BodyError(f"request body is not valid {name}: the {name} stream is cut short")
    return out


def _gzip(raw: bytes, limit: int) -> bytes:
    parts: list[bytes] = []
    rest = raw
    for _ in range(GZIP_MEMBERS):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        parts.append(_inflate(inflater, rest, limit, "gzip"))
        limit -= len(parts[-1])
        rest = inflater.unused_data
        if not rest:
            return b"".join(parts)
    raise BodyError(f"request body is not valid gzip: more than {GZIP_MEMBERS} gzip members")


def _deflate(raw: bytes, limit: int) -> bytes:
    # zlib's format starts with a byte whose low four bits are 8 (the method); anything
    # else is taken as raw deflate, as aiohttp's client and server take it
    wbits = zlib.MAX_WBITS if raw and raw[0] & 0x0F == 8 else -zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    out = _inflate(inflater, raw, limit, "deflate")
    if inflater.unused_data:
        raise BodyError(
            f"request body is not valid deflate: {len(inflater.unused_data)} bytes after the "
            "end of the deflate stream"
        )
    return out
