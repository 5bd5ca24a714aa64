"""What a process writes past Python's logging, read back as log records (``--log-format json``).

With ``json`` every line an ordo process writes must be one JSON object, but
some writers never pass through ``logging``: librdkafka prints its own lines
(``%3|1700000000.123|FAIL|rdkafka#producer-1| ...``) from a client created
without ``logger=``, Python prints warnings and tracebacks, and Spark's JVM (and
the Python workers it starts) prints its banner and its log4j lines. They all
write to the process's file descriptors, so ``capture_stderr`` points file
descriptor 2 at a pipe and a thread turns each line read from it into a record
of the ``ordo.stderr`` logger (a librdkafka line: of ``ordo.kafka``, at its own
level); the log handler keeps the original stderr (``original_stderr``).
``child_output`` gives a child started inside the block (the JVM) a pipe of its
own for file descriptors 1 and 2: its lines become records of that child's
logger (``ordo.jvm``), at the level its log4j line names.

A process that is not ordo's command line (a test runner, a notebook) keeps
its descriptors: ``capture_stderr`` does nothing unless ``sys.stderr`` is file
descriptor 2 itself.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any

# librdkafka's own line: %<syslog level>|<seconds>|<facility>|<client name>| <message>
_LIBRDKAFKA = re.compile(r"%(\d)\|[\d.]+\|([A-Z0-9_]+)\|([^|]*)\|\s?(.*)")
_SYSLOG = {0: logging.CRITICAL, 1: logging.CRITICAL, 2: logging.CRITICAL, 3: logging.ERROR, 4: logging.WARNING}
# Spark's log4j pattern: yy/MM/dd HH:mm:ss LEVEL Class: message
_LOG4J = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ([^:]+): (.*)")
_LOG4J_LEVELS = {"TRACE": 5, "DEBUG": 10, "INFO": 20, "WARN": 30, "ERROR": 40, "FATAL": 50}

Parsed = tuple[str, int, str, dict[str, Any]]  # logger, level, message, fields


def stderr_line(line: str) -> Parsed:
    """A line written to stderr as ``(logger, level, message, fields)``: librdkafka's at its syslog level, any
    other at warning (whatever reaches stderr past logging is a warning, an error or a traceback: never dropped
    by a command's default level)."""
    match = _LIBRDKAFKA.fullmatch(line)
    if match is not None:
        severity, facility, client, message = match.groups()
        fields = {"facility": facility, "client": client, "stream": "stderr"}
        return "ordo.kafka", _SYSLOG.get(int(severity), logging.INFO), message, fields
    return "ordo.stderr", logging.WARNING, line, {"stream": "stderr"}


def jvm_line(line: str) -> Parsed:
    """A line of Spark's JVM as ``(logger, level, message, fields)``: a log4j line at its level, else info (warning
    for the JVM's own ``WARNING:`` lines)."""
    match = _LOG4J.fullmatch(line)
    if match is not None:
        level, source, message = match.groups()
        return "ordo.jvm", _LOG4J_LEVELS[level], message, {"source": source.strip()}
    return "ordo.jvm", logging.WARNING if line.startswith("WARNING") else logging.INFO, line, {}


class _LineReader(threading.Thread):
    """Reads a pipe to its end and logs each line through ``parse``."""

    def __init__(self, fd: int, parse: Callable[[str], Parsed], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.fd = fd
        self.parse = parse

    def run(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                self.emit(raw)
        if pending:
            self.emit(pending)
        os.close(self.fd)

    def emit(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if not line.strip():
            return
        logger, level, message, fields = self.parse(line)
        logging.getLogger(logger).log(level, "%s", message, extra=fields)


class _Capture:
    """The state of ``capture_stderr``: the original stderr and the thread reading the pipe."""

    def __init__(self) -> None:
        self.original: IO[str] | None = None
        self.reader: _LineReader | None = None
        self.lock = threading.Lock()


_CAPTURE = _Capture()


def original_stderr() -> IO[str] | None:
    """The process's stderr as it was before ``capture_stderr`` (where log lines go), or None when not captured."""
    return _CAPTURE.original


def capturing() -> bool:
    """True while file descriptor 2 is read back as log records."""
    return _CAPTURE.original is not None


def _is_own_stderr() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a test runner's or a notebook's stream
        return False


def capture_stderr() -> bool:
    """Read file descriptor 2 back as log records from now on (once; a process's own stderr only).

    Returns True when it is captured. Uncaught exceptions become one record each (with the traceback in it)
    rather than one per line of the traceback.
    """
    with _CAPTURE.lock:
        if _CAPTURE.original is not None:
            return True
        if not _is_own_stderr() or not logging.getLogger().handlers:
            return False  # without a handler a record would go to logging's last resort: stderr, the pipe
        sys.stderr.flush()
        _CAPTURE.original = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        _CAPTURE.reader = _LineReader(read, stderr_line, "ordo-stderr")
        _CAPTURE.reader.start()
    sys.excepthook = _log_uncaught
    threading.excepthook = lambda args: _log_uncaught(args.exc_type, args.exc_value, args.exc_traceback)
    atexit.register(release_stderr)
    return True


def _log_uncaught(kind: type[BaseException], value: BaseException | None, tb: Any) -> None:
    error = value if value is not None else kind()
    logging.getLogger("ordo").critical("uncaught %s: %s", kind.__name__, error, exc_info=(kind, error, tb))


def release_stderr(timeout: float = 2.0) -> None:
    """Give file descriptor 2 back and log what the pipe still holds (at exit)."""
    with _CAPTURE.lock:
        original, reader = _CAPTURE.original, _CAPTURE.reader
        if original is None:
            return
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(original.fileno(), 2)  # closes the pipe's last writer of ours: the reader sees its end
    if reader is not None:
        reader.join(timeout)
    with _CAPTURE.lock:
        _CAPTURE.original, _CAPTURE.reader = None, None
    sys.excepthook, threading.excepthook = sys.__excepthook__, threading.__excepthook__
    original.flush()


@contextlib.contextmanager
def child_output(parse: Callable[[str], Parsed] = jvm_line, name: str = "ordo-jvm") -> Iterator[None]:
    """While capturing: a child process started in the block writes its stdout and stderr to a pipe of its own,
    read as records through ``parse`` for as long as the child lives. Otherwise nothing changes."""
    if not capturing():
        yield
        return
    read, write = os.pipe()
    _LineReader(read, parse, name).start()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(write, 1)
    os.dup2(write, 2)
    os.close(write)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


__all__ = [
    "capture_stderr",
    "capturing",
    "child_output",
    "jvm_line",
    "original_stderr",
    "release_stderr",
    "stderr_line",
]
