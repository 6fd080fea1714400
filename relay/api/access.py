"""Who may call which ``/v1`` or ``/api/v1`` route: the bearer token's principal and
the route's rule.

Every ``/v1`` route has one line in :data:`RULES` (``"METHOD /path"`` -> a
:class:`relay.domain.access.Rule`); a route without one is the operator's only (fail
closed), and ``tests/redis/test_access.py`` fails until it gets a line there and a row in its
own table. The middleware (:func:`authorize`, called by
``relay.api.common.errors_and_auth``) decides everything before the handler runs:

1. the principal: a ``RELAY_API_TOKENS`` token (compared in constant time, no Redis),
   else an API key or portal token looked up by its SHA-256 in one script call that also
   charges the credential's API rate limit (``authenticate.lua``); nothing is cached, so
   a revoked key is refused by the next request on every replica. 401 ``unauthorized``
   (unknown), 401 ``token_expired`` (a portal session past its end), 429 ``rate_limited``;
2. the scope: 403 ``forbidden``;
3. the owner: for a route on one endpoint, event or delivery (or ``{app}``), the
   resource must be the principal's app, else 404 ``not_found`` with the very answer a
   missing id gets (one ``HGET``).

Handlers then only narrow listings (:func:`scoped_app`) and pin the app of what a key
creates (:func:`pinned_app`). The operator's tokens are not rate limited.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Callable
from typing import Protocol

from aiohttp import web

from relay.api.svix.rules import RULES as SVIX_RULES
from relay.domain import access
from relay.domain.access import ADMIN, ADMIN_ONLY, Principal, Rule
from relay.queue.store import Store
from relay.settings import Settings

# relay.api.common.ApiError (passed in: common imports this module)
ErrorFactory = Callable[[int, str, str], web.HTTPException]


class Owners(Protocol):
    """What tells the app of an endpoint, event or delivery (the Store, or the reads over
    both tiers, relay.archive.history)."""

    async def app_of(self, kind: str, ident: str) -> str | None: ...


PRINCIPAL = web.RequestKey("principal", Principal)

READ, MANAGE, PUBLISH = Rule("read"), Rule("manage"), Rule("publish")

# One line per /v1 route. Adding a route means adding its line here (and a row in
# tests/redis/test_access.py's table).
RULES: dict[str, Rule] = {
    "POST /v1/endpoints": MANAGE,
    "GET /v1/endpoints": READ,
    "GET /v1/endpoints/{id}": Rule("read", "endpoint"),
    "GET /v1/endpoints/{id}/stats": Rule("read", "endpoint"),
    "PATCH /v1/endpoints/{id}": Rule("manage", "endpoint"),
    "DELETE /v1/endpoints/{id}": Rule("manage", "endpoint"),
    "GET /v1/endpoints/{id}/secret": Rule("manage", "endpoint"),
    "GET /v1/endpoints/{id}/headers": Rule("manage", "endpoint"),
    "GET /v1/endpoints/{id}/url": Rule("manage", "endpoint"),
    "POST /v1/endpoints/{id}/rotate-secret": Rule("manage", "endpoint"),
    "POST /v1/endpoints/{id}/recover": Rule("manage", "endpoint"),
    "POST /v1/endpoints/{id}/test": Rule("manage", "endpoint"),
    "POST /v1/events": PUBLISH,
    "POST /v1/events/batch": PUBLISH,
    "GET /v1/events": READ,
    "GET /v1/events/{id}": Rule("read", "event"),
    "GET /v1/deliveries": READ,
    "GET /v1/deliveries/{id}": Rule("read", "delivery"),
    "GET /v1/archive/deliveries": READ,
    "POST /v1/deliveries/{id}/replay": Rule("manage", "delivery"),
    "POST /v1/apps/{app}/portal": Rule("manage", "app", portal=False),
    "GET /v1/portal/session": READ,
    "POST /v1/api-keys": ADMIN_ONLY,
    "GET /v1/api-keys": ADMIN_ONLY,
    "DELETE /v1/api-keys/{id}": ADMIN_ONLY,
    "POST /v1/replays": ADMIN_ONLY,
    "GET /v1/replays": ADMIN_ONLY,
    "GET /v1/replays/{id}": ADMIN_ONLY,
    "POST /v1/replays/{id}/cancel": ADMIN_ONLY,
    "GET /v1/stats": ADMIN_ONLY,
    "GET /v1/ui/overview": ADMIN_ONLY,
    "GET /v1/ui/deliveries": ADMIN_ONLY,
    "GET /v1/ui/deliveries/{id}": ADMIN_ONLY,
    "GET /v1/ui/endpoint-health": ADMIN_ONLY,
    # the discard of a dead lane head, and the event type catalog: the catalog is shared
    # by every app, so keys read it, the operator writes
    "POST /v1/deliveries/{id}/discard": Rule("manage", "delivery"),
    "GET /v1/event-types": READ,
    "GET /v1/event-types/{name}": READ,
    "POST /v1/event-types": ADMIN_ONLY,
    "PATCH /v1/event-types/{name}": ADMIN_ONLY,
    "DELETE /v1/event-types/{name}": ADMIN_ONLY,
    **SVIX_RULES,  # the Svix-compatible API's, /api/v1 (relay.api.svix.rules)
}


def rule_of(request: web.Request) -> Rule | None:
    """The route's rule; None for a request no route matched (its 404/405 follows)."""
    resource = request.match_info.route.resource
    if resource is None:
        return None
    return RULES.get(f"{request.method} {resource.canonical}", ADMIN_ONLY)


