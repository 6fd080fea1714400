"""Sealed list cursors (relay.domain.cursors): opaque, tamper-evident, bound to a scope."""

from __future__ import annotations

import base64

import pytest

from relay.domain import cursors
from relay.queue.store import encode_cursor

KEY = cursors.new_key()
POSITION = encode_cursor(1765432100123.0, "dlv_01M8ZRQ5HG00QZE1AYVES75S00")


def test_a_sealed_cursor_opens_for_its_scope_only() -> None:
    for scope in ("A", None):
        sealed = cursors.seal(KEY, scope, POSITION)
        assert cursors.unseal(KEY, scope, sealed) == POSITION
    sealed = cursors.seal(KEY, "A", POSITION)
    for scope in ("B", None, "A "):
        with pytest.raises(cursors.InvalidCursor):
            cursors.unseal(KEY, scope, sealed)
    with pytest.raises(cursors.InvalidCursor):
        cursors.unseal(cursors.new_key(), "A", sealed)


def test_a_sealed_cursor_reads_as_noise() -> None:
    sealed = cursors.seal(KEY, "A", POSITION)
    raw = base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4))
    for part in (b"dlv_", b"1765432100", b"M8ZRQ5HG", POSITION.encode()[:8]):
        assert part not in raw
    # one position, one cursor (a page polled again looks unchanged); per scope and key
    assert cursors.seal(KEY, "A", POSITION) == sealed
    assert cursors.seal(KEY, "B", POSITION) != sealed
    assert cursors.seal(cursors.new_key(), "A", POSITION) != sealed
    next_one = encode_cursor(1765432100123.0, "dlv_01M8ZRQ5HG00QZE1AYVES75S01")
    other = cursors.seal(KEY, "A", next_one)
    assert other[:20] != sealed[:20]  # the nonce differs too
    assert len(sealed) <= 512  # the query's bound on a cursor


@pytest.mark.parametrize("bad", ["", "x", "WzEuMCwiZGx2X3giXQ", "é" * 10, "A" * 200])
def test_anything_else_is_invalid(bad: str) -> None:
    with pytest.raises(cursors.InvalidCursor):
        cursors.unseal(KEY, "A", bad)


def test_every_changed_byte_is_refused() -> None:
    raw = bytearray(base64.urlsafe_b64decode(cursors.seal(KEY, "A", POSITION) + "=="))
    for i in range(len(raw)):
        changed = bytearray(raw)
        changed[i] ^= 0x01
        text = base64.urlsafe_b64encode(bytes(changed)).decode().rstrip("=")
        with pytest.raises(cursors.InvalidCursor):
            cursors.unseal(KEY, "A", text)
