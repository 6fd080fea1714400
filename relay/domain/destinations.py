"""Where an endpoint's deliveries go, read from its ``url``: the kind and its details.

The scheme picks the kind: ``http``/``https`` (a POST), ``redis``/``rediss`` (``XADD`` to a
stream), ``nats``/``tls`` (a JetStream publish), ``amqp``/``amqps`` (a RabbitMQ publish
with publisher confirms). :func:`parse` checks a broker url at write and gives the
:class:`Target` a worker connects to; :func:`masked` is the url as reads show it, its
password replaced by the mask. Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

from yarl import URL

MASK = "••••••"  # what reads show in place of a secret (a header value, a url password)

KINDS = {
    "http": "http",
    "https": "http",
    "redis": "redis",
    "rediss": "redis",
    "nats": "nats",
    "tls": "nats",
    "amqp": "amqp",
    "amqps": "amqp",
}
TLS_SCHEMES = frozenset({"https", "rediss", "tls", "amqps"})
DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "nats": 4222, "tls": 4222}
DEFAULT_PORTS |= {"amqp": 5672, "amqps": 5671}
TYPE_FIELD = "{type}"  # in a subject or routing key: the event's type
MAXLEN_MAX = 1_000_000_000
_PLACEHOLDER = re.compile(r"\{[^}]*\}|[{}]")
_NAME = re.compile(r"^[A-Za-z0-9_.:\-/{}]{1,255}$")  # a stream, exchange or routing key
_SUBJECT_TOKEN = re.compile(r"^[A-Za-z0-9_\-:/{}]+$")


@dataclass(frozen=True, slots=True)
class Target:
    """A broker url taken apart: what a worker connects to and where it publishes."""

    kind: str
    scheme: str
    host: str
    port: int
    user: str = ""
    password: str = ""
    path: str = ""  # redis: the db number; nats: the subject; amqp: the vhost
    params: dict[str, str] = field(default_factory=dict)

    @property
    def tls(self) -> bool:
        return self.scheme in TLS_SCHEMES


def kind_of(url: str) -> str:
    """The destination kind of ``url`` ("http" unless its scheme names a broker)."""
    scheme, sep, _ = url.partition("://")
    return KINDS.get(scheme.lower(), "http") if sep else "http"


# OpenTelemetry's messaging.system for each broker kind
MESSAGING_SYSTEMS = {"redis": "redis", "nats": "nats", "amqp": "rabbitmq"}


def messaging_attributes(url: str, event_type: str) -> dict[str, str]:
    """An attempt span's attributes for a broker url: ``messaging.system`` and, where the
    url names it, ``messaging.destination.name`` (the NATS subject or the stream, with
    the event type in place of ``{type}``, or the exchange, and then the routing key).
    Never the credentials."""
    return {name: fill(value, event_type) for name, value in _messaging(url)}


@functools.lru_cache(maxsize=1024)
def _messaging(url: str) -> tuple[tuple[str, str], ...]:
    """:func:`messaging_attributes` of ``url`` with ``{type}`` unfilled: a url is parsed
    once, not at every attempt."""
    target = parse(url)
    where = {"nats": target.path, "redis": target.params.get("stream", "")}.get(
        target.kind, target.params.get("exchange", "")
    )
    named = [
        ("messaging.system", MESSAGING_SYSTEMS[target.kind]),
        ("messaging.destination.name", where),
        ("messaging.rabbitmq.destination.routing_key", target.params.get("routing_key", "")),
    ]
    return tuple((name, value) for name, value in named if value)


def fill(template: str, event_type: str) -> str:
    """A subject or routing key for one event: ``{type}`` replaced by its type."""
    return template.replace(TYPE_FIELD, event_type)


def _split(url: str) -> tuple[str, str, str, str]:
    """(scheme, userinfo as written, host and port, the rest) of ``url``."""
    scheme, _, rest = url.partition("://")
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    userinfo, _, hostport = rest[:end].rpartition("@")
    return scheme, userinfo, hostport, rest[end:]


def masked(url: str) -> str:
    """``url`` as reads show it: a password (or a NATS token) replaced by the mask, the
    rest exactly as written."""
    kind = kind_of(url)
    scheme, userinfo, hostport, rest = _split(url)
    if kind == "http" or not userinfo:
        return url
    user, colon, password = userinfo.partition(":")
    if colon and password:
        userinfo = f"{user}:{MASK}"
    elif not colon and kind == "nats":  # nats://TOKEN@host: the user is a token
        userinfo = MASK
    return f"{scheme}://{userinfo}@{hostport}{rest}"


def secrets_of(url: str) -> list[str]:
    """The parts of ``url`` no log line or answer may show (for scrubbing error text)."""
    kind = kind_of(url)
    _, userinfo, _, _ = _split(url)
    if kind == "http" or not userinfo:
        return []
    user, colon, password = userinfo.partition(":")
    found = [password] if password else [user] if kind == "nats" and not colon else []
    out = [url, *found, *(unquote(s) for s in found)]
    return sorted({s for s in out if s}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` (a broker's error) with every secret of ``url`` in it masked."""
    for secret in secrets_of(url):
        text = text.replace(secret, MASK)
    return text


