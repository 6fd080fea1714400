"""Layout v3's stored event (relay/domain/eventrecord.py) and derived ids (relay/domain/ids.py).

Pure functions: what is stored, and that the body made again from it is byte for byte the
body that was signed and sent, compressed or not, whatever the payload.
"""

from __future__ import annotations

import os
import random
import zlib

import orjson
import pytest

from relay.domain import eventrecord, ids, signing

NOW = 1_796_152_450_123


def _pack(body: bytes, event_id: str, deliveries: list[tuple[str, str]], **kw: object) -> bytes:
    args = {
        "event_id": event_id,
        "event_type": "order.paid",
        "app": "shop",
        "created_ms": NOW,
        "max_attempts": 8,
        "deliveries": deliveries,
        "body": body,
    }
    args.update(kw)
    return eventrecord.pack(**args)  # type: ignore[arg-type]


def test_delivery_ids_derive_from_the_event_and_back() -> None:
    event_id = ids.new_event_id(3, NOW)
    assert event_id.endswith("00") and ids.shard_of(event_id) == 3
    assert ids.created_ms(event_id) == NOW
    made = [ids.delivery_id(event_id, i) for i in (0, 1, 31, 32, 1023)]
    assert made[0] == "dlv_" + event_id[4:]
    assert [m[-2:] for m in made] == ["00", "01", "0Z", "10", "ZZ"]
    for i, d in zip((0, 1, 31, 32, 1023), made, strict=True):
        assert ids.derived(d) == (event_id, i)
        assert ids.shard_of(d) == 3 and ids.created_ms(d) == NOW
    with pytest.raises(ValueError):
        ids.delivery_id(event_id, ids.MAX_DELIVERIES)
    assert ids.derived("evt_" + event_id[4:]) is None and ids.derived("dlv_short") is None


@pytest.mark.parametrize(
    "payload",
    [
        b'{"n":1}',  # short: stored as it is
        orjson.dumps({"items": [{"sku": f"SKU-{i}", "qty": i} for i in range(60)]}),  # deflates
        orjson.dumps({"blob": os.urandom(600).hex()}),  # hex: deflate saves about half
        b'"' + os.urandom(700).hex().encode()[:700] + b'"',
        orjson.dumps({"text": "gr\u00fc\u00dfe\nzwei", "big": 18446744073709551615}),
    ],
)
def test_the_body_made_again_is_the_body_sent(payload: bytes) -> None:
    event_id = ids.new_event_id(0, NOW)
    body = signing.build_body(event_id, "order.paid", NOW, payload)
    stored = _pack(body, event_id, [(ids.delivery_id(event_id, 0), "ep_a")])
    header, again = eventrecord.unpack(stored, event_id)
    assert again == body
    # what a client that decodes replies (surrogateescape) hands back works the same
    decoded = stored.decode("utf-8", "surrogateescape")
    assert eventrecord.unpack(decoded, event_id)[1] == body
    assert eventrecord.payload(decoded) == orjson.loads(payload)
    assert header["d"] == ["ep_a"] and "created_at" not in header and "raw" not in header
    assert eventrecord.created(event_id, header) == NOW
    kept = stored.partition(b"\n")[2]
    if header.get("z"):
        assert len(payload) >= eventrecord.COMPRESS_FROM
        assert zlib.decompress(kept) == payload and len(kept) <= len(payload) * 7 // 8
    else:
        assert kept == payload  # the payload alone: the envelope is made again


