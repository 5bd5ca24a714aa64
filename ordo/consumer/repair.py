"""``ordo repair TABLE``: drop a table's materialized state and re-materialize it from its decisions log.

The decisions log is the only source of truth; the catalog is a cache of it.
A table the consumer stopped (a record it refuses, a hash-chain break, a log
shorter than the catalog, rows damaged by hand) is repaired by rebuilding it:

1. its decisions log is read from offset 0 to its end into a fresh catalog
   file of its own (the same ``CatalogWriter`` as the consumer: same checks);
2. the table's rows in the catalog are replaced by the fresh ones in one
   SQLite transaction (``CatalogWriter.replace_table``): readers see the old
   state or the rebuilt one, never a mix;
3. the consumer follows the table again from the rebuilt offset.

If the bad record is still in the log, step 1 stops at it again and the table
stays stopped at the same offset with the same reason: a repair never skips a
record. ``repair`` runs it where the catalog's writer is: in the calling
process when no consumer has the catalog file open (``consumer_lock``),
otherwise inside the running consumer, asked through a request file next to
the catalog (``<catalog>.repairs/<table>.request``; the answer comes back as
``<table>.<id>.result``), while it keeps materializing and serving every other
table. The HTTP API stays read-only: a repair needs access to the catalog file.
On a PostgreSQL catalog there is no file to lock: the repair always runs in the
calling process (any host), and the consumers take the swapped rows themselves
(``CatalogWriter.apply`` re-reads each table's row in its transaction).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ordo.consumer.errors import CatalogError
from ordo.consumer.store import CatalogWriter, LogRecord, StreamState
from ordo.consumer.stores import is_postgres
from ordo.kernel.errors import TableNotFoundError
from ordo.kernel.settings import Settings
from ordo.schemas import decisions_topic, validate_table_name

log = logging.getLogger("ordo.consumer.repair")

READ_TIMEOUT = 60.0


class RepairError(CatalogError):
    """Raised when a table cannot be repaired (no decisions log, broker unreachable, catalog in use)."""


@dataclass(frozen=True)
class RepairResult:
    """What a repair left: the table served again (``error`` None) or stopped again at the same record."""

    table: str
    head_version: int
    next_offset: int
    decisions: int
    error: str | None
    error_offset: int | None

    @classmethod
    def of(cls, state: StreamState) -> RepairResult:
        """From the table's stream state after the rebuild."""
        return cls(state.name, state.head_version, state.next_offset, state.decisions, state.error, state.error_offset)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "table": self.table,
            "served": self.error is None,
            "head_version": self.head_version,
            "next_offset": self.next_offset,
            "decisions": self.decisions,
            "error": self.error,
            "error_offset": self.error_offset,
        }


def lock_path(catalog: str | Path) -> str:
    """The lock file a running consumer holds (shared) next to its catalog file."""
    return str(Path(catalog).absolute()) + ".lock"


