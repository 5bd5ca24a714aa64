"""A transaction's lifecycle: pinned to a snapshot, one operation staged, then published or given up.

``Lifecycle`` holds the state machine (open, staged, committed, aborted,
failed, unknown) and the staged files, and commits them through the one
commit path (``producer.commit``: what it staged is a ``Change``);
``producer.transaction.Transaction`` adds the operations that stage data.

1. ``begin()`` pins the catalog's head version: the snapshot the transaction
   reads (UPDATE, DELETE and compactions read it) and its read version.
2. An operation stages data: Spark writes Parquet files at their final paths
   under the table location (invisible to readers until a commit names them).
3. ``commit()`` publishes a ``CommitIntent`` and waits for the arbiter's
   decision. Accepted: it waits until the catalog has the new version, so a
   ``read()`` right after sees it. Rejected: the staged files are deleted and
   ``CommitConflictError`` is raised. A retry follows the one policy
   (``producer.commit``; docs/writer.md, "Retries").
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from ordo.kernel.errors import CommitTimeoutError
from ordo.producer.commit import Change, Committer, check_retries, new_txn_id
from ordo.producer.data import InvalidOperationError
from ordo.producer.results import CommitResult, TransactionStateError, conflict_error
from ordo.schemas import CommitIntent, DataFile, Operation, TableMetadata
from ordo.schemas.models import MAX_FILES_PER_INTENT
from ordo.schemas.operations import ROW_ID_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ordo.producer.data import Layout
    from ordo.producer.filewriter import FileWriter
    from ordo.producer.handle import TableHandle

log = logging.getLogger("ordo.producer")

_OPEN, _STAGED, _COMMITTED, _ABORTED, _FAILED, _UNKNOWN = "open", "staged", "committed", "aborted", "failed", "unknown"


class Lifecycle:
    """A transaction's state, pinned snapshot, staged files and commit (``Transaction`` stages data).

    Leaving a ``with`` block without commit, or ``abort()``, deletes the staged
    files. When ``commit()`` times out the outcome is unknown: the files are
    kept and ``commit()`` may be called again (the same txn id always gets the
    same decision).
    """

    def __init__(
        self, table: TableHandle, read_version: int, *, app_id: str | None = None, batch_id: int | None = None
    ) -> None:
        if (app_id is None) != (batch_id is None):
            raise ValueError("app_id and batch_id go together")
        self.table = table
        self.read_version = read_version
        self.app_id = app_id
        self.batch_id = batch_id
        self.txn_id = new_txn_id()
        self.operation: Operation | None = None
        self.partitions: tuple[dict[str, str], ...] | None = None
        self.added_files: tuple[DataFile, ...] = ()
        self.removed_files: tuple[str, ...] = ()
        self.operation_metrics: dict[str, int] = {}  # a MERGE's rows as it counted them (since 0.5)
        # mergeSchema/overwriteSchema: the table's metadata after the write, its files' layout (None: the table's)
        self.metadata: TableMetadata | None = None
        self._layout: Layout | None = None
        self.write_seconds = 0.0
        self.timings: dict[str, float] = {}
        self.result: CommitResult | None = None
        self._state = _OPEN
        self._noop = False
        self._writer: FileWriter | None = None
        self._snapshot: Any = None
        self._row_writes = 0
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        op = self.operation.value if self.operation else None
        return f"Transaction({self.table.name!r}, txn_id={self.txn_id!r}, read_version={self.read_version}, {op}, {self._state})"

    @property
    def layout(self) -> Layout:
        """The layout this transaction writes with: the table's, or after its schema change."""
        return self._layout if self._layout is not None else self.table.layout

    def _evolve(self, df: DataFrame, *, merge: bool = False, replace: bool = False) -> None:
        """Adopt the schema ``df`` brings (``producer.data.evolved_metadata``): published with the files."""
        from ordo.producer.data import Layout, evolved_metadata

        new = evolved_metadata(self.table.metadata, df.schema.fields, merge=merge, replace=replace)
        if new is not None:
            self.metadata, self._layout = new, Layout.of(self.table.name, new)

    @property
    def state(self) -> str:
        """open, staged, committed, aborted, failed (rejected), or unknown (commit timed out)."""
        return self._state

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._state in (_OPEN, _STAGED):
            self.abort()

    # ------------------------------------------------------------------ staging helpers

    def _start(self, operation: Operation) -> None:
        if self._state != _OPEN:
            raise TransactionStateError(
                f"transaction {self.txn_id} is {self._state}: a transaction holds exactly one operation "
                f"(already {self.operation.value if self.operation else 'done'}); begin() another"
            )
        self.operation = operation

    @contextlib.contextmanager
    def _stage(self, operation: Operation) -> Iterator[None]:
        """Run one operation's staging; if it fails, delete what it wrote and leave the transaction open."""
        with self._lock:
            self._start(operation)
            try:
                yield
            except BaseException:
                self._discard()
                self.operation = None
                self.metadata = self._layout = None
                raise

    def row_id_prefix(self) -> str:
        """A new prefix for a keyless table's new row ids (``producer.data.with_row_ids``): unique per call."""
        self._row_writes += 1
        return f"{self.txn_id}:{self._row_writes}:"

    def _user_rows(self, df: DataFrame) -> DataFrame:
        """``df`` conformed to the table as users write it, with new row ids for a keyless table."""
        from ordo.producer.data import conform, fillable, with_row_ids

        layout = self.layout
        return with_row_ids(conform(df, layout.user_schema(), fill=fillable(layout)), layout, self.row_id_prefix())

    def _file_writer(self) -> FileWriter:
        from ordo.producer.filewriter import FileWriter

        if self._writer is None:
            self._writer = FileWriter(self.table.spark, self.layout, self.txn_id)
        return self._writer

    def _staged(
        self,
        files: Sequence[DataFile],
        partitions: Sequence[Mapping[str, str]] | None,
        removed: Sequence[str] = (),
        noop: bool = False,
    ) -> Self:
        if len(files) > MAX_FILES_PER_INTENT:
            raise InvalidOperationError(
                f"the write produced {len(files)} files, more than the {MAX_FILES_PER_INTENT} one commit may add; "
                "write fewer partitions per transaction (or raise ordo.max_records_per_file)"
            )
        self.added_files = tuple(files)
        self.removed_files = tuple(removed)
        self.partitions = None if partitions is None else tuple(dict(p) for p in partitions)
        self._noop = noop
        self._state = _STAGED
        return self

    def _write(self, records: DataFrame, **options: Any) -> list[DataFile]:
        stats = self._file_writer().write(records, **options)
        self.write_seconds += stats.spark_seconds + stats.finish_seconds + stats.validate_seconds
        if stats.validate_seconds:
            self._time("validate", stats.validate_seconds)
        self._time("spark_write", stats.spark_seconds)
        self._time("finish_files", stats.finish_seconds)
        return list(stats.files)

    def _time(self, phase: str, seconds: float) -> None:
        self.timings[phase] = self.timings.get(phase, 0.0) + seconds

    def _write_upserts(self, rows: DataFrame, static: Mapping[str, str] | None = None) -> list[DataFile]:
        """``rows`` checked (``data.validate_records``: keys, partition values) and written as upsert records; a
        driver-side write checks the rows it collects, with no collection of its own (``FileWriter.write``)."""
        from ordo.producer.data import RecordCheck, upsert_records

        return self._write(upsert_records(rows), check=RecordCheck(self.layout, static))

    def _validate(self, rows: DataFrame, static: Mapping[str, str] | None = None, *, keys: bool | None = None) -> None:
        from ordo.producer.data import validate_records

        started = time.perf_counter()
        validate_records(rows, self.layout, static, keys=keys)
        seconds = time.perf_counter() - started
        self.write_seconds += seconds
        self._time("validate", seconds)

    def _static(self, partition: Mapping[str, Any] | None) -> dict[str, str] | None:
        from ordo.producer.data import canonical_partition

        if partition is None:
            return None
        return canonical_partition(self.table.spark, self.table.layout, partition)

    def _partitions_of(self, files: Sequence[DataFile]) -> list[dict[str, str]] | None:
        columns = self.table.layout.partition_columns
        if not columns:
            return None
        seen: dict[tuple[str, ...], dict[str, str]] = {}
        for f in files:
            seen.setdefault(tuple(f.partition[c] for c in columns), dict(f.partition))
        return [seen[k] for k in sorted(seen)]

    def pinned_snapshot(self) -> Any:
        """The catalog snapshot at ``read_version`` (live files with their added versions)."""
        if self._snapshot is None:
            self._snapshot = self.table._conn.catalog.snapshot(self.table.name, version=self.read_version)
        return self._snapshot

    def read(self, partition: Mapping[str, Any] | None = None) -> DataFrame:
        """The table at the pinned version, as this transaction sees it (only ``partition``'s files when given)."""
        df = self._read_pinned(self._static(partition))
        return df.drop(ROW_ID_COLUMN) if self.table.layout.keyless else df

    def _read_pinned(self, static: Mapping[str, str] | None) -> DataFrame:
        return self._read_in(None if static is None else [static])

    def _read_in(self, partitions: Sequence[Mapping[str, str]] | None) -> DataFrame:
        """The pinned snapshot, only the files of ``partitions`` (canonical) when given."""
        from ordo.consumer.spark import read_snapshot

        snapshot = self.pinned_snapshot()
        if partitions is not None:
            wanted = [dict(p) for p in partitions]
            files = tuple(f for f in snapshot.files if dict(f.partition) in wanted)
            snapshot = dataclasses.replace(snapshot, files=files)
        return read_snapshot(self.table.spark, snapshot)

    # ------------------------------------------------------------------ commit

    def change(self) -> Change:
        """What this transaction did: the staged operation, files and scope (``producer.commit``)."""
        if self.operation is None:
            raise TransactionStateError(f"transaction {self.txn_id} has no operation staged")
        return Change(
            table=self.table.name,
            operation=self.operation,
            partitions=self.partitions,
            added_files=self.added_files,
            removed_files=self.removed_files,
            metadata=self.metadata,
            app_id=self.app_id,
            batch_id=self.batch_id,
            writer=self.table._writer,
            operation_metrics=self.operation_metrics,
        )

    def intent(self) -> CommitIntent:
        """The intent ``commit()`` publishes (the staged operation and files)."""
        return self.change().intent(self.txn_id, self.read_version)

    def commit(self, timeout: float | None = None, *, retries: int = 0) -> CommitResult | None:
        """Publish the intent, wait for the decision, then for the catalog to show the new version.

        Returns the ``CommitResult``, or None for a no-op (nothing to insert or
        compact: nothing is published). Raises ``CommitConflictError`` on a
        rejection (staged files deleted), ``CommitTimeoutError`` when no
        decision came (files kept; call ``commit()`` again), and
        ``CatalogLagError`` when the commit was accepted but the catalog lags.
        ``retries`` (INSERT INTO only) re-pins and republishes the same files
        after a CONFLICT_LATER_FAILS rejection, at most that many times
        (``producer.commit``: the one retry policy).
        """
        with self._lock:
            if self._state == _COMMITTED:
                return self.result
            if self._state not in (_STAGED, _UNKNOWN):
                raise TransactionStateError(f"transaction {self.txn_id} is {self._state}; nothing to commit")
            check_retries(self.operation, retries)
            if self._noop:
                self._state = _COMMITTED
                self._writer = None
                return None
            return self._publish(self.table._committer(timeout), retries)

    def _publish(self, committer: Committer, retries: int) -> CommitResult:
        try:
            decided = committer.decide(
                self.change(), self.txn_id, self.read_version, retries=retries, repinned=self._repinned
            )
        except CommitTimeoutError:
            self._state = _UNKNOWN  # maybe accepted: keep the files, let the caller retry commit()
            raise
        if not decided.decision.accepted:
            self._discard()
            self._state = _FAILED
            what = f"{self.operation.value if self.operation else 'txn'} {self.txn_id}"
            raise conflict_error(decided.decision, what)
        result = decided.result(self.write_seconds)
        self._state = _COMMITTED
        self.result = result
        if self.metadata is not None:  # the schema this commit changed is the handle's from now on
            self.table._set_metadata(self.metadata)
        self._writer = None
        self._time("publish_decision", result.commit_seconds)
        started = time.perf_counter()
        committer.visible(self.table.name, result.id_version, result)
        self._time("catalog_wait", time.perf_counter() - started)
        return result

    def _repinned(self, txn_id: str, read_version: int) -> None:
        """A conflict retry's new txn id and pin (same files): the snapshot read at the old pin is dropped."""
        self.txn_id, self.read_version, self._snapshot = txn_id, read_version, None

    def _discard(self) -> None:
        if self._writer is not None:
            self._writer.cleanup()
            self._writer = None

    def abort(self) -> None:
        """Give the transaction up and delete its staged files (not after a commit that timed out)."""
        with self._lock:
            if self._state == _UNKNOWN:
                log.warning(
                    "txn %s: commit outcome unknown (timed out); keeping its files. Call commit() to learn it.",
                    self.txn_id,
                )
                return
            if self._state in (_COMMITTED, _ABORTED, _FAILED):
                return
            self._discard()
            self._state = _ABORTED
