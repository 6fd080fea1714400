"""Every route module of the Svix-compatible API (imported once, by :mod:`relay.api`)."""

from relay.api.svix import (  # noqa: F401
    applications,
    attempts,
    endpoints,
    eventtypes,
    messages,
    portal,
)
