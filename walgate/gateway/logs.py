"""Logging set-up for ``walgate serve``: plain text lines, or one JSON object per line.

``text``: ``2026-11-24 06:16:33,123 INFO walgate.kafka.connection: kafka connection from ...``.
``json``: ``{"time": "2026-11-24T06:16:33.123Z", "level": "INFO", "logger": "...", "message": "...", ...}`` with
every ``extra`` field the call passed (peer, client_id, principal, ...), and ``exception`` (the formatted
traceback) when there is one. Times are UTC in JSON, local in text (Python's default).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = ["LOG_FORMATS", "TEXT_FORMAT", "JsonFormatter", "setup_logging"]

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the record's extra fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return orjson.dumps(line, default=str).decode()


def setup_logging(level: str, log_format: str = "text") -> None:
    """Log records at ``level`` and above to stderr in ``log_format`` (one of :data:`LOG_FORMATS`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
