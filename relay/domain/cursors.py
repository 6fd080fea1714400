"""Sealed list cursors. Pure: no I/O.

A listing's position (the queue's own cursor: the created time and id of the last row
it passed, which may be another app's when a page is cut short) never leaves relay in
the clear. What a client gets is that position encrypted and authenticated with
AES-GCM-SIV under a key every API replica shares (:meth:`relay.queue.store.Store.cursor_key`),
with the caller's scope as associated data: it reads as random bytes, and a cursor
changed by one bit, or made for another scope (another app, or the operator), does not
open. The nonce derives from the key and what is sealed (AES-GCM-SIV is made for
that): one position gives one cursor, so a page polled again is seen as unchanged.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import os

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV

KEY_BYTES = 32
NONCE_BYTES = 12
VERSION = b"\x01"  # the first byte of every sealed cursor


class InvalidCursor(ValueError):
    """Not a cursor relay sealed for this scope with this key."""


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def _bound(scope: str | None) -> bytes:
    """The associated data: what a cursor is for (a listing of one app, or the operator's)."""
    return VERSION + orjson.dumps(["deliveries", scope])


@functools.lru_cache(maxsize=4)
def _parts(key: bytes) -> tuple[AESGCMSIV, bytes]:
    """The cipher and the nonce key, each derived from ``key`` under its own label."""
    cipher = hmac.digest(key, b"relay cursor cipher", "sha256")
    return AESGCMSIV(cipher), hmac.digest(key, b"relay cursor nonce", "sha256")


def seal(key: bytes, scope: str | None, position: str) -> str:
    """``position`` (the queue's cursor) for a caller of ``scope`` (an app; None: the
    operator), as URL-safe base64 without padding."""
    cipher, nonce_key = _parts(key)
    plain, bound = position.encode(), _bound(scope)
    nonce = hmac.digest(nonce_key, bound + b"\x00" + plain, "sha256")[:NONCE_BYTES]
    sealed = cipher.encrypt(nonce, plain, bound)
    return base64.urlsafe_b64encode(VERSION + nonce + sealed).decode().rstrip("=")


def unseal(key: bytes, scope: str | None, cursor: str) -> str:
    """The position :func:`seal` sealed; raises :class:`InvalidCursor` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise InvalidCursor("cursor is not valid") from None
    if len(raw) <= 1 + NONCE_BYTES or raw[:1] != VERSION:
        raise InvalidCursor("cursor is not valid")
    nonce, sealed = raw[1 : 1 + NONCE_BYTES], raw[1 + NONCE_BYTES :]
    try:
        return _parts(key)[0].decrypt(nonce, sealed, _bound(scope)).decode()
    except (InvalidTag, UnicodeDecodeError):
        raise InvalidCursor("cursor is not valid for this caller") from None