async def authorize(
    request: web.Request,
    error: ErrorFactory,
    store: Store,
    settings: Settings,
    history: Owners | None = None,
) -> None:
    """Decide a ``/v1`` request (see the module doc); raises ``error(status, code, text)``
    (``relay.api.common.ApiError``) to refuse it, else records the principal."""
    if settings.auth_disabled:
        request[PRINCIPAL] = ADMIN
        return
    header = request.headers.get("Authorization", "")
    scheme, _, raw = header.partition(" ")
    token = raw.strip()
    if scheme.lower() != "bearer" or not token:
        raise error(401, "unauthorized", "missing or invalid bearer token")
    try:
        given = token.encode()
    except UnicodeEncodeError:  # bytes that are not UTF-8 (aiohttp keeps them as surrogates)
        raise error(401, "unauthorized", "missing or invalid bearer token") from None
    # every admin token compared, in constant time: no early exit on the first match
    admin = False
    for known in settings.api_tokens:
        admin |= hmac.compare_digest(given, known.encode())
    if admin:
        request[PRINCIPAL] = ADMIN
        return
    if not token.startswith((access.KEY_TOKEN_PREFIX, access.PORTAL_TOKEN_PREFIX)):
        raise error(401, "unauthorized", "missing or invalid bearer token")
    digest = access.token_hash(token)
    found = await store.authenticate(digest, settings.api_rate, settings.api_burst)
    record = found.record or {}
    if found.state == "unknown" or not hmac.compare_digest(
        str(record.get("hash", "")).encode(), digest.encode()
    ):
        raise error(401, "unauthorized", "missing or invalid bearer token")
    if found.state == "expired":
        raise error(401, "token_expired", "this portal session has expired; open a new one")
    who = Principal(
        record["kind"], record["id"], record["app"], frozenset(record.get("scopes") or ())
    )
    request[PRINCIPAL] = who
    if found.wait_ms > 0:
        limited = error(429, "rate_limited", f"too many requests for this {who.kind}; slow down")
        limited.headers["Retry-After"] = str(max(1, math.ceil(found.wait_ms / 1000)))
        raise limited
    rule = rule_of(request)
    if rule is None:
        return
    why = access.refusal(rule, who)
    if why is not None:
        raise error(403, "forbidden", why)
    if rule.owner is not None:
        await _check_owner(request, rule, who, error, history or store)


async def _check_owner(
    request: web.Request, rule: Rule, who: Principal, error: ErrorFactory, store: Owners
) -> None:
    if rule.owner == "app":
        app = request.match_info["app"]
        if app != who.app:
            raise error(404, "not_found", f"app {app} does not exist")
        return
    ident = request.match_info["id"]
    if await store.app_of(str(rule.owner), ident) != who.app:
        raise error(404, "not_found", f"{rule.owner} {ident} does not exist")


def principal(request: web.Request) -> Principal:
    who: Principal = request.get(PRINCIPAL, ADMIN)
    return who


def scoped_app(request: web.Request) -> str | None:
    """The app a listing is narrowed to: the key's or session's; None for the operator."""
    return principal(request).app


def pinned_app(request: web.Request, given: str, explicit: bool, error: ErrorFactory) -> str:
    """The app of what a key creates (an event, an endpoint): its own. A body naming
    another app is 403 ``forbidden`` rather than silently moved."""
    own = principal(request).app
    if own is None:
        return given
    if explicit and given != own:
        raise error(403, "forbidden", f"this {principal(request).kind} is for app {own!r}")
    return own