def _template(name: str, value: str, what: str) -> str:
    for found in _PLACEHOLDER.findall(value):
        if found != TYPE_FIELD:
            raise ValueError(f"{name} may use {TYPE_FIELD} only, not {found!r}")
    if not _NAME.match(value):
        raise ValueError(f"{name} must be 1 to 255 of A-Z a-z 0-9 _ . : - / ({what})")
    return value


def _params(parsed: URL, allowed: set[str]) -> dict[str, str]:
    pairs = parse_qsl(parsed.raw_query_string, keep_blank_values=True)
    names = [k for k, _ in pairs]
    unknown = sorted(set(names) - allowed)
    if unknown:
        raise ValueError(f"unknown url parameter {unknown[0]!r} (allowed: {sorted(allowed)})")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"url parameter {twice[0]!r} is given twice")
    return dict(pairs)


def _redis(parsed: URL, target: Target) -> Target:
    db = parsed.path.strip("/") or "0"
    if not db.isdigit() or int(db) > 15:
        raise ValueError("a redis url's path is the db number, 0 to 15 (redis://host:6379/0)")
    params = _params(parsed, {"stream", "maxlen"})
    if "stream" not in params or "{" in params["stream"]:
        raise ValueError("a redis url names its stream: ?stream=NAME (no {type})")
    _template("stream", params["stream"], "the stream's key")
    maxlen = params.get("maxlen", "")
    if not maxlen.isdigit() or not 1 <= int(maxlen) <= MAXLEN_MAX:
        raise ValueError(f"a redis url bounds its stream: ?maxlen=N, 1 to {MAXLEN_MAX}")
    return _with(target, path=db, params=params)


def _nats(parsed: URL, target: Target) -> Target:
    subject = unquote(parsed.raw_path).strip("/")
    if not subject:
        raise ValueError("a nats url names its subject: nats://host:4222/SUBJECT")
    _params(parsed, set())
    tokens = subject.split(".")
    if any(not t or not _SUBJECT_TOKEN.match(t) for t in tokens):
        raise ValueError(
            "subject must be dot-separated tokens of A-Z a-z 0-9 _ - : / (no wildcards)"
        )
    _template("subject", subject, "a NATS subject")
    if parsed.password and not parsed.user:
        raise ValueError("a nats url's password needs a user (or give a token alone)")
    return _with(target, path=subject)


def _amqp(parsed: URL, target: Target) -> Target:
    raw = parsed.raw_path
    vhost = unquote(raw[1:]) if len(raw) > 1 else "/"
    params = _params(parsed, {"exchange", "routing_key"})
    exchange = params.get("exchange", "")
    if exchange:
        _template("exchange", exchange, "an exchange name")
        if "{" in exchange:
            raise ValueError("exchange may not use {type} (the routing key may)")
    if not params.get("routing_key"):
        raise ValueError("an amqp url names its routing key: ?routing_key=TEMPLATE")
    _template("routing_key", params["routing_key"], "a routing key")
    return _with(target, path=vhost, params={"exchange": exchange, **params})


def _with(target: Target, **changes: object) -> Target:
    values = {f: getattr(target, f) for f in Target.__dataclass_fields__}
    values.update(changes)
    return Target(**values)  # type: ignore[arg-type]


_PARSERS = {"redis": _redis, "nats": _nats, "amqp": _amqp}


def parse(url: str) -> Target:
    """The broker ``url`` taken apart; ValueError (a message for a 422) when it is not a
    valid destination of its kind."""
    kind = kind_of(url)
    if kind == "http":
        raise ValueError("not a broker url")
    try:
        parsed = URL(url)
        port = parsed.explicit_port
        port = DEFAULT_PORTS[parsed.scheme] if port is None else port
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if not parsed.host:
        raise ValueError("url must have a host")
    if parsed.fragment:
        raise ValueError("url must not have a fragment")
    if not 0 < port < 65536:
        raise ValueError("url must have a valid port")
    scheme = parsed.scheme
    target = Target(
        kind=kind,
        scheme=scheme,
        host=parsed.host,
        port=port,
        user=parsed.user or "",
        password=parsed.password or "",
    )
    if MASK in url:
        raise ValueError(
            "url holds the mask that reads show; send the real credentials "
            "(GET /v1/endpoints/{id}/url)"
        )
    return _PARSERS[kind](parsed, target)
