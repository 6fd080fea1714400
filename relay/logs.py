"""structlog, configured once at start: JSON (via orjson) by default, console on request.

Ids of the unit of work (delivery, event, endpoint) are on every line of a delivery's
life: the worker passes them with each line (``relay.delivery.attempt.ids_of``), other
units of work may bind them with contextvars (merged here). Nothing logs secrets or signatures:
the sender never passes headers or endpoint secrets to a logger.

In JSON, a traceback is one structured field (``exception``: a list of frames and the
exception's type and value, no local variables), never lines of
text breaking the stream; records of the standard library's loggers (aiohttp, asyncio)
go through the same renderer, so every line of stderr is one JSON object.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson
import structlog

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}

# Tracebacks as data, without local variables (a frame's locals may hold a token or a
# secret): type, value and file/line/function per frame.
_TRACEBACK = structlog.processors.ExceptionRenderer(
    structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
)


_second: tuple[int, str] = (-1, "")  # the last second formatted, and its text


def add_timestamp(logger: Any, method_name: str, event_dict: Any) -> Any:
    """``timestamp``, as ``TimeStamper(fmt="iso", utc=True)`` writes it
    (``2026-12-01T19:20:04.669336Z``; no fraction at a whole second), the second
    formatted once: a worker logs a line per delivery attempt, and formatting a datetime
    for each is much of what the line costs beyond writing it."""
    global _second
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    micros = int((now - second) * 1_000_000)
    event_dict["timestamp"] = f"{_second[1]}.{micros:06d}Z" if micros else f"{_second[1]}Z"
    return event_dict


def configure(log_format: str = "json", level: str = "info") -> None:
    numeric = _LEVELS.get(level, 20)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        add_timestamp,
    ]
    if log_format == "console":
        processors: list[Any] = [*shared, structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
        factory = structlog.PrintLoggerFactory(sys.stderr)
    else:
        processors = [
            *shared,
            _TRACEBACK,
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
    if log_format != "console":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(stdlib_json_formatter())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def stdlib_json_formatter() -> logging.Formatter:
    """A formatter that renders a standard-library log record as one JSON line, its
    traceback (if any) as the structured ``exception`` field."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _TRACEBACK,
            structlog.processors.JSONRenderer(),
        ],
    )


def get(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)  # type: ignore[no-any-return]
