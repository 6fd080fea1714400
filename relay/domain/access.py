"""Who may do what: principals (admin, API key, portal session), scopes, access rules.

Pure: no I/O. The API's middleware (:mod:`relay.api.access`) finds the principal behind
a bearer token and the rule of the route, and asks :func:`refusal` whether to go on.

* **admin**: a ``RELAY_API_TOKENS`` token (the operator): every route, every app.
* **key**: an API key (``rk_...``) of one app with some of the scopes ``publish``,
  ``read``, ``manage`` (``manage`` includes ``read``: what one changes, one may read).
* **portal**: a portal session (``rp_...``) of one app, ``read`` and ``manage``, for the
  app's own customer; it cannot publish (except the endpoint test event, a ``manage``
  route) nor open further portal sessions.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import secrets
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

SCOPES = ("publish", "read", "manage")
PORTAL_SCOPES = frozenset({"read", "manage"})
KEY_TOKEN_PREFIX = "rk_"
PORTAL_TOKEN_PREFIX = "rp_"

Kind = Literal["admin", "key", "portal"]
Owner = Literal["endpoint", "event", "delivery", "app"]


@dataclass(frozen=True, slots=True)
class Principal:
    kind: Kind
    id: str  # "admin", key_..., prt_...
    app: str | None  # None: every app (admin)
    scopes: frozenset[str]

    @property
    def is_admin(self) -> bool:
        return self.kind == "admin"


ADMIN = Principal("admin", "admin", None, frozenset(SCOPES))


@dataclass(frozen=True, slots=True)
class Rule:
    """The access rule of one route.

    ``scope`` None: the operator's only (admin). ``owner``: the path names a resource
    (``{id}``: an endpoint, event or delivery; ``{app}``: an app) that must be the
    principal's app, else 404 exactly as for a missing one. ``portal`` False: portal
    sessions are refused even with the scope.
    """

    scope: str | None
    owner: Owner | None = None
    portal: bool = True


ADMIN_ONLY = Rule(None)


def refusal(rule: Rule, who: Principal) -> str | None:
    """Why ``who`` may not use a route of ``rule`` (a 403 message), or None."""
    if who.is_admin:
        return None
    if rule.scope is None:
        return "this route is for the operator's tokens only"
    if who.kind == "portal" and not rule.portal:
        return "a portal session cannot use this route"
    held = who.scopes | ({"read"} if "manage" in who.scopes else set())  # manage reads too
    if rule.scope not in held:
        return f"this {who.kind} lacks the {rule.scope!r} scope"
    return None


def new_token(prefix: str) -> str:
    """A bearer token: the prefix and 256 random bits (URL-safe base64)."""
    return prefix + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What relay stores and looks tokens up by: SHA-256, hex. The tokens are 256 random
    bits, so a fast hash is enough (no dictionary to attack)."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_key_id() -> str:
    return "key_" + secrets.token_hex(12)


def new_portal_id() -> str:
    return "prt_" + secrets.token_hex(12)


# ---------------------------------------------------------------------- settings


def parse_api_rate(raw: str) -> tuple[float, int]:
    """``RATE[/s|/m|/h][,BURST]``: requests per second (``0``: no limit) and the burst
    (default twice a second's worth, at least 1)."""
    rate_text, _, burst_text = raw.partition(",")
    number, _, unit = rate_text.strip().partition("/")
    per = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}.get(unit.strip())
    if per is None:
        raise ValueError("expected RATE[/s|/m|/h][,BURST], e.g. 100/s,200")
    rate = float(number) / per
    if not 0 <= rate <= 1_000_000:
        raise ValueError("the rate must be between 0 and 1000000/s")
    burst = int(burst_text) if burst_text.strip() else max(1, int(rate * 2))
    if burst < 1:
        raise ValueError("the burst must be at least 1")
    return rate, burst


_SOURCE = re.compile(r"^(?:'self'|https?://[A-Za-z0-9.*-]+(?::\d+)?|https?:)$")


def parse_frame_ancestors(raw: str) -> str:
    """Space-separated CSP sources (``'self'``, ``https://app.example.com``, ...):
    nothing that could end the directive or add another one."""
    items = raw.split()
    if raw.strip() in ("'none'", "none"):
        return ""
    bad = [i for i in items if not _SOURCE.match(i)]
    if bad:
        raise ValueError(f"not a frame-ancestors source: {bad[0]!r}")
    return " ".join(items)


def parse_public_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL")
    if "@" in parts.netloc or parts.query or parts.fragment or raw.endswith(("?", "#")):
        raise ValueError("expected a base URL: no user, query or fragment")
    return raw.rstrip("/")


_HOST = re.compile(
    r"(?P<name>[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::(?P<port>[0-9]{1,5}))?"
)


def loopback_host(host: str) -> bool:
    """Whether a request's ``Host`` is a plain ``host[:port]`` naming this machine's
    loopback (``localhost``, ``127.0.0.0/8``, ``[::1]``): the only Host a portal link is
    built from when ``RELAY_PUBLIC_URL`` is unset. Nothing else is trusted: a Host is
    whatever the client sent."""
    found = _HOST.fullmatch(host)
    if found is None or int(found["port"] or 0) > 65535:
        return False
    name = found["name"].strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
