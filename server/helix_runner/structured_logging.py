"""Log setup: human-readable lines on a terminal, one JSON object per line otherwise, on stderr.

``log_format = auto`` (the default) picks by where stderr goes: a person watching a terminal gets
short lines (``09:27:18 info  serving address=127.0.0.1:50051``), a file, pipe or log collector
gets JSON. ``json`` and ``text`` force one. Log records may carry structured fields via
``extra={"fields": {...}}``; JSON merges them into the object (so logs can be filtered by
``job_id`` / ``phase_id``), text appends them as ``key=value``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

import orjson

FORMATS = ("auto", "json", "text")


class JsonFormatter(logging.Formatter):
    """Formats a record as a single-line JSON object."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    """One short line for a person: local time, level, message, then the fields as ``key=value``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = f"{stamp} {record.levelname.lower():<7} {record.getMessage()}"
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: object) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    text = str(value)
    return f'"{text}"' if not text or any(c.isspace() for c in text) else text


def resolve_format(fmt: str, stream: TextIO | None = None) -> str:
    """``json`` or ``text``: ``auto`` is text when ``stream`` (default stderr) is a terminal."""
    if fmt != "auto":
        return fmt
    stream = sys.stderr if stream is None else stream
    return "text" if hasattr(stream, "isatty") and stream.isatty() else "json"


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    """Installs the root handler on stderr; safe to call more than once."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if resolve_format(fmt) == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # grpc's own loggers are chatty at debug level and not about our service.
    logging.getLogger("grpc").setLevel(max(logging.WARNING, root.level))
