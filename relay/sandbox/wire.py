"""The frames between a relay process and its evaluator children.

A request (parent to child, on the child's stdin) is one frame: three big-endian u32
lengths, then a JSON header, the schema (JSON, only the first time this child is sent
it) and the payload (the JSON bytes being published, as they are). The header is
``[reset, event_type, app, schema, filters]``: ``schema`` is null or the id the child
knows the schema by; ``filters`` lists an id per filter, or ``[id, text]`` the first
time this child is sent that text. ``reset``: the child forgets every id first (the
parent's count of what the child holds reached its bound).

An answer is a big-endian u32 length and a JSON value. On the child's stdout: the
schema's verdict (when there is a schema), then ``[retire]`` when the request is done
(true: the child asks to be replaced). The filters' verdicts, one per filter as each is
decided, go to the verdict file the parent handed the child (its offset, shared, is
set to 0 by the parent before each request): writing there wakes no one, and what a
child wrote before it was killed at a deadline or died is still there to be read, so
the filter in progress is known and blamed.
"""

from __future__ import annotations

import asyncio
import os
import struct
from typing import Any

import orjson

REQUEST = struct.Struct(">III")
ANSWER = struct.Struct(">I")
MAX_ANSWER = 64 * 1024  # one answer frame (a reason is a few hundred bytes)


class ProtocolError(Exception):
    """The other side sent something that is not a frame."""


def request(
    reset: bool,
    event_type: str,
    app: str,
    schema_id: int | None,
    schema: bytes,
    filters: list[int | tuple[int, str]],
    payload: bytes,
) -> bytes:
    header = orjson.dumps([reset, event_type, app, schema_id, filters])
    return b"".join((REQUEST.pack(len(header), len(schema), len(payload)), header, schema, payload))


def answer(value: Any) -> bytes:
    body = orjson.dumps(value)
    return ANSWER.pack(len(body)) + body


class Answers:
    """The answers on a child's stdout, one :meth:`next` at a time (buffered: one read
    may bring several)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._buf = bytearray()
        self._at = 0

    async def next(self) -> Any:
        """The next answer; :class:`EOFError` when the child is gone."""
        while True:
            buf, at = self._buf, self._at
            if len(buf) - at >= ANSWER.size:
                (size,) = ANSWER.unpack_from(buf, at)
                if size > MAX_ANSWER:
                    raise ProtocolError(f"answer of {size} bytes")
                end = at + ANSWER.size + size
                if len(buf) >= end:
                    value = orjson.loads(memoryview(buf)[at + ANSWER.size : end])
                    if end == len(buf):
                        buf.clear()
                        self._at = 0
                    else:
                        self._at = end
                    return value
            chunk = await self._reader.read(1 << 16)
            if not chunk:
                raise EOFError("the evaluator closed its output")
            if self._at:
                del buf[: self._at]
                self._at = 0
            buf += chunk


def read_exactly(fd: int, size: int) -> bytes | None:
    """``size`` bytes from a blocking ``fd``; None at its end."""
    parts, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_request(fd: int) -> tuple[list[Any], bytes, bytes] | None:
    """The next request's header, schema and payload; None when the parent is gone."""
    lengths = read_exactly(fd, REQUEST.size)
    if lengths is None:
        return None
    header_size, schema_size, payload_size = REQUEST.unpack(lengths)
    body = read_exactly(fd, header_size + schema_size + payload_size)
    if body is None:
        return None
    header = orjson.loads(body[:header_size])
    schema = body[header_size : header_size + schema_size]
    return header, schema, body[header_size + schema_size :]


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def parse(data: bytes) -> list[Any]:
    """The complete answers in ``data`` (a trailing partial one, cut by a kill, is not)."""
    found, at = [], 0
    while len(data) - at >= ANSWER.size:
        (size,) = ANSWER.unpack_from(data, at)
        if size > MAX_ANSWER:
            raise ProtocolError(f"answer of {size} bytes")
        end = at + ANSWER.size + size
        if end > len(data):
            break
        found.append(orjson.loads(data[at + ANSWER.size : end]))
        at = end
    return found
