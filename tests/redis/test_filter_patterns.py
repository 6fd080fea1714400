"""Filters refused at write for what their regular expressions would cost.

cel-cpp compiles the pattern of ``matches`` again on every call, so inside a comprehension
once per element: ``[0, ... 100 zeros].exists(x, event_type.matches('(?i)\\pL{1,200}...'))``
held the API for 22 s per publish. A pattern must be a string literal that RE2 compiles
within ``filters.MAX_REGEX_PROGRAM`` instructions; the time the filter takes at publish
is bounded by the sandbox (tests/test_tenant_budget.py).

Seen failing before the check: every filter below was 201 (stored) for an app key.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import pytest

from relay.domain import filters

HOSTILE = "(?i)\\\\pL{1,200}[0-9]{1,200}"  # as written inside a CEL string literal


def zeros(n: int) -> str:
    return "[" + ",".join(["0"] * n) + "]"


REFUSED = {
    # the adversarial run's filter (262 characters): the pattern is the problem
    f"{zeros(100)}.exists(x, event_type.matches('{HOSTILE}'))": "the limit is 5000",
    f"event_type.matches('{HOSTILE}')": "the limit is 5000",
    "payload.s.matches('\\\\pL{1,8}')": "compiles to 9579 RE2 instructions",
    # a pattern relay cannot check before it runs
    "event_type.matches(payload.pattern)": "must be a string literal",
    "matches(event_type, 'order' + payload.suffix)": "must be a string literal",
    "payload.l.exists(x, x.matches(x))": "must be a string literal",
    # not RE2 at all: refused at write, not an error at every publish
    "event_type.matches('(unclosed')": "is not RE2: missing )",
    "event_type.matches('a(?=b)')": "is not RE2",  # lookahead: backtracking only
}
ACCEPTED = [
    "payload.email.matches('@example\\\\.com$')",
    "matches(event_type, r'^order\\.(paid|refunded)$')",
    "payload.items.exists(i, i.sku.matches('^GIFT-[0-9]{1,6}$'))",
    "payload.name.matches('(?i)^\\\\pL+$')",
    # names and brackets inside strings and comments are not calls
    "payload.note == 'matches(payload.x)' // matches(payload.y)\n && true",
]


@pytest.mark.parametrize("text", list(REFUSED))
def test_a_costly_or_computed_pattern_is_refused(text: str) -> None:
    with pytest.raises(filters.FilterInvalid, match=re.escape(REFUSED[text])):
        filters.compile_filter(text)


@pytest.mark.parametrize("text", ACCEPTED)
def test_ordinary_patterns_are_accepted(text: str) -> None:
    filters.compile_filter(text)


async def test_an_app_key_gets_422_with_the_reason(make_store: Any, make_api: Any) -> None:
    store = await make_store(allow_private_networks=True)
    api = await make_api(store)
    async with api("POST", "/v1/api-keys", json={"app": "H", "scopes": ["publish", "manage"]}) as r:
        assert r.status == 201
        token = (await r.json())["token"]
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
        for text, reason in REFUSED.items():
            body = {"url": "http://127.0.0.1:9/h", "filter": text}
            async with s.post(api.url + "/v1/endpoints", json=body) as r:
                answer = await r.json()
                assert r.status == 422, (text, answer)
            assert answer["error"] == "filter_invalid" and reason in answer["message"], answer
        async with s.post(
            api.url + "/v1/endpoints", json={"url": "http://127.0.0.1:9/h", "filter": ACCEPTED[0]}
        ) as r:
            assert r.status == 201
            made = await r.json()
        patch = {"filter": f"event_type.matches('{HOSTILE}')"}
        async with s.patch(api.url + f"/v1/endpoints/{made['id']}", json=patch) as r:
            assert r.status == 422 and (await r.json())["error"] == "filter_invalid"
    assert [e["filter"] for e in await store.list_endpoints("H")] == [ACCEPTED[0]]
