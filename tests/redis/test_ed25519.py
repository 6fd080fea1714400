"""ed25519 signing (Standard Webhooks ``v1a``), from the API to what the receiver gets.

Signatures are verified with code that shares nothing with relay's: PyNaCl (libsodium)
and the receiving guide's own verifier (``cryptography``), each given only the ``whpk_`` public
key as an endpoint read returns it. The private ``whsk_`` key must never appear in an
answer, the CLI's output or a log line.
"""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path
from typing import Any

import nacl.exceptions
import nacl.signing
import pytest

from relay.domain import ed25519
from tests.helpers.cli import cli
from tests.helpers.pacing import deliver_one

pytestmark = pytest.mark.realredis

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "receiving.md"


def guide_verifier() -> Any:
    """``verify_v1a`` exactly as the receiving guide shows it (the block after its marker)."""
    text = GUIDE.read_text()
    marker = text.index("<!-- verify-v1a:")
    block = re.search(r"```python\n(.*?)```", text[marker:], re.S)
    assert block is not None
    scope: dict[str, Any] = {}
    exec(compile(block.group(1), GUIDE.name, "exec"), scope)
    return scope["verify_v1a"]


def nacl_verifies(public_key: str, req: Any) -> list[bool]:
    """For each ``v1a`` signature of the request: does libsodium accept it under this key?"""
    assert public_key.startswith("whpk_")
    key = nacl.signing.VerifyKey(base64.b64decode(public_key[len("whpk_") :]))
    h = req.headers
    signed = f"{h['webhook-id']}.{h['webhook-timestamp']}.".encode() + req.body
    out = []
    for entry in h["webhook-signature"].split(" "):
        version, sig = entry.split(",", 1)
        assert version == "v1a"
        try:
            key.verify(signed, base64.b64decode(sig))
            out.append(True)
        except nacl.exceptions.BadSignatureError:
            out.append(False)
    return out


