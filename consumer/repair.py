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
record. With a running consumer the rebuild runs inside it (its HTTP service,
``POST /tables/{table}/repair``; ``ORDO_CATALOG=http://...``) while it keeps
materializing and serving every other table. On a catalog file no consumer
has open (``consumer_lock``), ``repair_offline`` does the same in the calling
process.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer.errors import CatalogError
from consumer.store import CatalogWriter, LogRecord, StreamState
from ordo.errors import TableNotFoundError
from ordo.settings import Settings
from schemas import decisions_topic

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
def consumer_lock(catalog: str | Path, *, exclusive: bool) -> Iterator[None]:
    """Shared: held by every running consumer of ``catalog``. Exclusive: an offline repair (fails at once if held)."""
    fd = os.open(lock_path(catalog), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX | fcntl.LOCK_NB) if exclusive else fcntl.LOCK_SH)
        except BlockingIOError:
            raise RepairError(
                f"a consumer is running on {catalog}: repair through it instead "
                "(ORDO_CATALOG=<its http:// URL> ordo repair TABLE), or stop it first"
            ) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def build_fresh(settings: Settings, table: str, path: str | Path, timeout: float = READ_TIMEOUT) -> StreamState:
    """Materialize ``table`` alone from its decisions log (offset 0 to the end) into a new catalog at ``path``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

    topic = decisions_topic(settings.topic_prefix, table)
    writer = CatalogWriter(path, settings.topic_prefix)
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"{settings.topic_prefix}.repair",  # never joined: assign() only
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
                records.append(LogRecord(table, offset, stamp if stamp >= 0 else None, message.value()))
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
    """A temporary directory next to the catalog file (same filesystem), removed afterwards."""
    parent = Path(catalog).absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=".ordo-repair-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def repair_offline(settings: Settings, table: str, timeout: float = READ_TIMEOUT) -> RepairResult:
    """Repair ``table`` in the catalog file of ``settings`` while no consumer has it open."""
    catalog = settings.catalog
    if not Path(catalog).exists():
        raise RepairError(f"no catalog file {catalog}: start the consumer, it builds every table from the log")
    with consumer_lock(catalog, exclusive=True), scratch_dir(catalog) as scratch:
        fresh = scratch / "table.db"
        build_fresh(settings, table, fresh, timeout)
        writer = CatalogWriter(catalog, settings.topic_prefix)
        try:
            state = writer.replace_table(table, fresh)
        finally:
            writer.close()
    log.info("table %s: re-materialized from its decisions log (%s)", table, RepairResult.of(state))
    return RepairResult.of(state)


__all__ = [
    "RepairError",
    "RepairResult",
    "build_fresh",
    "consumer_lock",
    "lock_path",
    "repair_offline",
    "scratch_dir",
]
