"""The catalog: schema, the writer that folds decisions in, and the read queries.

One database holds every table of one topic prefix: a SQLite file (WAL mode,
the embedded default) or a PostgreSQL database (``consumer.stores``; the same
SQL, rows and guarantees):

* ``tables``    one row per decisions topic followed: the Kafka offset to resume
                from, the hash of the last applied decision record, the table's
                metadata and head once CREATE_TABLE was accepted, and the error
                that stopped it, if any.
* ``decisions`` every decision record applied, accepted or rejected.
* ``commits``   one row per ID version (accepted, non-duplicate decisions), with
                the time version readers see it at (own or inherited).
* ``files``     one row per file a commit added: ``added_version`` and
                ``removed_version`` (NULL while live). The snapshot at version v
                is ``added_version <= v AND (removed_version IS NULL OR removed_version > v)``.

``CatalogWriter.apply`` folds a batch of decision records in ONE database
transaction that also stores, per table, the next Kafka offset: the catalog
and its position in the log can never disagree, so a consumer killed at any
moment resumes exactly where it stopped. The same transaction first reads
(and on PostgreSQL locks) the ``tables`` rows of the batch's tables and checks
them against the writer's own view: when another consumer (or a repair)
advanced a table meanwhile, the writer takes the stored state and skips what
is already applied. Several consumers may therefore write one catalog, each
following its own tables, and a table's rows are never written twice or out
of order even when two of them follow it at once. See docs/consumer.md.

The read queries at the bottom (``query_*``, used by ``consumer.catalog``)
return named rows: one ``typing.NamedTuple`` per query (``TableRow``,
``FileRow``, ``CommitRow``, ``DecisionRow``, ...) whose fields ARE the query's
column list (``select_list`` builds the SQL from them), made with
``RowType._make`` in the query function, so both stores' rows read the same
(``row.head_version``, never ``row[7]``) and a column added to a query cannot
shift its readers. The writer reads ``tables`` rows the same way (``StreamRow``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from ordo.consumer.commits import apply_decision, insert_decision, partition_json
from ordo.consumer.errors import repair_hint
from ordo.consumer.stores import CatalogStore, Connection, open_store, scalar
from ordo.schemas import Outcome, TableMetadata
from ordo.schemas.decisionlog import GENESIS_HASH, BrokenLogError, LogHead, check

log = logging.getLogger("ordo.consumer.store")

# 2: files.bucket (a version-1 catalog is migrated when a writer opens it); 3: table_metadata; 4: files.seq_version
SCHEMA_VERSION = 5

SCHEMA = """
CREATE TABLE IF NOT EXISTS catalog_info (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tables (
    id              INTEGER PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    topic           TEXT NOT NULL,
    next_offset     INTEGER NOT NULL DEFAULT 0,   -- Kafka offset of the next decision record to apply
    last_hash       BLOB NOT NULL,                -- SHA-256 of the last applied decision record
    decisions       INTEGER NOT NULL DEFAULT 0,   -- decision records applied
    metadata        TEXT,                         -- JSON TableMetadata, NULL until CREATE_TABLE is accepted
    created_time_ms INTEGER,
    head_version    INTEGER NOT NULL DEFAULT -1,
    head_time_ms    INTEGER,                      -- time version of the latest logical commit
    error           TEXT,                         -- why the consumer stopped applying this table
    error_offset    INTEGER,
    updated_ms      INTEGER
);
CREATE TABLE IF NOT EXISTS decisions (
    table_id            INTEGER NOT NULL,
    log_offset          INTEGER NOT NULL,
    log_timestamp_ms    INTEGER,
    txn_id              TEXT NOT NULL,
    outcome             TEXT NOT NULL,
    operation           TEXT,
    read_version        INTEGER,
    intent_offset       INTEGER NOT NULL,
    id_version          INTEGER,
    time_version_ms     INTEGER,
    effective_time_ms   INTEGER,
    rebase              TEXT NOT NULL,
    reason              TEXT,
    message             TEXT,
    conflicting_txn_id  TEXT,
    conflicting_version INTEGER,
    writer              TEXT,
    app_id              TEXT,
    batch_id            INTEGER,
    duplicate_of        INTEGER,
    partitions          TEXT,
    files_added         INTEGER NOT NULL,
    files_removed       INTEGER NOT NULL,
    records_added       INTEGER NOT NULL,
    bytes_added         INTEGER NOT NULL,
    prev_hash           BLOB,
    hash                BLOB NOT NULL,
    restore_version     INTEGER,                  -- RESTORE: the version restored to (catalog schema 4)
    operation_metrics   TEXT,                     -- JSON object of the writer's metrics, NULL for none (schema 5)
    PRIMARY KEY (table_id, log_offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS commits (
    table_id          INTEGER NOT NULL,
    id_version        INTEGER NOT NULL,
    log_offset        INTEGER NOT NULL,
    time_version_ms   INTEGER,                    -- own time version, NULL for compaction/clustering
    effective_time_ms INTEGER NOT NULL,           -- own or inherited time version
    operation         TEXT NOT NULL,
    data_change       INTEGER NOT NULL,
    PRIMARY KEY (table_id, id_version)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS commits_time ON commits (table_id, effective_time_ms, id_version);
CREATE TABLE IF NOT EXISTS files (
    id              INTEGER PRIMARY KEY,
    table_id        INTEGER NOT NULL,
    path            TEXT NOT NULL,                -- relative to the table location
    partition       TEXT NOT NULL,                -- JSON object in partition-column order ('{}' if unpartitioned)
    record_count    INTEGER NOT NULL,
    size_bytes      INTEGER NOT NULL,
    min_key         TEXT,
    max_key         TEXT,
    added_version   INTEGER NOT NULL,             -- = the sequence number of its records without _ordo_seq
    removed_version INTEGER,                      -- NULL while live
    data_change     INTEGER NOT NULL,             -- the adding commit changed logical data
    operation       TEXT NOT NULL,                -- the adding commit's operation
    bucket          INTEGER NOT NULL DEFAULT 0,   -- DataFile.bucket (0 for unbucketed tables)
    seq_version     INTEGER                       -- a file a RESTORE re-added: its records' sequence (NULL: added_version)
);
CREATE UNIQUE INDEX IF NOT EXISTS files_live_path ON files (table_id, path) WHERE removed_version IS NULL;
CREATE INDEX IF NOT EXISTS files_removed ON files (table_id, removed_version, added_version);
CREATE INDEX IF NOT EXISTS files_added ON files (table_id, added_version);
CREATE TABLE IF NOT EXISTS table_metadata (
    table_id    INTEGER NOT NULL,
    id_version  INTEGER NOT NULL,                 -- the metadata holds from this ID version on
    metadata    TEXT NOT NULL,                    -- JSON TableMetadata
    PRIMARY KEY (table_id, id_version)
) WITHOUT ROWID;
"""


# The live files of one (partition, bucket) at a version, for the change feed's pre-images
# (``query_group_files``). Created on every writer start, after a version-1 catalog got its bucket column;
# a catalog no writer opened since has no such index and answers the same, by a scan of the table's files.
GROUP_INDEX = (
    "CREATE INDEX IF NOT EXISTS files_group ON files (table_id, partition, bucket, removed_version, added_version)"
)


class StreamRow(NamedTuple):
    """A ``tables`` row as the writer reads it (``_STREAM_COLUMNS``)."""

    id: int
    name: str
    topic: str
    next_offset: int
    last_hash: bytes
    decisions: int
    metadata_json: str | None  # the ``metadata`` column
    created_time_ms: int | None
    head_version: int
    head_time_ms: int | None
    error: str | None
    error_offset: int | None
    last_intent_offset: int | None  # of the last decision applied (None before the first)


def select_list(row_type: type[tuple[Any, ...]], **expressions: str) -> str:
    """The SELECT list of a NamedTuple row type: its field names in order, or ``<expression> AS <field>``.

    The row types below are the one statement of each query's columns: their SQL
    is built from the fields, and the query functions hand out rows of them
    (``RowType._make(row)``), so no reader indexes a row by position.
    """
    fields: tuple[str, ...] = row_type._fields  # type: ignore[attr-defined]
    unknown = set(expressions) - set(fields)
    assert not unknown, f"{row_type.__name__} has no field {sorted(unknown)}"
    return ", ".join(f"{expressions[f]} AS {f}" if f in expressions else f for f in fields)


# The last column: the intent offset of the last decision applied (the decisions table's primary key finds it).
_STREAM_COLUMNS = select_list(
    StreamRow,
    metadata_json="metadata",
    last_intent_offset="(SELECT d.intent_offset FROM decisions d WHERE d.table_id = tables.id"
    " ORDER BY d.log_offset DESC LIMIT 1)",
)


def _stream_state(row: StreamRow) -> StreamState:
    """The ``StreamState`` of a ``tables`` row selected with ``_STREAM_COLUMNS``."""
    head = LogHead(
        table=row.name,
        chain=bytes(row.last_hash),
        last_intent_offset=-1 if row.last_intent_offset is None else row.last_intent_offset,
        version=row.head_version,
        time_ms=row.head_time_ms,
        metadata=TableMetadata.model_validate_json(row.metadata_json) if row.metadata_json else None,
        decisions=row.decisions,
    )
    return StreamState(
        table_id=row.id,
        name=row.name,
        topic=row.topic,
        head=head,
        next_offset=row.next_offset,
        metadata_json=row.metadata_json,
        created_time_ms=row.created_time_ms,
        error=row.error,
        error_offset=row.error_offset,
    )


def _streams(conn: Connection, where: str = "", parameters: Sequence[Any] = ()) -> list[StreamRow]:
    """The ``tables`` rows ``where`` selects (a SQL suffix: ``WHERE ...``, ``ORDER BY``, a lock)."""
    rows = conn.execute(f"SELECT {_STREAM_COLUMNS} FROM tables{where}", parameters).fetchall()
    return list(map(StreamRow._make, rows))


class LogRecord(NamedTuple):
    """One record of a decisions topic, as the materializer hands it to the writer."""

    table: str
    offset: int
    timestamp_ms: int | None
    value: bytes | None


@dataclass(slots=True)
class StreamState:
    """The writer's in-memory mirror of one ``tables`` row: the log's head (``schemas.decisionlog``) and more."""

    table_id: int
    name: str
    topic: str
    head: LogHead  # the fold of the log applied so far: chain, last intent offset, versions, metadata, count
    next_offset: int = 0
    metadata_json: str | None = None
    created_time_ms: int | None = None
    error: str | None = None
    error_offset: int | None = None

    @property
    def created(self) -> bool:
        """True once CREATE_TABLE was applied."""
        return self.head.created

    @property
    def last_hash(self) -> bytes:
        """The hash of the last decision record applied (``GENESIS_HASH`` before the first)."""
        return self.head.chain

    @property
    def decisions(self) -> int:
        """Decision records applied."""
        return self.head.decisions

    @property
    def metadata(self) -> TableMetadata | None:
        """The table's metadata at its head version (None before CREATE_TABLE)."""
        return self.head.metadata

    @property
    def head_version(self) -> int:
        """The head ID version (-1 before CREATE_TABLE)."""
        return self.head.version

    @property
    def head_time_ms(self) -> int | None:
        """The time version of the latest logical commit."""
        return self.head.time_ms


@dataclass
class ApplyResult:
    """What one ``apply`` call did."""

    applied: int = 0
    skipped: int = 0
    commits: int = 0
    broken: list[tuple[str, int, str]] = field(default_factory=list)  # (table, offset, error)
    touched: set[str] = field(default_factory=set)


class _Retry(Exception):
    """Internal: the fast attempt at a batch met an inconsistent decision; apply it again, carefully."""


def connect(location: str | Path, *, readonly: bool = False) -> Connection:
    """An autocommit connection to the catalog (a SQLite file in WAL mode, or PostgreSQL); readers never create it."""
    return open_store(location).connect(readonly=readonly)


def init_schema(store: CatalogStore, conn: Connection, topic_prefix: str) -> None:
    """Create or migrate the catalog's tables to ``SCHEMA_VERSION`` and claim it for ``topic_prefix``, at once."""
    store.begin_write(conn)
    try:
        store.lock_schema(conn)
        version = store.schema_version(conn)
        if version not in (0, 1, 2, 3, 4, SCHEMA_VERSION):
            raise RuntimeError(
                f"catalog {store.describe()} has schema version {version}; this build reads {SCHEMA_VERSION}"
            )
        for statement in store.schema_statements(SCHEMA):
            conn.execute(statement)
        if version == 1:  # written before DataFile.bucket: every file it holds is in bucket 0
            conn.execute("ALTER TABLE files ADD COLUMN bucket INTEGER NOT NULL DEFAULT 0")
        if version in (1, 2, 3) and not _has_column(conn, "files", "seq_version"):
            conn.execute("ALTER TABLE files ADD COLUMN seq_version INTEGER")  # before RESTORE (0.4): none re-added
        if version in (1, 2, 3) and not _has_column(conn, "decisions", "restore_version"):
            conn.execute("ALTER TABLE decisions ADD COLUMN restore_version INTEGER")
        if version in (1, 2, 3, 4) and not _has_column(conn, "decisions", "operation_metrics"):
            conn.execute("ALTER TABLE decisions ADD COLUMN operation_metrics TEXT")  # before 0.5: none
        for statement in store.schema_statements(GROUP_INDEX):  # after the bucket column exists
            conn.execute(statement)
        store.set_schema_version(conn, SCHEMA_VERSION)
        prefix = scalar(conn, "SELECT value FROM catalog_info WHERE key = 'topic_prefix'")
        if prefix is None:
            conn.execute("INSERT INTO catalog_info (key, value) VALUES ('topic_prefix', ?)", (topic_prefix,))
        elif prefix != topic_prefix:
            raise RuntimeError(
                f"catalog {store.describe()} belongs to topic prefix {prefix!r}, not {topic_prefix!r}: "
                "use one catalog per prefix"
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _copy_table_rows(fresh: Connection, conn: Connection, source_id: int, target_id: int) -> None:
    """Replace the rows of table ``target_id`` in ``conn`` by those of ``source_id`` in ``fresh`` (a repair)."""
    for name in ("decisions", "commits", "files", "table_metadata"):
        columns = [c for c in _column_names(fresh, name) if c != "id"]
        copied_columns = ", ".join("? AS table_id" if c == "table_id" else c for c in columns)
        order = " ORDER BY id" if name == "files" else ""  # file ids keep their order (readers sort by id)
        rows = fresh.execute(  # the rows as they are, but of the target table id
            f"SELECT {copied_columns} FROM {name} WHERE table_id = ?{order}", (target_id, source_id)
        ).fetchall()
        conn.execute(f"DELETE FROM {name} WHERE table_id = ?", (target_id,))
        if rows:
            conn.executemany(
                f"INSERT INTO {name} ({', '.join(columns)}) VALUES ({','.join('?' * len(columns))})",
                rows,
            )
    copied = (
        "next_offset",
        "last_hash",
        "decisions",
        "metadata",
        "created_time_ms",
        "head_version",
        "head_time_ms",
        "error",
        "error_offset",
    )
    values = fresh.execute(f"SELECT {', '.join(copied)} FROM tables WHERE id = ?", (source_id,)).fetchone()
    conn.execute(
        f"UPDATE tables SET {', '.join(f'{c} = ?' for c in copied)}, updated_ms = ? WHERE id = ?",
        (*values, int(time.time() * 1000), target_id),
    )


class CatalogWriter:
    """Folds decision records into the catalog (SQLite file or PostgreSQL database).

    Not thread-safe; the materializer owns one. Readers use ``consumer.Catalog``
    on their own connections concurrently. Several writers (consumer
    processes) may share one catalog: see ``apply``.
    """

    def __init__(self, path: str | Path, topic_prefix: str) -> None:
        self.store: CatalogStore = open_store(path)
        self.path = self.store.location
        self.topic_prefix = topic_prefix
        self._conn = self.store.connect()
        # A decision that cannot be applied: it breaks the log's invariants, or the database's constraints.
        self._refusals: tuple[type[BaseException], ...] = (BrokenLogError, *self.store.integrity_errors)
        init_schema(self.store, self._conn, topic_prefix)
        self._streams: dict[str, StreamState] = {}
        self._batches = 0
        self._load_streams()

    # ------------------------------------------------------------------ setup

    def _load_streams(self) -> None:
        for row in _streams(self._conn):
            state = _stream_state(row)
            self._streams[state.name] = state

    def refresh(self, table: str) -> StreamState | None:
        """Re-read ``table``'s state from the catalog (another consumer or a repair may have moved it); a copy."""
        rows = _streams(self._conn, " WHERE name = ?", (table,))
        if not rows:
            self._streams.pop(table, None)
            return None
        state = self._streams[table] = _stream_state(rows[0])
        return replace(state)

    def close(self) -> None:
        """Refresh the query planner's statistics and close the connection."""
        try:
            self.store.optimize(self._conn)
        finally:
            self._conn.close()

    # ------------------------------------------------------------------ state

    def stream(self, table: str) -> StreamState | None:
        """The state of ``table``'s log (a copy), or None if never seen."""
        state = self._streams.get(table)
        return None if state is None else replace(state)

    def streams(self) -> dict[str, StreamState]:
        """Copies of every followed table's state."""
        return {name: replace(state) for name, state in self._streams.items()}

    def ensure_stream(self, table: str, topic: str) -> StreamState:
        """Register a decisions topic (offset 0) if new; return its state (a copy)."""
        state = self._streams.get(table)
        if state is None:
            conn = self._conn
            self.store.begin_write(conn)
            try:
                state = self._insert_stream(table, topic)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._streams[table] = state
        return replace(state)

    def mark_broken(self, table: str, error: str | BrokenLogError) -> None:
        """Stop applying ``table`` at its current offset for ``error`` (found outside a record, e.g. a lost log)."""
        state = self._streams[table]
        error = f"{error} ({repair_hint(table)})"
        conn = self._conn
        self.store.begin_write(conn)
        try:
            conn.execute(
                "UPDATE tables SET error = ?, error_offset = ?, updated_ms = ? WHERE id = ?",
                (error, state.next_offset, int(time.time() * 1000), state.table_id),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        state.error = error
        state.error_offset = state.next_offset

    def replace_table(self, table: str, source: str | Path) -> StreamState:
        """Replace every row of ``table`` by those of the SQLite catalog file ``source``, in ONE transaction.

        ``source`` is a catalog of the same prefix built from the table's log
        alone (``consumer.repair``). Readers see the old rows or the new ones,
        never a mix: the deletes and inserts commit at once (on either store).
        """
        fresh = open_store(Path(source)).connect(readonly=True)
        conn = self._conn
        try:
            found = _streams(fresh, " WHERE name = ?", (table,))
            if not found:
                raise ValueError(f"the rebuilt catalog {source} has no table {table!r}")
            source_id, topic = found[0].id, found[0].topic
            self.store.begin_write(conn)
            try:
                self._claim([table])
                known = self._streams.get(table)
                target_id = known.table_id if known is not None else self._insert_stream(table, topic).table_id
                _copy_table_rows(fresh, conn, source_id, target_id)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            fresh.close()
            self._streams.clear()
            self._load_streams()
        return replace(self._streams[table])

    def _insert_stream(self, table: str, topic: str) -> StreamState:
        table_id = scalar(
            self._conn,
            "INSERT INTO tables (name, topic, last_hash, updated_ms) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (name) DO NOTHING RETURNING id",
            (table, topic, GENESIS_HASH, int(time.time() * 1000)),
        )
        if table_id is None:  # another consumer registered it first
            return _stream_state(_streams(self._conn, " WHERE name = ?", (table,))[0])
        return StreamState(table_id=int(table_id), name=table, topic=topic, head=LogHead(table))

    def _claim(self, names: Iterable[str]) -> None:
        """Read (and lock, on PostgreSQL) the ``tables`` rows of ``names`` in the open transaction.

        Where the stored offset, hash or error differs from this writer's view,
        another writer (a second consumer, a repair) moved the table: take the
        stored state, so records already applied are skipped and the hash chain
        continues from the stored hash. Holding the row lock until COMMIT makes
        two writers of one table take turns instead of interleaving.
        """
        wanted = sorted(set(names))  # one lock order for every writer: no deadlock between two consumers
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = _streams(self._conn, f" WHERE name IN ({marks}) ORDER BY name{self.store.lock_rows}", chunk)
            for row in rows:
                known = self._streams.get(row.name)
                if (
                    known is None
                    or known.next_offset != row.next_offset
                    or known.last_hash != bytes(row.last_hash)
                    or known.error != row.error
                ):
                    self._streams[row.name] = _stream_state(row)

    # ------------------------------------------------------------------ apply

    def apply(self, records: Iterable[LogRecord]) -> ApplyResult:
        """Fold ``records`` (in log order per table) into the catalog in one SQLite transaction.

        1. Records below a table's stored offset are skipped (already applied).
        2. Each record is checked against the log's invariants
           (``schemas.decisionlog.check``: a decision of that table, chained to
           the previous record, versions and files in order); a record that
           breaks one marks the table broken at that offset and nothing more of
           it is applied. A later decision for an intent offset already decided
           is skipped (the first decision is the decision).
        3. Rows of every applied decision and each table's new offset and hash
           are committed together, so a crash loses nothing and repeats nothing.

        The batch is first tried without a savepoint per decision (two SQLite
        statements fewer each); if any decision turns out inconsistent, that
        attempt is rolled back whole and the batch is applied again with a
        savepoint around each decision, so the result is the same either way.
        """
        records = records if isinstance(records, list) else list(records)
        try:
            return self._apply_batch(records, careful=False)
        except _Retry:
            return self._apply_batch(records, careful=True)

    def _apply_batch(self, records: list[LogRecord], careful: bool) -> ApplyResult:
        result = ApplyResult()
        conn = self._conn
        work: dict[str, StreamState] = {}
        records = list(records)
        self.store.begin_write(conn)
        try:
            self._claim(r.table for r in records)
            for record in records:
                state = work.get(record.table)
                if state is None:
                    known = self._streams.get(record.table)
                    if known is None:
                        known = self._insert_stream(record.table, f"{self.topic_prefix}.{record.table}.decisions")
                    state = work[record.table] = replace(known)
                if state.error is not None or record.offset < state.next_offset:
                    result.skipped += 1
                    continue
                self._apply_record(state, record, result, careful)
            now = int(time.time() * 1000)
            for state in work.values():
                conn.execute(
                    "UPDATE tables SET next_offset = ?, last_hash = ?, decisions = ?, metadata = ?, created_time_ms = ?,"
                    " head_version = ?, head_time_ms = ?, error = ?, error_offset = ?, updated_ms = ? WHERE id = ?",
                    (
                        state.next_offset,
                        state.last_hash,
                        state.decisions,
                        state.metadata_json,
                        state.created_time_ms,
                        state.head_version,
                        state.head_time_ms,
                        state.error,
                        state.error_offset,
                        now,
                        state.table_id,
                    ),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            self._streams.clear()
            self._load_streams()
            raise
        self._streams.update(work)
        result.touched.update(work)
        self._batches += 1
        if self._batches % 2000 == 0:
            self.store.optimize(conn)  # keeps index statistics current as tables grow
        return result

    def _break(self, state: StreamState, record: LogRecord, error: str | BaseException, result: ApplyResult) -> None:
        error = f"{error} ({repair_hint(state.name)})"
        state.error = error
        state.error_offset = record.offset
        result.broken.append((state.name, record.offset, error))
        log.error("table %r: stopped applying its decision log at offset %d: %s", state.name, record.offset, error)

    def _apply_record(self, state: StreamState, record: LogRecord, result: ApplyResult, careful: bool = True) -> None:
        try:
            step = check(state.head, record.value, record.offset)
        except BrokenLogError as exc:
            if not exc.kind.skippable:
                self._break(state, record, exc, result)
                return
            # The first decision for an intent offset is the decision: pass this one over. The offset stays
            # where it is (a later record moves it), so the catalog's last record is the one it applied last.
            result.skipped += 1
            log.warning(
                "table %r: decision at offset %d skipped: %s",
                state.name,
                record.offset,
                exc,
                extra={"event": "skipped", "table": state.name, "offset": record.offset},
            )
            return
        decision = step.decision
        conn = self._conn
        changes_files = careful and decision.outcome is Outcome.ACCEPTED and decision.duplicate_of is None
        if changes_files:
            conn.execute("SAVEPOINT d")  # a commit writes several rows: all or none of them
        try:
            applied = apply_decision(conn, self.store.integrity_errors, state, decision, record)
            insert_decision(conn, state, decision, record, step.head.chain, applied)
            if changes_files:
                conn.execute("RELEASE SAVEPOINT d")
        except self._refusals as exc:
            if not careful:
                raise _Retry() from exc  # some rows of it may be written: roll the batch back, apply it carefully
            if changes_files:
                conn.execute("ROLLBACK TO SAVEPOINT d")
                conn.execute("RELEASE SAVEPOINT d")
            self._break(
                state, record, exc if isinstance(exc, BrokenLogError) else f"inconsistent decision: {exc}", result
            )
            return
        state.head = step.head
        for name, value in applied.updates.items():
            setattr(state, name, value)
        state.next_offset = record.offset + 1
        result.applied += 1
        if applied.committed:
            result.commits += 1


# ---------------------------------------------------------------------- read queries


class TableRow(NamedTuple):
    """A ``tables`` row as readers see it (``query_table``, ``query_tables``, ``query_streams``)."""

    id: int
    name: str
    topic: str
    next_offset: int  # Kafka offset of the next decision record to apply
    decisions: int
    metadata_json: str | None  # the ``metadata`` column: JSON TableMetadata, None until CREATE_TABLE is accepted
    created_time_ms: int | None
    head_version: int
    head_time_ms: int | None
    error: str | None
    error_offset: int | None


class FileRow(NamedTuple):
    """A ``files`` row (``query_snapshot_files``, ``query_group_files``, ``query_added_files``)."""

    path: str
    partition: str  # partition_json text
    record_count: int
    size_bytes: int
    min_key: str | None
    max_key: str | None
    added_version: int
    data_change: int  # 0 or 1
    operation: str
    bucket: int
    seq_version: int | None  # a re-added file's sequence (None: added_version)


class VersionRow(NamedTuple):
    """An ID version and the time version readers see it at (``query_commit``, ``query_version_at``)."""

    id_version: int
    effective_time_ms: int


class CommitRow(NamedTuple):
    """A ``commits`` row joined with its decision (``query_commits``)."""

    id_version: int
    time_version_ms: int | None
    effective_time_ms: int
    operation: str
    data_change: int
    txn_id: str
    read_version: int | None
    rebase: str
    partitions: str | None  # JSON list of partition specs
    writer: str | None
    app_id: str | None
    batch_id: int | None
    intent_offset: int
    log_offset: int


class RemovedRow(NamedTuple):
    """A file removal (``query_removed_paths``)."""

    removed_version: int
    path: str


class DecisionRow(NamedTuple):
    """A ``decisions`` row (``query_decisions``)."""

    log_offset: int
    log_timestamp_ms: int | None
    txn_id: str
    outcome: str
    operation: str | None
    read_version: int | None
    intent_offset: int
    id_version: int | None
    time_version_ms: int | None
    effective_time_ms: int | None
    rebase: str
    reason: str | None
    message: str | None
    conflicting_txn_id: str | None
    conflicting_version: int | None
    writer: str | None
    app_id: str | None
    batch_id: int | None
    duplicate_of: int | None
    partitions: str | None  # JSON list of partition specs
    files_added: int
    files_removed: int
    records_added: int
    bytes_added: int
    prev_hash: bytes | None
    hash: bytes
    restore_version: int | None
    operation_metrics: str | None  # JSON object (catalog schema 5)


TABLE_COLUMNS = select_list(TableRow, metadata_json="metadata")
FILE_COLUMNS = select_list(FileRow)
_FILE_COLUMNS_V1 = select_list(FileRow, bucket="0", seq_version="NULL")  # a catalog no writer has migrated yet
_FILE_COLUMNS_V3 = select_list(FileRow, seq_version="NULL")  # before RESTORE (0.4), not migrated yet
_DECISION_SIDE = {"txn_id", "read_version", "rebase", "partitions", "writer", "app_id", "batch_id", "intent_offset"}
COMMIT_COLUMNS = ", ".join(f"d.{f}" if f in _DECISION_SIDE else f"c.{f}" for f in CommitRow._fields)
DECISION_COLUMNS = select_list(DecisionRow)
_DECISION_COLUMNS_V3 = select_list(DecisionRow, restore_version="NULL", operation_metrics="NULL")  # before 0.4
_DECISION_COLUMNS_V4 = select_list(DecisionRow, operation_metrics="NULL")  # before operation metrics (0.5)


def _user_version(conn: Connection) -> int:
    return int(scalar(conn, "PRAGMA user_version"))


def _column_names(conn: Connection, table: str) -> list[str]:
    """The columns of a SQLite table, in order."""
    return [name for (name,) in conn.execute("SELECT name FROM pragma_table_info(?)", (table,)).fetchall()]


def _has_column(conn: Connection, table: str, column: str) -> bool:
    if getattr(conn, "kind", "sqlite") == "sqlite":
        return column in _column_names(conn, table)
    query = "SELECT count(*) FROM information_schema.columns WHERE table_name = ? AND column_name = ?"
    return bool(scalar(conn, query, (table, column)))


def _file_columns(conn: Connection) -> str:
    """The file columns to select: a catalog read before its consumer was upgraded may lack bucket (version 1) or
    seq_version (before 4)."""
    if getattr(conn, "kind", "sqlite") != "sqlite":  # PostgreSQL catalogs start at version 2
        return FILE_COLUMNS if _has_column(conn, "files", "seq_version") else _FILE_COLUMNS_V3
    version = _user_version(conn)
    return FILE_COLUMNS if version >= 4 else _FILE_COLUMNS_V3 if version >= 2 else _FILE_COLUMNS_V1


def query_table(conn: Connection, name: str) -> TableRow | None:
    """The ``tables`` row of ``name`` (created or not), or None."""
    row = conn.execute(f"SELECT {TABLE_COLUMNS} FROM tables WHERE name = ?", (name,)).fetchone()
    return None if row is None else TableRow._make(row)


def query_tables(conn: Connection) -> list[TableRow]:
    """Every created table's row, by name."""
    rows = conn.execute(f"SELECT {TABLE_COLUMNS} FROM tables WHERE metadata IS NOT NULL ORDER BY name").fetchall()
    return list(map(TableRow._make, rows))


def query_streams(conn: Connection) -> list[TableRow]:
    """Every followed topic's row, created or not (for health and metrics)."""
    return list(map(TableRow._make, conn.execute(f"SELECT {TABLE_COLUMNS} FROM tables ORDER BY name").fetchall()))


def query_commit(conn: Connection, table_id: int, version: int) -> VersionRow | None:
    """One ID version and its (inherited) time version, or None."""
    row = conn.execute(
        "SELECT id_version, effective_time_ms FROM commits WHERE table_id = ? AND id_version = ?", (table_id, version)
    ).fetchone()
    return None if row is None else VersionRow._make(row)


def query_version_at(conn: Connection, table_id: int, millis: int) -> VersionRow | None:
    """The highest ID version whose (inherited) time version <= ``millis``, or None."""
    row = conn.execute(
        "SELECT id_version, effective_time_ms FROM commits WHERE table_id = ? AND effective_time_ms <= ?"
        " ORDER BY effective_time_ms DESC, id_version DESC LIMIT 1",
        (table_id, millis),
    ).fetchone()
    return None if row is None else VersionRow._make(row)


def query_metadata_at(conn: Connection, table_id: int, version: int) -> str | None:
    """The JSON metadata in force at ``version`` if an ALTER_TABLE changed it, else None (``tables.metadata``)."""
    if getattr(conn, "kind", "sqlite") == "sqlite":
        if _user_version(conn) < 3:
            return None  # a catalog its writer has not migrated yet: no ALTER_TABLE applied in it
    elif scalar(conn, "SELECT to_regclass('table_metadata')") is None:
        return None
    metadata = scalar(
        conn,
        "SELECT metadata FROM table_metadata WHERE table_id = ? AND id_version <= ? ORDER BY id_version DESC LIMIT 1",
        (table_id, version),
    )
    return None if metadata is None else str(metadata)


def query_snapshot_files(conn: Connection, table_id: int, version: int) -> list[FileRow]:
    """Rows of the files live at ``version`` (one indexed query; see ``files_removed``)."""
    columns = _file_columns(conn)
    rows = conn.execute(
        f"SELECT {columns} FROM files WHERE table_id = ? AND removed_version IS NULL AND added_version <= ?"
        f" UNION ALL SELECT {columns} FROM files WHERE table_id = ? AND removed_version > ?"
        " AND added_version <= ?",
        (table_id, version, table_id, version, version),
    ).fetchall()
    return list(map(FileRow._make, rows))


def query_group_files(conn: Connection, table_id: int, version: int, partition: str, bucket: int) -> list[FileRow]:
    """Rows of the files live at ``version`` in one bucket of one partition (its ``partition_json`` text): two
    ranges of the index ``files_group``, so the work follows the group's files, not the table's."""
    columns = _file_columns(conn)
    where, params = "table_id = ? AND partition = ?", [table_id, partition]
    if columns != FILE_COLUMNS:  # a version-1 catalog: every file is in bucket 0
        if bucket != 0:
            return []
    else:
        where += " AND bucket = ?"
        params.append(bucket)
    rows = conn.execute(
        f"SELECT {columns} FROM files WHERE {where} AND removed_version IS NULL AND added_version <= ?"
        f" UNION ALL SELECT {columns} FROM files WHERE {where} AND removed_version > ? AND added_version <= ?",
        (*params, version, *params, version, version),
    ).fetchall()
    return list(map(FileRow._make, rows))


def query_commits(
    conn: Connection, table_id: int, column: str, low: int, high: int, include_rewrites: bool, limit: int | None = None
) -> list[CommitRow]:
    """Commit rows (joined with their decision) with ``column`` in ``[low, high]``, by ID version (the first ``limit``)."""
    assert column in ("id_version", "effective_time_ms")
    where = "" if include_rewrites else " AND c.data_change = 1"
    params: tuple[int, ...] = (table_id, low, high) if limit is None else (table_id, low, high, limit)
    rows = conn.execute(
        f"SELECT {COMMIT_COLUMNS}"
        " FROM commits c JOIN decisions d ON d.table_id = c.table_id AND d.log_offset = c.log_offset"
        f" WHERE c.table_id = ? AND c.{column} BETWEEN ? AND ?{where} ORDER BY c.id_version"
        + ("" if limit is None else " LIMIT ?"),
        params,
    ).fetchall()
    return list(map(CommitRow._make, rows))


def query_added_files(conn: Connection, table_id: int, low: int, high: int) -> list[FileRow]:
    """Rows of files added by ID versions ``low..high``."""
    rows = conn.execute(
        f"SELECT {_file_columns(conn)} FROM files WHERE table_id = ? AND added_version BETWEEN ? AND ? ORDER BY id",
        (table_id, low, high),
    ).fetchall()
    return list(map(FileRow._make, rows))


def query_removed_paths(conn: Connection, table_id: int, low: int, high: int) -> list[RemovedRow]:
    """Files removed by ID versions ``low..high``."""
    rows = conn.execute(
        "SELECT removed_version, path FROM files WHERE table_id = ? AND removed_version BETWEEN ? AND ?"
        " ORDER BY removed_version, path",
        (table_id, low, high),
    ).fetchall()
    return list(map(RemovedRow._make, rows))


def query_decisions(
    conn: Connection, table_id: int, limit: int | None, *, accepted_only: bool = False, before: int | None = None
) -> list[DecisionRow]:
    """Decision rows of a table, newest first (the ``limit`` newest below log offset ``before``: only those read)."""
    accepted = f" AND outcome = '{Outcome.ACCEPTED.value}'" if accepted_only else ""
    older = "" if before is None else " AND log_offset < ?"
    if _has_column(conn, "decisions", "operation_metrics"):
        columns = DECISION_COLUMNS
    else:
        columns = _DECISION_COLUMNS_V4 if _has_column(conn, "decisions", "restore_version") else _DECISION_COLUMNS_V3
    sql = f"SELECT {columns} FROM decisions WHERE table_id = ?{accepted}{older} ORDER BY log_offset DESC"
    params: tuple[int, ...] = (table_id,) if before is None else (table_id, before)
    if limit is not None:
        rows = conn.execute(sql + " LIMIT ?", (*params, limit)).fetchall()
    else:
        rows = conn.execute(sql, params).fetchall()
    return list(map(DecisionRow._make, rows))


__all__ = [
    "GENESIS_HASH",
    "SCHEMA_VERSION",
    "ApplyResult",
    "CatalogWriter",
    "CommitRow",
    "DecisionRow",
    "FileRow",
    "LogRecord",
    "RemovedRow",
    "StreamRow",
    "StreamState",
    "TableRow",
    "VersionRow",
    "connect",
    "partition_json",
]