async def test_ed25519_endpoint_signs_v1a_and_never_shows_its_private_key(
    make_store: Any, make_api: Any, receiver: Any, capfd: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    async with api(
        "POST", "/v1/endpoints", json={"url": receiver.url + "/h", "signing": "ed25519"}
    ) as r:
        assert r.status == 201, await r.text()
        created = await r.json()
    ep_id, public = created["id"], created["public_key"]
    assert created["signing"] == "ed25519" and "secret" not in created
    assert re.fullmatch(r"whpk_[A-Za-z0-9+/]{43}=", public)
    stored = await store.get_endpoint(ep_id)
    assert stored is not None and stored["secret"].startswith("whsk_")
    private = stored["secret"]

    answers = [created]
    for path in (f"/v1/endpoints/{ep_id}", "/v1/endpoints", f"/v1/endpoints/{ep_id}/secret"):
        async with api("GET", path) as r:
            assert r.status == 200
            answers.append(await r.json())
    assert answers[1]["public_key"] == public and answers[3]["public_key"] == public
    assert answers[2]["data"][0]["public_key"] == public

    req = await deliver_one(store, receiver, ep_id)
    assert req.headers["webhook-signature"].startswith("v1a,")
    assert nacl_verifies(public, req) == [True]
    verify_v1a = guide_verifier()
    assert verify_v1a(public, req.headers, req.body)
    assert not verify_v1a(public, req.headers, req.body + b" ")
    other = ed25519.public_key(ed25519.generate_key())
    assert not verify_v1a(other, req.headers, req.body)
    assert nacl_verifies(other, req) == [False]

    shown = await cli(store, "endpoints", "--json")
    assert shown.exit_code == 0 and public in shown.stdout
    everything = [str(a) for a in answers] + [shown.output, *capfd.readouterr()]
    assert all(private not in text and "whsk_" not in text for text in everything)


async def test_ed25519_rotation_signs_with_both_keys_then_only_the_new(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    async with api(
        "POST", "/v1/endpoints", json={"url": receiver.url + "/h", "signing": "ed25519"}
    ) as r:
        ep = await r.json()
    old = ep["public_key"]
    async with api("POST", f"/v1/endpoints/{ep['id']}/rotate-secret") as r:
        assert r.status == 200
        rotated = await r.json()
    new = rotated["public_key"]
    assert new != old and new.startswith("whpk_") and "secret" not in rotated
    assert [p["public_key"] for p in rotated["previous_public_keys"]] == [old]
    assert rotated["previous_secret_expires_at"] > time.time() * 1000
    async with api("GET", f"/v1/endpoints/{ep['id']}") as r:
        read = await r.json()
    assert read["public_key"] == new
    assert [p["public_key"] for p in read["previous_public_keys"]] == [old]

    req = await deliver_one(store, receiver, ep["id"])
    assert len(req.headers["webhook-signature"].split(" ")) == 2
    assert nacl_verifies(new, req) == [True, False]  # the current key signs first
    assert nacl_verifies(old, req) == [False, True]
    verify_v1a = guide_verifier()
    assert verify_v1a(old, req.headers, req.body) and verify_v1a(new, req.headers, req.body)

    stored = await store.get_endpoint(ep["id"])
    assert stored is not None
    (grace,) = stored["previous_secrets"]
    stored["previous_secrets"] = [{**grace, "expires_at": int(time.time() * 1000) - 1}]
    await store.put_endpoint(stored)  # the grace period is over
    req = await deliver_one(store, receiver, ep["id"])
    assert nacl_verifies(new, req) == [True]
    assert not verify_v1a(old, req.headers, req.body)
    async with api("GET", f"/v1/endpoints/{ep['id']}") as r:
        assert (await r.json())["previous_public_keys"] == []


async def test_hmac_stays_the_default_and_bad_signing_input_is_refused(
    make_store: Any, make_api: Any, receiver: Any
) -> None:
    store = await make_store()
    api = await make_api(store)
    async with api("POST", "/v1/endpoints", json={"url": receiver.url + "/h"}) as r:
        plain = await r.json()
    assert plain["signing"] == "hmac" and plain["secret"].startswith("whsec_")
    assert "public_key" not in plain
    secret = "whsec_" + base64.b64encode(b"k" * 24).decode()
    for bad in (
        {"url": receiver.url, "signing": "rsa"},
        {"url": receiver.url, "signing": "ed25519", "secret": secret},
        {"url": receiver.url, "signing": None},
    ):
        async with api("POST", "/v1/endpoints", json=bad) as r:
            assert r.status == 422, bad
            assert (await r.json())["error"] == "validation_error"
    async with api("PATCH", f"/v1/endpoints/{plain['id']}", json={"signing": "ed25519"}) as r:
        assert r.status == 422  # the scheme is chosen at create
    assert len(await store.list_endpoints()) == 1


def test_private_key_parsing() -> None:
    key = ed25519.generate_key()
    seed = base64.b64decode(key[len("whsk_") :])
    assert len(seed) == 32
    public = base64.b64decode(ed25519.public_key(key)[len("whpk_") :])
    libsodium = "whsk_" + base64.b64encode(seed + public).decode()  # 64-byte form
    assert ed25519.public_key(libsodium) == ed25519.public_key(key)
    for bad in ("whsec_" + key[5:], "whsk_!!", "whsk_" + base64.b64encode(b"x" * 31).decode()):
        assert not ed25519.is_valid_key(bad)


def test_the_demo_receivers_check_accepts_relays_signature_only() -> None:
    key = ed25519.generate_key()
    header = ed25519.sign([ed25519.generate_key(), key], "evt_1", 1700000000, b"{}")
    public = ed25519.public_key(key)
    assert ed25519.verify(public, "evt_1", "1700000000", b"{}", header)
    assert not ed25519.verify(public, "evt_1", "1700000001", b"{}", header)
    assert not ed25519.verify(public, "evt_1", "1700000000", b"{} ", header)
    assert not ed25519.verify("whpk_nope", "evt_1", "1700000000", b"{}", header)
    assert not ed25519.verify(public, "evt_1", "1700000000", b"{}", "v1,abc v1a,!!")