@contextmanager
def consumer_lock(catalog: str | Path) -> Iterator[None]:
    """Held (shared) by every running consumer of ``catalog``, so ``repair`` knows whether to ask one."""
    fd = os.open(lock_path(catalog), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while an offline repair holds it exclusively
        yield
    finally:
        os.close(fd)  # releases the lock


def _exclusive(catalog: str | Path) -> int | None:
    """An fd holding the catalog's lock exclusively, or None when a consumer holds it."""
    fd = os.open(lock_path(catalog), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def requests_dir(catalog: str | Path) -> Path:
    """Where ``ordo repair`` leaves requests for the consumer running on ``catalog``, and gets the answers."""
    return Path(str(Path(catalog).absolute()) + ".repairs")


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def submit_request(catalog: str | Path, table: str) -> str:
    """Ask the consumer running on ``catalog`` to repair ``table``; returns the request id."""
    directory = requests_dir(catalog)
    directory.mkdir(mode=0o700, exist_ok=True)
    request_id = uuid.uuid4().hex
    _write_atomically(directory / f"{table}.request", request_id)
    return request_id


def take_requests(catalog: str | Path) -> list[tuple[str, str]]:
    """The pending requests ``(table, id)`` for ``catalog`` (each removed as it is taken)."""
    directory = requests_dir(catalog)
    if not directory.is_dir():
        return []
    found = []
    for path in sorted(directory.glob("*.request")):
        table = path.name[: -len(".request")]
        try:
            request_id = path.read_text().strip()
            path.unlink()
        except FileNotFoundError:
            continue
        try:
            validate_table_name(table)
        except ValueError:
            log.warning("ignoring a repair request for %r: not a table name", table)
            continue
        if request_id.isalnum() and len(request_id) <= 64:
            found.append((table, request_id))
    return found


def write_result(catalog: str | Path, table: str, request_id: str, data: dict[str, Any]) -> None:
    """The consumer's answer to request ``request_id``."""
    _write_atomically(requests_dir(catalog) / f"{table}.{request_id}.result", json.dumps(data))


def wait_result(catalog: str | Path, table: str, request_id: str, timeout: float) -> dict[str, Any]:
    """The consumer's answer to ``request_id`` (the file is removed); ``RepairError`` after ``timeout`` seconds."""
    path = requests_dir(catalog) / f"{table}.{request_id}.result"
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RepairError(
                f"the consumer running on {catalog} did not answer the repair of {table!r} within {timeout:g} s "
                "(it picks requests up about once a second; is it still running?)"
            )
        time.sleep(0.1)
    data: dict[str, Any] = json.loads(path.read_text())
    path.unlink(missing_ok=True)
    return data


def build_fresh(settings: Settings, table: str, path: str | Path, timeout: float = READ_TIMEOUT) -> StreamState:
    """Materialize ``table`` alone from its decisions log (offset 0 to the end) into a new catalog at ``path``.

    Only decisions a trusted signature vouches for are applied (``schemas.signing``), as by the consumer.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

    from ordo.kernel.keys import reader_trust
    from ordo.schemas.signing import ChainVerifier, signature_of

    topic = decisions_topic(settings.topic_prefix, table)
    verifier: ChainVerifier[LogRecord] = ChainVerifier(table, reader_trust(settings))
    writer = CatalogWriter(path, settings.topic_prefix)
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"{settings.topic_prefix}.repair",  # never joined: assign() only
                "client.id": f"{settings.topic_prefix}.repair",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",  # what the consumer reads
                "enable.partition.eof": True,
                "allow.auto.create.topics": False,
                "fetch.wait.max.ms": 20,
            }
        )
    )
    try:
        try:
            metadata = consumer.list_topics(timeout=timeout)  # all topics: never creates one by name
        except KafkaException as exc:
            raise RepairError(f"cannot reach the broker to read {topic}: {exc.args[0]}") from exc
        if topic not in metadata.topics:
            raise TableNotFoundError(f"table {table!r} has no decisions log ({topic}): nothing to rebuild it from")
        writer.ensure_stream(table, topic)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while True:
            first = consumer.poll(0.2)
            batch = [] if first is None else [first, *consumer.consume(num_messages=5000, timeout=0)]
            records: list[LogRecord] = []
            ended = False
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        ended = True
                    elif error.fatal():
                        raise RepairError(f"reading {topic}: {error.str()}")
                    continue
                _, stamp = message.timestamp()
                offset = message.offset()
                assert offset is not None  # a fetched record always has one
                record = LogRecord(table, offset, stamp if stamp >= 0 else None, message.value())
                released, refused = verifier.push(offset, message.value(), signature_of(message.headers()), record)
                records.extend(released)
                for refusal in refused:
                    log.error("table %s: decision at offset %d refused: %s", table, refusal.offset, refusal.reason)
            if records:
                writer.apply(records)
                deadline = time.monotonic() + timeout
            state = writer.stream(table)
            assert state is not None
            if ended or state.error is not None:  # stopped at a bad record: the rest cannot be applied anyway
                return state
            if time.monotonic() > deadline:
                raise RepairError(f"reading {topic} did not reach its end within {timeout:g} s")
    finally:
        consumer.close()
        writer.close()


@contextmanager
def scratch_dir(catalog: str | Path) -> Iterator[Path]:
    """A temporary directory next to the catalog file (same filesystem; PostgreSQL: the system's), removed afterwards."""
    if is_postgres(str(catalog)):
        path = Path(tempfile.mkdtemp(prefix="ordo-repair-"))
    else:
        parent = Path(catalog).absolute().parent
        parent.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=".ordo-repair-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def repair(settings: Settings, table: str, timeout: float = 600.0) -> dict[str, Any]:
    """Repair ``table`` in the catalog file of ``settings``: here, or through the consumer running on it.

    Returns ``RepairResult.to_json()``; raises what the repair raised.
    """
    catalog = settings.catalog
    if catalog.startswith(("http://", "https://")):
        raise RepairError(
            "ordo repair needs the catalog file, not the HTTP service (which is read-only): run it on the "
            "consumer's host with ORDO_CATALOG=<the catalog file>"
        )
    validate_table_name(table)
    if is_postgres(catalog):
        # Any host may repair a PostgreSQL catalog: the swap locks the table's row, and the consumer
        # following the table takes the rebuilt state at its next batch (``CatalogWriter.apply``).
        return _repair_here(settings, table, catalog, timeout)
    if not Path(catalog).exists():
        raise RepairError(f"no catalog file {catalog}: start the consumer, it builds every table from the log")
    fd = _exclusive(catalog)
    if fd is None:  # a consumer runs on it: it does the repair while serving the other tables
        data = wait_result(catalog, table, submit_request(catalog, table), timeout)
        if "error_type" in data:
            kind = TableNotFoundError if data["error_type"] == "TableNotFoundError" else RepairError
            raise kind(data["message"])
        return data
    try:
        return _repair_here(settings, table, catalog, timeout)
    finally:
        os.close(fd)


def _repair_here(settings: Settings, table: str, catalog: str, timeout: float) -> dict[str, Any]:
    with scratch_dir(catalog) as scratch:
        fresh = scratch / "table.db"
        build_fresh(settings, table, fresh, min(timeout, READ_TIMEOUT))
        writer = CatalogWriter(catalog, settings.topic_prefix)
        try:
            state = writer.replace_table(table, fresh)
        finally:
            writer.close()
    log.info("table %s: re-materialized from its decisions log (%s)", table, RepairResult.of(state))
    return RepairResult.of(state).to_json()


__all__ = [
    "RepairError",
    "RepairResult",
    "build_fresh",
    "consumer_lock",
    "lock_path",
    "repair",
    "requests_dir",
    "scratch_dir",
    "submit_request",
    "take_requests",
    "wait_result",
    "write_result",
]


class RepairDesk:
    """The running consumer's part that repairs tables while it keeps materializing every other one.

    ``request`` rebuilds a table from its decisions log into a scratch catalog
    on a thread of its own; the loop calls ``swap`` to replace the table's rows
    in one transaction and follow it again, and ``take_requests`` to start the
    repairs ``ordo repair`` asked for through request files.
    """

    def __init__(self, settings: Settings, writer: CatalogWriter, following: Any, status: Any) -> None:
        self.settings = settings
        self.writer = writer
        self.following = following  # consumer.following.Following
        self.status = status
        # Rebuilt tables waiting to be swapped in by the loop: (table, fresh catalog, scratch dir, future).
        self._rebuilt: queue.Queue[tuple[str, Path, Any, Future[Any]]] = queue.Queue()

    @property
    def pending(self) -> bool:
        """True when a rebuilt table waits to be swapped in."""
        return not self._rebuilt.empty()

    def request(self, table: str) -> Future[Any]:
        """Re-materialize ``table`` from its decisions log; a future of its ``RepairResult``."""
        future: Future[Any] = Future()
        future.set_running_or_notify_cancel()

        def build() -> None:
            scratch = scratch_dir(self.writer.path)
            try:
                path = scratch.__enter__()
                build_fresh(self.settings, table, path / "table.db")
            except BaseException as exc:
                scratch.__exit__(None, None, None)
                future.set_exception(exc)
                return
            self._rebuilt.put((table, path / "table.db", scratch, future))

        threading.Thread(target=build, name=f"repair-{table}", daemon=True).start()
        return future

    def take_requests(self) -> None:
        """Start the repairs ``ordo repair`` asked for (request files next to the catalog); answer each in a file."""
        if self.writer.store.shared:  # ``ordo repair`` on a PostgreSQL catalog swaps the rows itself
            return
        try:
            requests = take_requests(self.writer.path)
        except OSError as exc:
            log.warning("cannot read repair requests: %s", exc)
            return
        for table, request_id in requests:
            log.info("table %s: repair requested (%s)", table, request_id)

            def answer(future: Future[Any], table: str = table, request_id: str = request_id) -> None:
                exc = future.exception()
                data = {"error_type": type(exc).__name__, "message": str(exc)} if exc else future.result().to_json()
                try:
                    write_result(self.writer.path, table, request_id, data)
                except OSError:
                    log.exception("table %s: cannot write the repair result", table)

            self.request(table).add_done_callback(answer)

    def swap(self) -> None:
        """Swap in every rebuilt table and follow it again (or report it stopped again)."""
        following = self.following
        while not self._rebuilt.empty():
            table, fresh, scratch, future = self._rebuilt.get()
            topic = decisions_topic(self.settings.topic_prefix, table)
            try:
                following.unfollow(topic)
                state = self.writer.replace_table(table, fresh)
                following.forget(topic)
                self.status.broken.pop(table, None)
                following.discover()  # follows it again from the rebuilt offset, or reports it stopped again
            except BaseException as exc:
                future.set_exception(exc)
                continue
            finally:
                scratch.__exit__(None, None, None)
            log.info("table %s: re-materialized from its decisions log: %s", table, RepairResult.of(state))
            future.set_result(RepairResult.of(state))
