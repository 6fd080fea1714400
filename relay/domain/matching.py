"""Event type matching for endpoint subscriptions.

Patterns: ``*`` matches every type, ``prefix.*`` matches any type starting with
``prefix.`` (but not ``prefix`` itself), anything else matches exactly.
"""

from __future__ import annotations

from collections.abc import Sequence


def _match_one(pattern: str, event_type: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        prefix = pattern[:-1]  # keep the trailing dot
        return len(event_type) > len(prefix) and event_type.startswith(prefix)
    return pattern == event_type


def matches(patterns: Sequence[str], event_type: str) -> bool:
    """Return True if any of ``patterns`` matches ``event_type``."""
    return any(_match_one(p, event_type) for p in patterns)


def validate_pattern(p: str) -> str:
    """Return ``p`` unchanged if it is a valid pattern, else raise ValueError."""
    if not p:
        raise ValueError("event type pattern must not be empty")
    if any(c.isspace() for c in p):
        raise ValueError(f"event type pattern must not contain whitespace: {p!r}")
    if p == "*":
        return p
    body = p[:-2] if p.endswith(".*") else p
    if not body:
        raise ValueError(f"wildcard pattern needs a prefix before '.*': {p!r}")
    if "*" in body:
        raise ValueError(f"'*' is only allowed as the whole pattern or a trailing '.*': {p!r}")
    return p