def test_compression_only_when_it_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stored compressed only from COMPRESS_FROM bytes on, and only when deflate saves an
    eighth (with deflate at level 0, which only stores, it never does)."""
    event_id = ids.new_event_id(0, NOW)
    short = signing.build_body(event_id, "t", NOW, orjson.dumps({"pad": "x" * 100}))
    long = signing.build_body(event_id, "t", NOW, orjson.dumps({"pad": "x" * 300}))
    assert "z" not in eventrecord.header_of(_pack(short, event_id, [], event_type="t"))
    assert eventrecord.header_of(_pack(long, event_id, [], event_type="t"))["z"] == 1
    monkeypatch.setattr(eventrecord, "LEVEL", 0)
    stored = _pack(long, event_id, [], event_type="t")
    assert "z" not in eventrecord.header_of(stored)
    assert eventrecord.unpack(stored, event_id)[1] == long


def test_a_body_not_of_build_body_is_kept_whole() -> None:
    """A body that is not build_body's (moved from an older layout with another time, or
    made by hand) is stored as it is and comes back as it is."""
    event_id = ids.new_event_id(0, NOW)
    other = signing.build_body(event_id, "order.paid", NOW - 5, b'{"n":1}')
    header, again = eventrecord.unpack(_pack(other, event_id, []), event_id)
    assert again == other and header["raw"] == 1
    # a creation time other than the id's is kept in the header, and used
    stored = _pack(other, event_id, [], created_ms=NOW - 5)
    header, again = eventrecord.unpack(stored, event_id)
    assert again == other and header["created_at"] == NOW - 5 and "raw" not in header
    assert eventrecord.created(event_id, header) == NOW - 5


def test_deliveries_of_another_layout_are_listed_with_their_ids() -> None:
    event_id = ids.new_event_id(0, NOW)
    old = ids.new_id("dlv", 0, NOW)
    pairs = [(ids.delivery_id(event_id, 0), "ep_a"), (old, "ep_b")]
    body = signing.build_body(event_id, "order.paid", NOW, b"{}")
    header = eventrecord.header_of(_pack(body, event_id, pairs))
    assert header["d"] == ["ep_a", [old, "ep_b"]]
    assert eventrecord.deliveries(event_id, header) == pairs
    assert eventrecord.listed(event_id, header)[1] == {"id": old, "endpoint_id": "ep_b"}


def _created_by_hand(ident: str) -> int | None:
    """created_ms as it was first written: character by character, Crockford's digits."""
    _, sep, body = ident.partition("_")
    if not sep or len(body) != 26:
        return None
    value = 0
    for ch in body[:10]:
        if ch not in "0123456789ABCDEFGHJKMNPQRSTVWXYZ":
            return None
        value = value * 32 + "0123456789ABCDEFGHJKMNPQRSTVWXYZ".index(ch)
    return value


@pytest.mark.parametrize(
    "head",
    ["0000000000", "ZZZZZZZZZZ", "01JDX3Z8QK", "01jdx3z8qk", "0123abcdef", "01JDX3Z8QI",
     "01JDX3Z8QL", "01JDX3Z8QO", "01JDX3Z8QU", "+1JDX3Z8QK", "-1JDX3Z8QK", " 1JDX3Z8QK",
     "01JDX3Z8Q ", "0_JDX3Z8QK", "01JDX3Z8Q\u0663", "01JDX3Z8Q\u00c9", "0x1DX3Z8QK"],
)  # fmt: skip
def test_the_time_an_id_carries_is_read_as_crockford_reads_it(head: str) -> None:
    """ids.created_ms reads the ten time characters with int(_, 32) after a translation:
    it takes exactly what Crockford's alphabet does, and refuses the rest as it did (a
    sign, a space, an underscore, lower case, I L O U, a non-ASCII digit)."""
    ident = "evt_" + head + "00A7PC1W4HMX2R00"
    assert ids.created_ms(ident) == _created_by_hand(ident)
    # and ids made of Crockford's digits mixed with what it refuses, one in three
    rnd = random.Random(17)
    chars = "0123456789ABCDEFGHJKMNPQRSTVWXYZ" * 2 + "ILOUaz_+- \u0663"
    for _ in range(500):
        made = "evt_" + "".join(rnd.choice(chars) for _ in range(10)) + "0" * 16
        assert ids.created_ms(made) == _created_by_hand(made)
