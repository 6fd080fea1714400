"""relay writes the Redis protocol with hiredis (relay/queue/base.py): byte for byte what
redis-py's own asyncio packer writes, for every kind of argument relay sends, and the
same refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from relay.queue import base


@pytest.fixture(autouse=True)
def hiredis_packing() -> None:
    base.pack_with_hiredis()


ARGS = [
    ("EVALSHA", "abc123", 2, "relay:v3:{s0}:due", "relay:v3:{s0}:processing", 60_000),
    ("SET", "k", b"\x00\xff\x80binary\n", "PX", 10_000),
    ("HSET", "h", "f\u00fc\u00df", "gr\u00fc\u00dfe \U0001f600", "n", -9223372036854775808),
    ("SET", "k", "lone \udcff surrogate, as a decoded compressed body holds"),
    ("ZADD", "z", 1.5, "a", 1e20, "b", 0.1, "c"),
    ("CONFIG GET", "maxmemory-policy"),
    (b"SCRIPT LOAD", "return 1"),
    ("SET", "k", memoryview(b"view"), "v", bytearray(b"array")),
    ("SET", "k", "x" * 10_000),
]


@pytest.mark.parametrize("args", ARGS)
def test_the_same_bytes_as_redis_py(args: tuple[object, ...]) -> None:
    conn = Connection(decode_responses=True, encoding_errors=base.ENCODING_ERRORS)
    theirs = b"".join(bytes(p) for p in base.REDIS_PY_PACK_COMMAND(conn, *args))
    ours = b"".join(conn.pack_command(*args))
    assert ours == theirs


@pytest.mark.parametrize("bad", [True, None, {"a": 1}])
def test_the_same_refusals(bad: object) -> None:
    conn = Connection(decode_responses=True, encoding_errors=base.ENCODING_ERRORS)
    with pytest.raises(DataError):
        base.REDIS_PY_PACK_COMMAND(conn, "SET", "k", bad)
    with pytest.raises(DataError):
        conn.pack_command("SET", "k", bad)


def test_a_client_of_another_encoding_keeps_it() -> None:
    """hiredis encodes str as UTF-8: a client configured otherwise is packed by the encoder
    (fails with hiredis taking every tuple: b"\\xc3\\xbc" for latin-1's b"\\xfc")."""
    conn = Connection(encoding="latin-1")
    theirs = b"".join(bytes(p) for p in base.REDIS_PY_PACK_COMMAND(conn, "SET", "k", "\u00fc"))
    assert b"".join(conn.pack_command("SET", "k", "\u00fc")) == theirs
    assert theirs.endswith(b"$1\r\n\xfc\r\n")


def test_importing_relay_patches_nothing_and_connect_does() -> None:
    """The hiredis packer is put in place by ``connect``, not by importing relay."""
    code = (
        "from redis.asyncio.connection import AbstractConnection as A\n"
        "from relay.queue import base, store\n"
        "from relay.settings import Settings\n"
        "assert A.pack_command is base.REDIS_PY_PACK_COMMAND, 'patched on import'\n"
        "store.connect(Settings())\n"
        "assert A.pack_command is base._pack_command, 'not patched by connect'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
