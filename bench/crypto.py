"""``make bench``, CPU per request of what issue 16 added to the hot paths (no Redis):

* signing one delivery: ``v1`` HMAC-SHA256 (the default) against ``v1a`` ed25519, with
  one key and with two (during a rotation), over a 1 KiB body, as the worker's
  ``relay.delivery.sender.signature`` does it (keys decoded once and cached);
* checking one payload against an event type's JSON Schema at publish
  (``relay.domain.eventtypes.payload_error``, the compiled validator the API caches),
  for a valid payload (the fast path) and an invalid one (finding the error's path).

    python bench/crypto.py [--n 20000]

Prints one line per figure (median of 5 rounds, microseconds per call) and writes
``bench/results/crypto.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from relay.delivery.sender import signature  # noqa: E402
from relay.domain import ed25519, signing  # noqa: E402
from relay.domain.eventtypes import check_schema, payload_error  # noqa: E402

ORDER = {
    "type": "object",
    "properties": {
        "order": {"type": "integer"},
        "amount": {"type": "integer", "minimum": 0},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "maxItems": 100},
    },
    "required": ["order", "amount", "currency"],
    "$defs": {
        "line": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            "required": ["sku", "qty"],
        }
    },
}


def per_call_us(fn: Any, n: int) -> float:
    rounds = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(rounds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    n = ap.parse_args().n
    body = b'{"id":"evt_x","type":"order.paid","data":' + b'"' + b"x" * 1000 + b'"}'
    later = time.time() * 1000 + 3600_000

    def endpoint(scheme: str, keys: int) -> dict[str, Any]:
        make = ed25519.generate_key if scheme == "ed25519" else signing.generate_secret
        olds = [{"secret": make(), "expires_at": later} for _ in range(keys - 1)]
        return {"signing": scheme, "secret": make(), "previous_secrets": olds}

    figures: dict[str, float] = {}
    for scheme in ("hmac", "ed25519"):
        for keys in (1, 2):
            ep = endpoint(scheme, keys)
            now = time.time()
            figures[f"sign {scheme}, {keys} key(s)"] = per_call_us(
                lambda ep=ep, now=now: signature(ep, now, "evt_x", body), n
            )
    validator = check_schema(ORDER)
    good = {"order": 1, "amount": 4200, "currency": "EUR", "lines": [{"sku": "a", "qty": 1}] * 5}
    bad = {**good, "lines": [*good["lines"], {"sku": "b"}]}
    assert payload_error(validator, good) is None and payload_error(validator, bad)
    flat = check_schema(
        {k: v for k, v in ORDER.items() if k != "$defs"}
        | {"properties": {k: v for k, v in ORDER["properties"].items() if k != "lines"}}
    )
    small = {"order": 1, "amount": 4200, "currency": "EUR"}
    figures["schema check, 3 fields, valid"] = per_call_us(lambda: payload_error(flat, small), n)
    figures["schema check, + 5 $ref'd lines, valid"] = per_call_us(
        lambda: payload_error(validator, good), n
    )
    figures["schema check, + 5 $ref'd lines, invalid"] = per_call_us(
        lambda: payload_error(validator, bad), n // 4
    )
    for name, us in figures.items():
        print(f"{name:<40} {us:8.1f} us per call")
    out = ROOT / "bench" / "results" / "crypto.json"
    out.write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
