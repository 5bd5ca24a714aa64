"""How every ``ordo`` command logs: ``--log-level`` and ``--log-format text|json`` (``ORDO_LOG_LEVEL``, ``ORDO_LOG_FORMAT``).

``text`` is one human line per record (time, level, logger, message, then the
record's structured fields as ``key=value``). ``json`` is one JSON object per
line: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, every
structured field a log call passed in ``extra=`` (``table``, ``offset``,
``event``, ...) and ``exception`` when there is one. Log lines go to stderr.

With ``json``, the ``ordo`` program also reads back what would reach its
stderr past logging (librdkafka's own lines, Python's warnings and tracebacks,
Spark's JVM: ``kernel.streams``), so that every line it writes is one JSON
object; the lines a service prints on stdout for scripts (``ORDO_CATALOG_URL=``,
``ordo up``'s settings) are JSON objects too (``service_echo``).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ordo.kernel.streams import capture_stderr, original_stderr

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
    """Writes to whatever ``sys.stderr`` is at the time of the record (a test runner swaps it), or to the original
    stderr while file descriptor 2 is read back as records (``kernel.streams``)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return original_stderr() or sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_logging(level: str = "info", fmt: str = "text", *, program: bool = False) -> None:
    """Route the root logger to stderr at ``level`` in ``fmt`` (replacing an earlier configuration of ours).

    ``program``: this process is the ``ordo`` program (not a host that runs ordo's code): with ``json``, what
    reaches its stderr past logging is read back as records too (``kernel.streams.capture_stderr``).
    """
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    if fmt.lower() not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    json_lines = fmt.lower() == "json"
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    root.addHandler(handler)  # before the old one goes: a record is never left without a handler
    for old in list(root.handlers):  # ours from an earlier call, or a basicConfig of a script; a host's stay
        if old is not handler and (isinstance(old, _StderrHandler) or type(old) is logging.StreamHandler):
            root.removeHandler(old)
    root.setLevel(level.upper())
    logging.getLogger("py4j").setLevel(max(logging.WARNING, root.level))  # Spark's gateway chatters at DEBUG
    _CURRENT["format"] = fmt.lower()
    if json_lines:
        logging.captureWarnings(True)  # warnings.warn: one record of py.warnings, not two raw lines
        if program:
            capture_stderr()


_CURRENT = {"format": "text"}


def current_format() -> str:
    """The format ``configure_logging`` set last (``text`` before any call)."""
    return _CURRENT["format"]


def service_echo(fmt: str, logger: str) -> Callable[[str], None]:
    """How a service prints a line for people and scripts on stdout (``ORDO_CATALOG_URL=...``, ``ordo up``'s
    settings): as it is in ``text``; in ``json`` as one JSON object (the line is its ``message``; a line starting
    with ``error:`` or ``WARNING`` at that level), empty lines left out. Never filtered by the log level."""
    import click

    if fmt != "json":
        return click.echo
    formatter = JsonFormatter()

    def echo(line: str) -> None:
        text = line.strip()
        if not text:
            return
        level = logging.ERROR if text.startswith("error:") else logging.WARNING if text.startswith("WARNING") else 20
        click.echo(formatter.format(logging.LogRecord(logger, level, "", 0, "%s", (text,), None)))

    return echo


__all__ = [
    "FORMATS",
    "LEVELS",
    "JsonFormatter",
    "TextFormatter",
    "configure_logging",
    "current_format",
    "fields_of",
    "service_echo",
]
