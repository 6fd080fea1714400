"""How each ``RELAY_*`` value is read: pure parsers, each raising ``ValueError`` with what
is wrong (:func:`relay.domain.settingspec.read_env` names the variable)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from relay.domain.retry import parse_duration


def _flag(raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1 or 0")


def _redis_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError("must start with redis://, rediss:// or unix://")
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError("has no host")
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        raise ValueError("has a port that is not a number") from None
    return raw


def _sentinels(raw: str) -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` (port 26379 when left out)."""
    found = []
    for item in raw.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep:
            host, port = port, "26379"
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("expected host:port[,host:port...]")
        found.append((host.strip("[]"), int(port)))
    return tuple(found)


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError("must be a positive integer")
    return value


def _body_cap(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 65536:
        raise ValueError("must be between 0 and 65536 bytes")
    return value


def _port(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 65535:
        raise ValueError("must be a TCP port")
    return value


def _fraction(raw: str) -> float:
    value = float(raw)
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _ack_timeout(raw: str) -> float:
    # WAIT 0 would block forever; past the 5 s socket timeout the wait would be cut off
    value = parse_duration(raw)
    if not 0.001 <= value <= 4.0:
        raise ValueError("must be between 1ms and 4s")
    return value


def _positive_duration(raw: str) -> float:
    value = parse_duration(raw)
    if value <= 0:
        raise ValueError("must be longer than zero")
    return value


def _tokens(raw: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in raw.split(",") if t.strip())


_APP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")  # relay.domain.schema.APP_PATTERN


def _app_name(raw: str) -> str:
    if not _APP.match(raw):
        raise ValueError("must be an app name: letters, digits, '_', '.', '-' (1-128)")
    return raw


def _prefix(raw: str) -> str:
    if any(c in raw for c in "{}: \t"):
        raise ValueError("may not contain braces, colons or spaces")
    return raw


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,57}$")


def _identifier(raw: str) -> str:
    """One plain PostgreSQL identifier (letters, digits, ``_``), at most 58 characters."""
    if not _IDENT.match(raw):
        raise ValueError("expected letters, digits and _, not starting with a digit")
    return raw


def outbox_table(raw: str) -> str:
    """``name`` or ``schema.name``: plain identifiers (letters, digits, ``_``), the name
    short enough for the ``_dead`` table and ``_notify`` function beside it."""
    parts = raw.split(".")
    if len(parts) > 2 or not all(_IDENT.match(p) for p in parts):
        raise ValueError(
            "expected a table name or schema.table of letters, digits and _ "
            "(not starting with a digit, at most 58 characters each)"
        )
    return raw


def _event_loop(raw: str) -> str:
    if raw not in ("uvloop", "asyncio"):
        raise ValueError("expected uvloop or asyncio")
    return raw


def _log_format(raw: str) -> str:
    if raw not in ("json", "console"):
        raise ValueError("expected json or console")
    return raw


def redact_url(url: str) -> str:
    """A URL with the password in it (user part or ``?password=``) hidden."""
    parts = urlsplit(url)
    if parts.password is not None:
        # keep the host exactly as written (an IPv6 literal keeps its brackets)
        netloc = f"{parts.username or ''}:***@{parts.netloc.rpartition('@')[2]}"
        parts = parts._replace(netloc=netloc)
    if parts.query:  # redis-py also takes ?password=...
        query = "&".join(
            f"{k}=***" if k.lower() == "password" else f"{k}{sep}{v}"
            for k, sep, v in (p.partition("=") for p in parts.query.split("&"))
        )
        parts = parts._replace(query=query)
    return urlunsplit(parts)


def redact_dsn(dsn: str) -> str:
    """A PostgreSQL URL or ``key=value`` conninfo with its password hidden."""
    if "://" in dsn:
        return redact_url(dsn)
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", dsn, flags=re.I)
