"""Portal sessions with branding: given to ``POST /v1/apps/{app}/portal``, validated, kept
beside the session's credential for as long, and read back by the page through
``GET /v1/portal/session``."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import pytest

from relay.domain.access import token_hash
from relay.queue.store import Store
from tests.helpers.api import assert_error, call, snapshot

pytestmark = pytest.mark.realredis

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 40).decode()


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Store, Any]:
    store = await make_store()
    return store, await make_api(store)


async def session_of(api: Any, token: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s:
        headers = {"Authorization": f"Bearer {token}"}
        async with s.get(api.url + "/v1/portal/session", headers=headers) as r:
            return r.status, await r.json()


@pytest.mark.parametrize(
    "branding",
    [
        {
            "name": "Acme Webhooks",
            "logo_url": "https://cdn.acme.example/logo.svg",
            "accent_color": "#0a7cff",
        },
        {"logo_url": PNG, "accent_color": "#fff"},
        {"name": "Only a name"},
    ],
)
async def test_branding_is_kept_with_the_session(
    env: tuple[Store, Any], branding: dict[str, str]
) -> None:
    store, api = env
    status, made = await call(api, "POST", "/v1/apps/shop/portal", json={"branding": branding})
    assert status == 201 and made["branding"] == branding
    status, got = await session_of(api, made["token"])
    assert status == 200, got
    assert got == {
        "app": "shop",
        "scopes": ["manage", "read"],
        "expires_at": made["expires_at"],
        "branding": branding,
    }
    digest = token_hash(made["token"])
    brand_ttl = await store.redis.pttl(store.keys.portal_branding(digest))
    cred_ttl = await store.redis.pttl(store.keys.credential(digest))
    assert brand_ttl > 0 and abs(cred_ttl - brand_ttl) < 5_000  # set together, one TTL
    # the credential, read on every request, does not carry the branding
    assert "logo" not in (await store.redis.get(store.keys.credential(digest)) or "")


async def test_no_branding_and_other_tokens(env: tuple[Store, Any]) -> None:
    store, api = env
    status, made = await call(api, "POST", "/v1/apps/shop/portal")
    assert status == 201 and made["branding"] is None
    status, got = await session_of(api, made["token"])
    assert status == 200 and got["branding"] is None and got["app"] == "shop"
    status, made = await call(api, "POST", "/v1/apps/shop/portal", json={})
    assert status == 201 and made["branding"] is None
    assert not [
        k async for k in store.redis.scan_iter(match=store.settings.key_prefix + ":*:brand:*")
    ]
    # the operator's token is no portal session
    assert_error(*await call(api, "GET", "/v1/portal/session"), 404, "not_found")


@pytest.mark.parametrize(
    "branding",
    [
        {"logo_url": "http://acme.example/logo.png"},
        {"logo_url": "javascript:alert(1)"},
        {"logo_url": "data:text/html;base64,PGI+aGk8L2I+"},
        {"logo_url": "data:image/png;base64,not base64!"},
        {"logo_url": "data:image/png;base64," + "A" * 70000},
        {"logo_url": "https://acme.example/" + "a" * 2048},
        {"logo_url": "https://user@acme.example/logo.png"},
        {"logo_url": 'https://acme.example/a"onerror="x'},
        {"logo_url": "https:///nohost"},
        {"accent_color": "red"},
        {"accent_color": "#12345"},
        {"accent_color": "#0a7cff; background: url(x)"},
        {"name": ""},
        {"name": "x" * 81},
        {"name": "line\nbreak"},
        {"font": "Comic Sans"},
        "acme",
    ],
)
async def test_bad_branding_is_422_and_writes_nothing(
    env: tuple[Store, Any], branding: Any
) -> None:
    store, api = env
    before = await snapshot(store)
    got = await call(api, "POST", "/v1/apps/shop/portal", json={"branding": branding})
    assert_error(*got, 422, "validation_error")
    assert await snapshot(store) == before


async def test_the_portal_page_may_show_an_https_logo(env: tuple[Store, Any]) -> None:
    _store, api = env
    async with aiohttp.ClientSession() as s, s.get(api.url + "/portal/") as r:
        csp = r.headers["Content-Security-Policy"]
    assert "img-src 'self' data: https:;" in csp and "script-src 'self';" in csp
