"""``Catalog``: the one read interface over the consumer's catalog, local or over HTTP.

``Catalog(location)`` opens the SQLite file or the PostgreSQL database
(``postgresql://...``) directly, or talks to the consumer's HTTP service when
``location`` starts with ``http://`` or ``https://``; the default is
``ORDO_CATALOG``. Both return the same models
(``consumer.models``) and raise the same errors:

* ``ordo.errors.TableNotFoundError`` for a table the catalog does not know;
* ``ordo.errors.VersionNotFoundError`` for an ID version not materialized (yet)
  or a timestamp before the table was created;
* ``consumer.errors.CatalogUnavailableError`` when the file or service is missing.

Semantics (see docs/consumer.md):

* ``snapshot(t, version=v)`` is the live files at ID version v;
  ``snapshot(t, timestamp=T)`` is the snapshot at the highest ID version whose
  time version (own, or inherited by a compaction/clustering) is <= T;
  ``snapshot(t, version=v, groups=[(partition, bucket), ...])`` only those
  (partition, bucket) groups' live files.
* ``commits(t, start, end, by=...)`` is INCLUSIVE on both ends, like Delta's
  change data feed; logical commits only unless ``include_rewrites=True``.
* ``subscribe(t, from_version)`` yields commits with ``id_version >= from_version``
  in order, blocking for new ones: resume with ``last.id_version + 1``.

Thread- and process-safe: each thread gets its own database connection; the
consumers write concurrently (SQLite in WAL mode, or PostgreSQL).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from ordo.consumer import store
from ordo.consumer.errors import CatalogError, CatalogTimeoutError, CatalogUnavailableError, TableBrokenError
from ordo.consumer.groups import Group, check_groups
from ordo.consumer.models import (
    Commit,
    DecisionRecord,
    FileEntry,
    Snapshot,
    TableInfo,
    datetime_to_ms,
    ms_to_datetime,
)
from ordo.consumer.stores import CatalogStore, open_store
from ordo.kernel.errors import TableNotFoundError, VersionNotFoundError
from ordo.schemas import Operation, Outcome, Rebase, TableMetadata
from ordo.schemas.buckets import table_buckets

Timestamp = datetime | str | int
BY_VALUES = ("id", "time")


def to_millis(value: Timestamp, *, ceil: bool = False) -> int:
    """Epoch milliseconds of a timestamp: a datetime (naive = UTC), an ISO-8601 string, or epoch milliseconds.

    ``ceil`` rounds a sub-millisecond datetime up (for the lower bound of a range).
    """
    if isinstance(value, bool):
        raise TypeError("a timestamp must be a datetime, an ISO-8601 string or epoch milliseconds, not a bool")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise ValueError(f"invalid timestamp {value!r}: use ISO 8601, e.g. 2024-01-01T00:00:00Z") from exc
    if isinstance(value, datetime):
        millis = datetime_to_ms(value)
        if ceil and value.microsecond % 1000:
            millis += 1
        return millis
    raise TypeError(
        f"a timestamp must be a datetime, an ISO-8601 string or epoch milliseconds, not {type(value).__name__}"
    )


def _iso_ms(millis: int) -> str:
    value = ms_to_datetime(millis)
    assert value is not None
    return value.isoformat()


def _check_by(by: str) -> str:
    if by not in BY_VALUES:
        raise ValueError(f"by must be 'id' or 'time', not {by!r}")
    return by


class Catalog:
    """Snapshots, time travel, history and change feeds of the tables the consumer materialized.

    ``location``: a SQLite catalog path, a ``postgresql://`` URL, or the
    consumer's ``http://host:port`` URL; default ``ORDO_CATALOG`` (settings ``catalog``).
    """

    def __init__(self, location: str | os.PathLike[str] | None = None, *, timeout: float = 30.0) -> None:
        if location is None:
            from ordo.kernel.settings import load_settings

            location = load_settings().catalog
        self.location = str(location)
        if self.location.startswith(("http://", "https://")):
            from ordo.consumer.httpclient import HttpBackend

            self._backend: Any = HttpBackend(self.location, timeout=timeout)
        else:
            self._backend = LocalBackend(self.location)

    @property
    def is_remote(self) -> bool:
        """True when this catalog talks to the HTTP service."""
        return not isinstance(self._backend, LocalBackend)

    def tables(self) -> list[TableInfo]:
        """Every table with an accepted CREATE_TABLE, by name."""
        return self._backend.tables()  # type: ignore[no-any-return]

    def table(self, name: str) -> TableInfo:
        """Metadata, head and materialization state of ``name``; ``TableNotFoundError`` if unknown."""
        return self._backend.table(name)  # type: ignore[no-any-return]

    def head(self, name: str) -> int:
        """The latest materialized ID version of ``name``."""
        return self.table(name).head_version

    def snapshot(
        self,
        name: str,
        version: int | None = None,
        timestamp: Timestamp | None = None,
        *,
        groups: Sequence[Group] | None = None,
    ) -> Snapshot:
        """The live files of ``name`` at ID ``version``, or as of ``timestamp``, or at the head.

        ``groups``: only the files of these ``(partition, bucket)`` pairs (``bucket``
        None: every bucket of the partition), each looked up by an index, so the
        cost follows those groups' files rather than the table's (the change
        feed's pre-images). ``VersionNotFoundError`` when the version is not
        materialized (yet) or the timestamp lies before the table's creation.
        """
        if version is not None and timestamp is not None:
            raise ValueError("give version or timestamp, not both")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise TypeError(f"version must be an int, not {type(version).__name__}")
        if groups is not None:
            groups = check_groups(groups)
            return self._backend.snapshot(name, version, timestamp, groups)  # type: ignore[no-any-return]
        return self._backend.snapshot(name, version, timestamp)  # type: ignore[no-any-return]

    def history(
        self, name: str, limit: int | None = None, *, accepted_only: bool = False, before: int | None = None
    ) -> list[DecisionRecord]:
        """Every decision of ``name``'s log (accepted and rejected, or only accepted ones), newest first, like
        DESCRIBE HISTORY; with ``limit`` only the ``limit`` newest are read; with ``before`` only those below that
        decisions-log offset (the next page: ``before`` = the ``log_offset`` of the last one of this page)."""
        return self._backend.history(name, limit, accepted_only, before)  # type: ignore[no-any-return]

    def commits(
        self,
        name: str,
        start: int | Timestamp = 0,
        end: int | Timestamp | None = None,
        by: str = "id",
        *,
        include_rewrites: bool = False,
        limit: int | None = None,
    ) -> list[Commit]:
        """Accepted commits with ID version (``by="id"``) or time version (``by="time"``) in ``[start, end]``.

        Both bounds are INCLUSIVE (like Delta's change data feed); ``end=None``
        means the head. By id, ``start`` beyond the head raises
        ``VersionNotFoundError`` and ``end`` beyond it is clamped to it. By time,
        the bounds are timestamps and a range without commits is empty.
        Compaction and clustering (no logical change) are left out unless
        ``include_rewrites``; by time they count at the time they inherit.
        With ``limit`` only the first ``limit`` (by ID version).
        """
        _check_by(by)
        return self._backend.commits(name, start, end, by, include_rewrites, limit)  # type: ignore[no-any-return]

    def subscribe(
        self,
        name: str,
        from_version: int = 0,
        *,
        poll_interval: float = 0.5,
        include_rewrites: bool = False,
        idle_timeout: float | None = None,
    ) -> Iterator[Commit]:
        """Yield accepted commits with ``id_version >= from_version`` in order, blocking for new ones.

        The cursor is the ID version: after a commit with ``id_version = v`` was
        handled, resume with ``subscribe(name, v + 1)`` for no gap and no
        duplicate. Commits skipped by the filter (compactions unless
        ``include_rewrites``) move the cursor silently. Stops after
        ``idle_timeout`` seconds without a new commit (None: never); raises
        ``TableBrokenError`` if the consumer stopped applying the table.
        """
        if from_version < 0:
            raise ValueError("from_version must be >= 0")
        return self._backend.subscribe(name, from_version, poll_interval, include_rewrites, idle_timeout)  # type: ignore[no-any-return]

    def wait_for_version(
        self, name: str, version: int, timeout: float = 30.0, poll_interval: float = 0.02
    ) -> TableInfo:
        """Block until ``name`` is materialized at ``version`` or later (read-your-writes); return its info.

        Waits for the table to appear too. ``CatalogTimeoutError`` after
        ``timeout`` seconds; ``TableBrokenError`` if the table can never get there.
        The catalog is asked again after 1 ms, then twice as long each time, at most ``poll_interval``: a
        writer's commit usually shows within a few milliseconds of its decision, a lagging consumer costs
        few questions.
        """
        deadline = time.monotonic() + timeout
        last: TableInfo | None = None
        pause = min(0.001, poll_interval)
        while True:
            try:
                last = self.table(name)
            except (TableNotFoundError, CatalogUnavailableError):
                last = None
            if last is not None:
                if last.head_version >= version:
                    return last
                if last.error is not None:
                    raise TableBrokenError(
                        f"table {name!r} is stuck at version {last.head_version} "
                        f"(decision log offset {last.error_offset}): {last.error}",
                        last.error,
                    )
            if time.monotonic() >= deadline:
                at = "does not exist yet" if last is None else f"is at version {last.head_version}"
                raise CatalogTimeoutError(
                    f"table {name!r} {at}, not {version}, after {timeout:g} s (is the consumer running and caught up?)"
                )
            time.sleep(pause)
            pause = min(pause * 2, poll_interval)

    def health(self) -> dict[str, Any]:
        """Materialization state of every followed log: ``{"tables": {...}, "broken": {table: error}}``."""
        return self._backend.health()  # type: ignore[no-any-return]

    def close(self) -> None:
        """Release connections (also done at garbage collection)."""
        self._backend.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Catalog({self.location!r})"


# ---------------------------------------------------------------------- local (SQLite/PostgreSQL) backend


class LocalBackend:
    """Reads the catalog database directly (SQLite file or PostgreSQL); one connection per thread (and per process)."""

    def __init__(self, path: str) -> None:
        self.store: CatalogStore = open_store(path)
        self.path = self.store.describe()
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        if not self.store.exists():
            raise CatalogUnavailableError(
                f"catalog file {self.path} does not exist (start the consumer: ordo consumer, or set ORDO_CATALOG)"
            )
        conn = self.store.connect(readonly=True)
        self._local.conn = conn
        self._local.pid = os.getpid()
        with self._lock:
            self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                try:
                    conn.close()
                except Exception:  # closing from another thread may fail; the connection dies with it
                    pass
            self._all.clear()
        self._local = threading.local()

    # -- helpers -------------------------------------------------------------------------

    def _read(self) -> _ReadTxn:
        return _ReadTxn(self.store, self._conn())

    def _row(self, conn: Any, name: str, *, created: bool = True) -> store.TableRow:
        row = store.query_table(conn, name)
        if row is None or (created and row.metadata_json is None):
            names = [r.name for r in store.query_tables(conn)]
            known = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "") if names else "none"
            if row is None:
                raise TableNotFoundError(f"table {name!r} is not in the catalog {self.path} (tables: {known})")
            raise TableNotFoundError(f"table {name!r} has a decisions log but no accepted CREATE_TABLE yet")
        return row

    @staticmethod
    def _info(row: store.TableRow) -> TableInfo:
        assert row.metadata_json is not None  # _row(created=True)
        return TableInfo(
            name=row.name,
            metadata=TableMetadata.model_validate_json(row.metadata_json),
            head_version=row.head_version,
            head_time_version=ms_to_datetime(row.head_time_ms),  # type: ignore[arg-type]
            created_time=ms_to_datetime(row.created_time_ms),  # type: ignore[arg-type]
            decisions=row.decisions,
            log_offset=row.next_offset,
            error=row.error,
            error_offset=row.error_offset,
        )

    @staticmethod
    def _files(rows: list[store.FileRow], location: str) -> tuple[FileEntry, ...]:
        prefix = location if location.endswith("/") else location + "/"
        parts: dict[str, dict[str, str]] = {}  # one partition dict per distinct partition (FileEntry shares it)
        result = []
        for r in rows:
            partition = parts.get(r.partition)
            if partition is None:
                partition = parts[r.partition] = json.loads(r.partition)
            path = r.path
            result.append(
                FileEntry(
                    path,
                    prefix + path,
                    partition,
                    r.record_count,
                    r.size_bytes,
                    r.min_key,
                    r.max_key,
                    r.added_version,
                    bool(r.data_change),
                    r.operation,
                    r.bucket,
                    r.seq_version,
                )
            )
        return tuple(result)

    # -- API -------------------------------------------------------------------------------

    def tables(self) -> list[TableInfo]:
        with self._read() as conn:
            return [self._info(row) for row in store.query_tables(conn)]

    def table(self, name: str) -> TableInfo:
        with self._read() as conn:
            return self._info(self._row(conn, name))

    def resolve(
        self, conn: Any, row: store.TableRow, version: int | None, timestamp: Timestamp | None
    ) -> tuple[int, int]:
        """``(id_version, effective_time_ms)`` for a version, a timestamp, or the head."""
        name, table_id, head = row.name, row.id, row.head_version
        if timestamp is not None:
            millis = to_millis(timestamp)
            found = store.query_version_at(conn, table_id, millis)
            if found is None:
                raise VersionNotFoundError(
                    f"timestamp {_iso_ms(millis)} is before table {name!r} was created "
                    f"(valid from {_iso_ms(row.created_time_ms)} on)"  # type: ignore[arg-type]
                )
            return int(found.id_version), int(found.effective_time_ms)
        if version is None:
            version = head
        if version < 0 or version > head:
            raise VersionNotFoundError(
                f"table {name!r} has ID versions 0..{head}; version {version} does not exist"
                + (" (yet)" if version > head else "")
            )
        found = store.query_commit(conn, table_id, version)
        assert found is not None, f"commit row missing for {name} v{version}"
        return int(found.id_version), int(found.effective_time_ms)

    def snapshot(
        self, name: str, version: int | None, timestamp: Timestamp | None, groups: Sequence[Group] | None = None
    ) -> Snapshot:
        with self._read() as conn:
            row = self._row(conn, name)
            id_version, millis = self.resolve(conn, row, version, timestamp)
            at = store.query_metadata_at(conn, row.id, id_version) if id_version < row.head_version else None
            metadata = TableMetadata.model_validate_json(at or row.metadata_json)  # type: ignore[arg-type]
            if groups is None:
                rows = store.query_snapshot_files(conn, row.id, id_version)
            else:
                columns = tuple(metadata.partition_columns)
                every = range(table_buckets(metadata.properties))  # a file in another bucket is never accepted
                rows = []
                for partition, bucket in groups:
                    try:
                        text = store.partition_json(columns, partition)
                    except ValueError as exc:
                        raise ValueError(f"table {name!r}: {exc}") from None
                    for one in every if bucket is None else (bucket,):  # one index range per bucket
                        rows += store.query_group_files(conn, row.id, id_version, text, one)
            files = self._files(rows, metadata.location)
        return Snapshot(name, id_version, ms_to_datetime(millis), metadata, files)  # type: ignore[arg-type]

    def history(
        self, name: str, limit: int | None, accepted_only: bool, before: int | None = None
    ) -> list[DecisionRecord]:
        with self._read() as conn:
            row = self._row(conn, name, created=False)
            rows = store.query_decisions(conn, row.id, limit, accepted_only=accepted_only, before=before)
        return [_decision(name, r) for r in rows]

    def commits(
        self,
        name: str,
        start: int | Timestamp,
        end: int | Timestamp | None,
        by: str,
        include_rewrites: bool,
        limit: int | None = None,
    ) -> list[Commit]:
        with self._read() as conn:
            row = self._row(conn, name)
            table_id, head = row.id, row.head_version
            if by == "id":
                if not isinstance(start, int) or isinstance(start, bool):
                    raise TypeError("by='id' needs integer ID versions")
                if end is not None and (not isinstance(end, int) or isinstance(end, bool)):
                    raise TypeError("by='id' needs integer ID versions")
                high = head if end is None else min(end, head)
                if start < 0 or start > head:
                    raise VersionNotFoundError(
                        f"table {name!r} has ID versions 0..{head}; start version {start} does not exist"
                        + (" (yet)" if start > head else "")
                    )
                if end is not None and end < start:
                    raise ValueError(f"end version {end} is before start version {start}")
                rows = store.query_commits(conn, table_id, "id_version", start, high, include_rewrites, limit)
            else:
                low = to_millis(start, ceil=True)  # type: ignore[arg-type]
                high_ms = 2**62 if end is None else to_millis(end)  # type: ignore[arg-type]
                if high_ms < low:
                    raise ValueError("end timestamp is before start timestamp")
                rows = store.query_commits(conn, table_id, "effective_time_ms", low, high_ms, include_rewrites, limit)
            return self._commits(conn, name, row, rows)

    def _commits(self, conn: Any, name: str, row: store.TableRow, rows: list[store.CommitRow]) -> list[Commit]:
        if not rows:
            return []
        table_id = row.id
        location = TableMetadata.model_validate_json(row.metadata_json).location  # type: ignore[arg-type]
        low, high = rows[0].id_version, rows[-1].id_version
        wanted = {r.id_version for r in rows}
        added: dict[int, list[FileEntry]] = {}
        for entry in self._files(
            [f for f in store.query_added_files(conn, table_id, low, high) if f.added_version in wanted], location
        ):
            added.setdefault(entry.added_version, []).append(entry)
        removed: dict[int, list[str]] = {}
        for gone in store.query_removed_paths(conn, table_id, low, high):
            if gone.removed_version in wanted:
                removed.setdefault(gone.removed_version, []).append(gone.path)
        result = []
        for r in rows:
            version = r.id_version
            result.append(
                Commit(
                    table=name,
                    id_version=version,
                    time_version=ms_to_datetime(r.time_version_ms),
                    timestamp=ms_to_datetime(r.effective_time_ms),  # type: ignore[arg-type]
                    operation=Operation(r.operation),
                    data_change=bool(r.data_change),
                    txn_id=r.txn_id,
                    read_version=r.read_version,
                    rebase=Rebase(r.rebase),
                    partitions=None if r.partitions is None else tuple(json.loads(r.partitions)),
                    writer=r.writer,
                    app_id=r.app_id,
                    batch_id=r.batch_id,
                    intent_offset=r.intent_offset,
                    log_offset=r.log_offset,
                    added_files=tuple(added.get(version, ())),
                    removed_files=tuple(removed.get(version, ())),
                )
            )
        return result

    def subscribe(
        self, name: str, from_version: int, poll_interval: float, include_rewrites: bool, idle_timeout: float | None
    ) -> Iterator[Commit]:
        return _poll_subscription(self, name, from_version, poll_interval, include_rewrites, idle_timeout)

    def health(self) -> dict[str, Any]:
        with self._read() as conn:
            rows = store.query_streams(conn)
        tables = {
            r.name: {
                "created": r.metadata_json is not None,
                "head_version": r.head_version,
                "log_offset": r.next_offset,
                "decisions": r.decisions,
                "error": r.error,
                "error_offset": r.error_offset,
            }
            for r in rows
        }
        return {"tables": tables, "broken": {n: t["error"] for n, t in tables.items() if t["error"]}}


def _poll_subscription(
    backend: Any, name: str, cursor: int, poll_interval: float, include_rewrites: bool, idle_timeout: float | None
) -> Iterator[Commit]:
    """The subscription loop shared by both backends: page through ``commits`` by ID version."""
    page = 500
    last_progress = time.monotonic()
    while True:
        info = backend.table(name)
        head = info.head_version
        if head >= cursor:
            high = min(head, cursor + page - 1)
            yield from backend.commits(name, cursor, high, "id", include_rewrites)
            cursor = high + 1
            last_progress = time.monotonic()
            continue
        if info.error is not None:
            raise TableBrokenError(
                f"table {name!r} is stuck at version {head} (decision log offset {info.error_offset}): {info.error}",
                info.error,
            )
        if idle_timeout is not None and time.monotonic() - last_progress >= idle_timeout:
            return
        time.sleep(poll_interval)


def _decision(name: str, r: store.DecisionRow) -> DecisionRecord:
    return DecisionRecord(
        table=name,
        log_offset=r.log_offset,
        log_timestamp=ms_to_datetime(r.log_timestamp_ms),
        txn_id=r.txn_id,
        outcome=Outcome(r.outcome),
        operation=None if r.operation is None else Operation(r.operation),
        read_version=r.read_version,
        intent_offset=r.intent_offset,
        id_version=r.id_version,
        time_version=ms_to_datetime(r.time_version_ms),
        timestamp=ms_to_datetime(r.effective_time_ms),
        rebase=Rebase(r.rebase),
        reason=r.reason,
        message=r.message,
        conflicting_txn_id=r.conflicting_txn_id,
        conflicting_version=r.conflicting_version,
        writer=r.writer,
        app_id=r.app_id,
        batch_id=r.batch_id,
        duplicate_of=r.duplicate_of,
        partitions=None if r.partitions is None else tuple(json.loads(r.partitions)),
        files_added=r.files_added,
        files_removed=r.files_removed,
        records_added=r.records_added,
        bytes_added=r.bytes_added,
        prev_hash=None if r.prev_hash is None else bytes(r.prev_hash).hex(),
        hash=bytes(r.hash).hex(),
        restore_version=r.restore_version,
        operation_metrics={} if r.operation_metrics is None else json.loads(r.operation_metrics),
    )


class _ReadTxn:
    """``with`` block running its queries in one read transaction (a consistent view)."""

    def __init__(self, catalog_store: CatalogStore, conn: Any) -> None:
        self.store = catalog_store
        self.conn = conn

    def __enter__(self) -> Any:
        self.store.begin_read(self.conn)
        return self.conn

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self.conn.execute("COMMIT" if exc is None else "ROLLBACK")
        if exc is not None and self.store.is_missing_schema(exc):
            # the consumer created the file but not yet its schema (start-up)
            raise CatalogUnavailableError(f"the catalog is not initialized yet ({exc})") from exc


__all__ = ["BY_VALUES", "Catalog", "CatalogError", "LocalBackend", "Timestamp", "to_millis"]
