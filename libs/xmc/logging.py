"""structlog configured for JSON lines on stderr, shared by every service.

Context (xid, wid, eid, task id) is bound with ``structlog.contextvars`` so every line an
asyncio task logs carries the ids of the work it is doing.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(*, service: str, level: str = "INFO") -> None:
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=level.upper())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # Without locals: a frame's locals hold requests, tokens and rows, which must
            # not reach the logs (and made one failed RPC a 20 kB line).
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            ),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
