"""How every ``ordo`` command logs: ``--log-level`` and ``--log-format text|json`` (``ORDO_LOG_LEVEL``, ``ORDO_LOG_FORMAT``).

``text`` is one human line per record (time, level, logger, message, then the
record's structured fields as ``key=value``). ``json`` is one JSON object per
line: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, every
structured field a log call passed in ``extra=`` (``table``, ``offset``,
``event``, ...) and ``exception`` when there is one. Log lines go to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

SERVICE_LEVEL = "info"  # the default of the long-running commands (arbiter, consumer, compactor, up, ...)
COMMAND_LEVEL = "warning"  # the default of the one-shot commands (tables, history, ...): their output is the answer

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a log call passed with ``extra=``."""
    return {key: value for key, value in vars(record).items() if key not in _STANDARD and not key.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in fields_of(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """The classic line, then the structured fields as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = fields_of(record)
        if not fields:
            return line
        extra = " ".join(f"{k}={json.dumps(v, default=str, separators=(',', ':'))}" for k, v in fields.items())
        head, sep, rest = line.partition("\n")  # keep a traceback below the fields
        return f"{head} {extra}{sep}{rest}"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record (a test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Route the root logger to stderr at ``level`` in ``fmt`` (replacing an earlier configuration of ours)."""
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    if fmt.lower() not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt.lower() == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):  # ours from an earlier call, or a basicConfig of a script; a host's stay
        if isinstance(old, _StderrHandler) or type(old) is logging.StreamHandler:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("py4j").setLevel(max(logging.WARNING, root.level))  # Spark's gateway chatters at DEBUG


__all__ = ["FORMATS", "LEVELS", "JsonFormatter", "TextFormatter", "configure_logging", "fields_of"]
