"""What every system sends: a 1 KiB JSON payload, and the signed body built from it.

Imported by the bench itself and by the arq/saq baselines (which run in their own
virtualenv), so it needs nothing but orjson and ``relay.domain.signing``.
"""

from __future__ import annotations

import base64
import os
import random
import time
from typing import Any

import orjson

from relay.domain import signing

PAYLOAD_BYTES = 1024
EVENT_TYPE = "bench.test"
# A fixed test secret, not a credential: it signs requests to our own local receiver.
SECRET = "whsec_YmVuY2htYXJrLXNlY3JldC1ub3QtYS1yZWFsLW9uZQ=="

# What the payload is made of (``RELAY_BENCH_PAYLOAD``, or ``--payload`` of run.py):
#   order   an order.paid webhook as SaaS backends send them: nested JSON, ids, amounts,
#           a customer, line items, each event's ids and values drawn afresh (the default)
#   random  the same size of random bytes, base64'd: the worst case for relay's stored
#           bodies, which deflate cannot shrink
#   pad     {"t", "pad": "xxx..."}: the payload of earlier runs, which deflate shrinks
#           to nothing (kept to compare with old results; never for memory figures)
KINDS = ("order", "random", "pad")
KIND = os.environ.get("RELAY_BENCH_PAYLOAD", "order")

_WORDS = (
    "espresso grinder kettle mug filter beans dripper scale tamper carafe press cup "
    "ceramic steel matte black white walnut oak glass travel barista pro mini classic"
).split()
_CITIES = ("Amsterdam", "Berlin", "Lisbon", "Austin", "Toronto", "Osaka", "Melbourne", "Oslo")
_STREETS = ("Keizersgracht", "Main St", "Rua Augusta", "Congress Ave", "Queen St W", "Elm Rd")
_NAMES = ("Ada", "Grace", "Linus", "Margaret", "Alan", "Barbara", "Dennis", "Frances")
_SURNAMES = ("Lovelace", "Hopper", "Torvalds", "Hamilton", "Turing", "Liskov", "Ritchie")


def _hex(rnd: random.Random, n: int) -> str:
    return f"{rnd.getrandbits(4 * n):0{n}x}"


def _order(rnd: random.Random, t: float, items: int) -> dict[str, Any]:
    name = f"{rnd.choice(_NAMES)} {rnd.choice(_SURNAMES)}"
    lines = [
        {
            "id": "li_" + _hex(rnd, 20),
            "sku": f"SKU-{rnd.randint(0, 999999):06d}",
            "name": " ".join(rnd.choice(_WORDS) for _ in range(3)).title(),
            "quantity": rnd.randint(1, 4),
            "unit_amount": rnd.randint(500, 49999),
            "currency": "eur",
            "tax_rate": rnd.choice((0.09, 0.21)),
        }
        for _ in range(items)
    ]
    return {
        "t": t,
        "object": "order",
        "id": "ord_" + _hex(rnd, 24),
        "created": int(t),
        "livemode": False,
        "status": "paid",
        "amount_total": sum(li["quantity"] * li["unit_amount"] for li in lines),
        "currency": "eur",
        "payment_intent": "pi_" + _hex(rnd, 24),
        "customer": {
            "id": "cus_" + _hex(rnd, 14),
            "email": f"{name.split()[0].lower()}.{rnd.randint(1, 9999)}@example.com",
            "name": name,
            "address": {
                "line1": f"{rnd.randint(1, 999)} {rnd.choice(_STREETS)}",
                "city": rnd.choice(_CITIES),
                "postal_code": f"{rnd.randint(1000, 99999)}",
                "country": rnd.choice(("NL", "DE", "PT", "US", "CA", "JP")),
            },
        },
        "items": lines,
        "metadata": {"channel": rnd.choice(("web", "ios", "android")), "cart": _hex(rnd, 12)},
    }


def payload(t: float | None = None, kind: str | None = None) -> dict[str, Any]:
    """A payload of about ``PAYLOAD_BYTES`` of JSON (of ``kind``, default ``KIND``),
    carrying its publish time ``t`` (epoch seconds)."""
    t = time.time() if t is None else t
    kind = kind or KIND
    if kind == "pad":
        head = len(orjson.dumps({"t": t, "pad": ""}))
        return {"t": t, "pad": "x" * (PAYLOAD_BYTES - head)}
    if kind == "random":
        head = len(orjson.dumps({"t": t, "blob": ""}))
        raw = os.urandom((PAYLOAD_BYTES - head) * 3 // 4)
        return {"t": t, "blob": base64.b64encode(raw).decode()}
    rnd = random.Random(os.urandom(8))
    doc = _order(rnd, t, 3)
    while len(orjson.dumps(doc)) < PAYLOAD_BYTES - 150:  # one more line item
        doc = _order(rnd, t, len(doc["items"]) + 1)
    pad = PAYLOAD_BYTES - len(orjson.dumps(doc)) - len(',"note":""')
    doc["note"] = " ".join(rnd.choice(_WORDS) for _ in range(60))[: max(0, pad)]
    return doc


def signed_body() -> bytes:
    """The body the limit, arq and saq send: what relay would build for one event."""
    now_ms = int(time.time() * 1000)
    return signing.build_body("evt_bench", EVENT_TYPE, now_ms, orjson.dumps(payload()))


def headers(key: list[bytes], event_id: str, body: bytes, user_agent: str) -> dict[str, str]:
    """Standard Webhooks headers for one send, signed now (as relay's sender does)."""
    return signing.signed_headers(
        secret_keys=key,
        msg_id=event_id,
        timestamp=int(time.time()),
        body=body,
        delivery_id="dlv_" + event_id,
        attempt=1,
        user_agent=user_agent,
    )
