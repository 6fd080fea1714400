"""structlog, configured once at start: JSON (via orjson) by default, console on request.

Ids of the unit of work (delivery, event, endpoint) are bound with contextvars, so
every line of a delivery's life carries them. Nothing logs secrets or signatures:
the sender never passes headers or endpoint secrets to a logger.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson
import structlog

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


def configure(log_format: str = "json", level: str = "info") -> None:
    numeric = _LEVELS.get(level, 20)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if log_format == "console":
        processors: list[Any] = [*shared, structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
        factory = structlog.PrintLoggerFactory(sys.stderr)
    else:
        processors = [
            *shared,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ]
        factory = structlog.BytesLoggerFactory(sys.stderr.buffer)  # type: ignore[assignment]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def get(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)  # type: ignore[no-any-return]
