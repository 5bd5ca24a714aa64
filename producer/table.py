"""The Spark writer API: ``DeltaTable``, ``Transaction``, ``CommitResult``.

A transaction is optimistic (docs/architecture.md, docs/conflicts.md):

1. ``begin()`` pins the catalog's head version: the snapshot the transaction
   reads (UPDATE, DELETE and compactions read it) and its read version.
2. An operation stages data: Spark writes Parquet files at their final paths
   under the table location (invisible to readers until a commit names them).
3. ``commit()`` publishes a ``CommitIntent`` and waits for the arbiter's
   decision. Accepted: it waits until the catalog has the new version, so a
   ``read()`` right after sees it. Rejected: the staged files are deleted and
   ``CommitConflictError`` is raised.

Each transaction holds exactly one operation (the intent names one).
Operations called on the ``DeltaTable`` itself are a transaction each.

Importing this module imports neither Spark nor Kafka: both are loaded on use.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kernel.errors import CommitConflictError, CommitTimeoutError, OrdoError
from kernel.settings import Settings, load_settings
from producer.data import (
    InvalidOperationError,
    InvalidTableError,
    Layout,
    PartitionValueError,
    PrimaryKeyError,
    SchemaMismatchError,
    WriteRefusedError,
)
from schemas import (
    CommitDecision,
    CommitIntent,
    DataFile,
    Operation,
    Reason,
    Rebase,
    TableMetadata,
    validate_table_name,
)
from schemas.models import MAX_FILES_PER_INTENT
from schemas.operations import ROW_ID_COLUMN, ROW_ID_DDL, ROW_ID_KEY

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from producer.client import CommitClient
    from producer.data import FileWriter

log = logging.getLogger("ordo.producer")

DEFAULT_COMMIT_TIMEOUT = 60.0
DEFAULT_CATALOG_TIMEOUT = 60.0
CONFLICT_LATER_FAILS = Reason.CONFLICT_LATER_FAILS
TABLE_EXISTS = Reason.TABLE_EXISTS
BATCH_ALREADY_COMMITTED = Reason.BATCH_ALREADY_COMMITTED
RETRY_BACKOFF = 0.05
DEFAULT_RETENTION_HOURS = 168.0  # Delta's vacuum default and safety floor
RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"
# Inputs of one compaction/cluster commit (an intent lists at most MAX_FILES_PER_INTENT files each way).
MAX_REWRITE_INPUTS = 5_000


# --------------------------------------------------------------------------- errors


class TableExistsError(CommitConflictError):
    """Raised by ``DeltaTable.create`` when the table already exists (the arbiter rejected with TABLE_EXISTS)."""


class TransactionStateError(OrdoError, RuntimeError):
    """Raised when a transaction is used out of order (a second operation, or after commit/abort)."""


class CatalogLagError(OrdoError, TimeoutError):
    """Raised when a commit was accepted but the catalog did not show its version in time (is a consumer running?).

    ``result`` is the accepted commit: the data is committed, only reading it back would not see it yet.
    """

    def __init__(self, message: str, result: CommitResult | None = None) -> None:
        super().__init__(message)
        self.result = result


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CommitResult:
    """An accepted commit: its transaction id and the versions the arbiter gave it.

    ``time_version`` is None for compaction and clustering (no logical change).
    The other fields say what was committed and how long it took; ``attempts``
    counts publications (more than one after metadata-level retries).
    """

    txn_id: str
    id_version: int
    time_version: datetime | None
    operation: Operation | None = None
    added_files: tuple[DataFile, ...] = field(default=(), repr=False)
    removed_files: tuple[str, ...] = field(default=(), repr=False)
    rebase: Rebase = Rebase.NONE
    write_seconds: float = 0.0
    commit_seconds: float = 0.0
    attempts: int = 1
    decision: CommitDecision | None = field(default=None, repr=False, compare=False)

    @property
    def record_count(self) -> int:
        """Records in the files this commit added."""
        return sum(f.record_count for f in self.added_files)


# --------------------------------------------------------------------------- shared clients


class _Connection:
    """The commit client and catalog for one set of settings, shared by every table handle using them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._client: CommitClient | None = None
        self._catalog: Any = None

    @property
    def client(self) -> CommitClient:
        with self._lock:
            if self._client is None:
                from producer.client import CommitClient

                self._client = CommitClient(settings=self.settings)
            return self._client

    @property
    def catalog(self) -> Any:
        with self._lock:
            if self._catalog is None:
                from consumer import Catalog

                self._catalog = Catalog(self.settings.catalog)
            return self._catalog

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
            catalog, self._catalog = self._catalog, None
        if client is not None:
            client.close()
        if catalog is not None and hasattr(catalog, "close"):
            catalog.close()


_CONNECTIONS: dict[tuple[Any, ...], _Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def shared_connection(settings: Settings) -> _Connection:
    """The commit client and catalog this process shares for ``settings`` (opened on first use, closed at exit).

    Every ``DeltaTable`` handle uses it, and so do writers outside one that commit again and again in one
    process, such as the ``format("ordo")`` sink's commits in a reused Python worker (a new ``CommitClient``
    per commit costs its Kafka connections).
    """
    key = (
        settings.bootstrap_servers,
        settings.topic_prefix,
        settings.catalog,
        tuple(sorted(settings.kafka.items())),
        settings.trusted_keys,  # the keys its decision readers trust
        settings.require_signatures,
    )
    with _CONNECTIONS_LOCK:
        conn = _CONNECTIONS.get(key)
        if conn is None:
            conn = _CONNECTIONS[key] = _Connection(settings)
        return conn


def close_connections() -> None:
    """Close every commit client and catalog the writer API opened (also done at interpreter exit)."""
    with _CONNECTIONS_LOCK:
        conns = list(_CONNECTIONS.values())
        _CONNECTIONS.clear()
    for conn in conns:
        try:
            conn.close()
        except Exception:  # closing at exit must not raise
            log.debug("closing a writer connection failed", exc_info=True)


atexit.register(close_connections)


def _resolve_settings(settings: Settings | None, overrides: Mapping[str, Any]) -> Settings:
    if settings is None:
        return load_settings(**overrides)
    return settings.with_overrides(**overrides)


def _writer_identity(spark: SparkSession) -> str:
    try:
        app = spark.sparkContext.applicationId
    except Exception:  # pragma: no cover - a session without a context (Spark Connect)
        app = "spark"
    return f"ordo-spark/{app}@{socket.gethostname()}:{os.getpid()}"[:256]


def _register(spark: SparkSession, settings: Settings) -> None:
    """Register the ``ordo`` data source with this session, defaulting to these settings (once per change)."""
    from ordo.spark import register, registered_settings

    if registered_settings(spark) != (True, settings):
        register(spark, settings)


def _has_scheme(location: str) -> bool:
    head = location.split("/", 1)[0]
    return head.endswith(":") and len(head) > 2


def _stamp_text(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def conflict_error(decision: CommitDecision, what: str) -> CommitConflictError:
    """The error a rejected ``decision`` of ``what`` raises: its reason, message and conflicting commit."""
    cls = TableExistsError if decision.reason == TABLE_EXISTS else CommitConflictError
    detail = f": {decision.message}" if decision.message else ""
    return cls(
        f"{what} was rejected ({decision.reason}){detail}",
        reason=decision.reason,
        conflicting_txn_id=decision.conflicting_txn_id,
        conflicting_version=decision.conflicting_version,
        decision=decision,
    )


# --------------------------------------------------------------------------- DeltaTable


class DeltaTable:
    """A handle on one table: its metadata, writes (each a transaction), ``begin()``, and reads.

    Get one with ``DeltaTable.create`` or ``DeltaTable.open``. Settings come
    from keyword arguments, else ``ORDO_*`` environment variables
    (``load_settings()``); handles with equal settings share one Kafka client
    and one catalog connection.
    """

    def __init__(
        self,
        spark: SparkSession,
        name: str,
        metadata: TableMetadata,
        *,
        settings: Settings,
        commit_timeout: float = DEFAULT_COMMIT_TIMEOUT,
        catalog_timeout: float = DEFAULT_CATALOG_TIMEOUT,
    ) -> None:
        self.spark = spark
        self.name = validate_table_name(name)
        self.metadata = metadata
        self.settings = settings
        self.commit_timeout = commit_timeout
        self.catalog_timeout = catalog_timeout
        self.layout = Layout.of(name, metadata)
        self._alias: str | None = None
        self._conn = shared_connection(settings)
        self._writer = _writer_identity(spark)
        _register(spark, settings)

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        spark: SparkSession,
        name: str | None = None,
        *,
        schema: str | StructType | None = None,
        primary_key: str | Sequence[str] | None = None,
        partitioned_by: str | Sequence[str] = (),
        location: str | None = None,
        properties: Mapping[str, Any] | None = None,
        buckets: int | None = None,
        settings: Settings | None = None,
        bootstrap_servers: str | None = None,
        topic_prefix: str | None = None,
        warehouse: str | None = None,
        catalog: str | None = None,
        commit_timeout: float = DEFAULT_COMMIT_TIMEOUT,
        catalog_timeout: float = DEFAULT_CATALOG_TIMEOUT,
    ) -> DeltaTable:
        """Create a table: publish CREATE_TABLE, wait for the decision, then for the catalog to have it.

        ``schema`` is a Spark DDL string (``"id BIGINT, v STRING"``) or a
        StructType. ``location`` defaults to ``<warehouse>/<name>`` as an
        absolute path. ``buckets`` (also the property ``ordo.buckets``) is the
        number of buckets per partition (default 4; 1 when a key type has no
        canonical text, see ``producer.buckets``). Raises ``TableExistsError`` if
        the table exists and ``InvalidTableError`` for a definition that cannot be a table.

        Without ``primary_key`` the table is keyless (Delta's default): INSERT INTO appends and keeps
        duplicates, concurrent appends never conflict, and a hidden row id (``_ordo_row_id``, never in what
        users read or write) is its internal key (docs/api.md, "Keyless tables").

        ``DeltaTable.create(spark)`` (no name) is Delta's builder: ``.tableName(...).addColumns(...)...execute()``
        (``producer.builder``).
        """
        from producer.buckets import BUCKETS_PROPERTY, BucketError, choose_buckets
        from producer.data import check_definition, parse_schema, schema_to_ddl

        if name is None:
            return cls._builder(  # type: ignore[no-any-return]
                spark,
                "create",
                schema,
                primary_key,
                settings=settings,
                bootstrap_servers=bootstrap_servers,
                topic_prefix=topic_prefix,
                warehouse=warehouse,
                catalog=catalog,
                commit_timeout=commit_timeout,
                catalog_timeout=catalog_timeout,
            )
        if schema is None:
            raise InvalidTableError(f"DeltaTable.create({name!r}, ...) needs schema=")
        validate_table_name(name)
        resolved = _resolve_settings(
            settings,
            {
                "bootstrap_servers": bootstrap_servers,
                "topic_prefix": topic_prefix,
                "warehouse": warehouse,
                "catalog": catalog,
            },
        )
        spark_schema = parse_schema(schema) if isinstance(schema, str) else schema
        key = () if primary_key is None else (primary_key,) if isinstance(primary_key, str) else tuple(primary_key)
        parts = (partitioned_by,) if isinstance(partitioned_by, str) else tuple(partitioned_by)
        check_definition(spark_schema, key, parts)
        ddl = schema_to_ddl(spark_schema)
        if not key:  # keyless: the hidden row id column is the internal key
            if primary_key is not None:
                raise InvalidTableError("primary_key names no column: leave it out for a keyless table")
            key, ddl = ROW_ID_KEY, f"{ddl}, {ROW_ID_DDL}"
        props = {str(k): str(v) for k, v in (properties or {}).items()}
        given = props.get(BUCKETS_PROPERTY)
        if buckets is not None and given is not None and str(buckets) != given:
            raise InvalidTableError(f"buckets={buckets} and property {BUCKETS_PROPERTY}={given!r} disagree")
        try:
            count = choose_buckets(
                buckets if buckets is not None else given,
                ["string" if k == ROW_ID_COLUMN else spark_schema[k].dataType.simpleString() for k in key],
            )
        except BucketError as exc:
            raise InvalidTableError(str(exc)) from exc
        props[BUCKETS_PROPERTY] = str(count)
        if location is None:
            location = resolved.warehouse.rstrip("/") + "/" + name
        if not _has_scheme(location):
            location = os.path.abspath(location)
        metadata = TableMetadata(
            location=location,
            schema=ddl,
            primary_key=key,
            partition_columns=parts,
            properties=props,
        )
        table = cls(
            spark,
            name,
            metadata,
            settings=resolved,
            commit_timeout=commit_timeout,
            catalog_timeout=catalog_timeout,
        )
        intent = CommitIntent(
            txn_id=uuid.uuid4().hex,
            table=name,
            operation=Operation.CREATE_TABLE,
            read_version=0,
            metadata=metadata,
            writer=table._writer,
        )
        decision = table._conn.client.commit(intent, timeout=commit_timeout)
        if not decision.accepted:
            raise conflict_error(decision, f"CREATE TABLE {name}")
        table._wait_for_catalog(0, None)
        return table

    @classmethod
    def open(
        cls,
        spark: SparkSession,
        name: str,
        *,
        settings: Settings | None = None,
        bootstrap_servers: str | None = None,
        topic_prefix: str | None = None,
        catalog: str | None = None,
        commit_timeout: float = DEFAULT_COMMIT_TIMEOUT,
        catalog_timeout: float = DEFAULT_CATALOG_TIMEOUT,
    ) -> DeltaTable:
        """Open an existing table from the catalog; ``TableNotFoundError`` if the catalog does not know it."""
        resolved = _resolve_settings(
            settings, {"bootstrap_servers": bootstrap_servers, "topic_prefix": topic_prefix, "catalog": catalog}
        )
        info = shared_connection(resolved).catalog.table(validate_table_name(name))
        return cls(
            spark,
            name,
            info.metadata,
            settings=resolved,
            commit_timeout=commit_timeout,
            catalog_timeout=catalog_timeout,
        )

    @classmethod
    def forName(cls, spark: SparkSession, name: str, **options: Any) -> DeltaTable:
        """Delta's name for ``open``: the table ``name`` (``TableNotFoundError`` if the catalog does not know it)."""
        return cls.open(spark, name, **options)

    @classmethod
    def forPath(cls, spark: SparkSession, location: str, **options: Any) -> DeltaTable:
        """The table whose data lives at ``location`` (``TableNotFoundError`` if no table does)."""
        from consumer.errors import TableNotFoundError

        resolved = _resolve_settings(
            options.pop("settings", None),
            {k: options.pop(k, None) for k in ("bootstrap_servers", "topic_prefix", "catalog")},
        )
        wanted = location if _has_scheme(location) else os.path.abspath(location)
        for info in shared_connection(resolved).catalog.tables():
            if info.metadata.location.rstrip("/") == wanted.rstrip("/"):
                return cls.open(spark, info.name, settings=resolved, **options)
        raise TableNotFoundError(f"no table has its data at {location!r}")

    @classmethod
    def exists(cls, spark: SparkSession, name: str, **options: Any) -> bool:
        """True when the catalog knows table ``name``."""
        from consumer.errors import TableNotFoundError

        resolved = _resolve_settings(
            options.pop("settings", None),
            {k: options.pop(k, None) for k in ("bootstrap_servers", "topic_prefix", "catalog")},
        )
        _register(spark, resolved)  # like every DeltaTable call: format("ordo") works with these settings
        try:
            shared_connection(resolved).catalog.table(validate_table_name(name))
        except TableNotFoundError:
            return False
        return True

    @classmethod
    def createIfNotExists(cls, spark: SparkSession, name: str | None = None, **definition: Any) -> DeltaTable:
        """``open`` the table if it exists, else ``create`` it with ``definition`` (a lost race opens it).

        Without a name: Delta's builder (``producer.builder``)."""
        if name is None:
            return cls._builder(spark, "createIfNotExists", None, None, **definition)
        connection_keys = (
            "settings",
            "bootstrap_servers",
            "topic_prefix",
            "catalog",
            "commit_timeout",
            "catalog_timeout",
        )
        opening = {k: definition[k] for k in connection_keys if k in definition}
        if cls.exists(spark, name, **{k: v for k, v in opening.items() if not k.endswith("_timeout")}):
            return cls.open(spark, name, **opening)
        try:
            return cls.create(spark, name, **definition)
        except TableExistsError:
            return cls.open(spark, name, **opening)

    @classmethod
    def replace(cls, spark: SparkSession, **connection: Any) -> Any:
        """Delta's ``replace`` builder (its ``execute()`` refuses: see ``producer.builder``)."""
        return cls._builder(spark, "replace", None, None, **connection)

    @classmethod
    def createOrReplace(cls, spark: SparkSession, **connection: Any) -> Any:
        """Delta's ``createOrReplace`` builder (its ``execute()`` refuses: see ``producer.builder``)."""
        return cls._builder(spark, "createOrReplace", None, None, **connection)

    @staticmethod
    def _builder(spark: SparkSession, mode: str, schema: Any, primary_key: Any, **connection: Any) -> Any:
        from producer.builder import DeltaTableBuilder

        if schema is not None or primary_key is not None:
            raise InvalidTableError("the builder takes no schema= or primary_key=: name the table first")
        return DeltaTableBuilder(spark, mode, **{k: v for k, v in connection.items() if v is not None})

    # ------------------------------------------------------------------ description

    @property
    def location(self) -> str:
        """Where the table's data files live."""
        return self.metadata.location

    @property
    def schema(self) -> StructType:
        """The table schema as a Spark StructType (a keyless table's without its hidden row id)."""
        return self.layout.user_schema()

    @property
    def primary_key(self) -> tuple[str, ...]:
        """The primary key columns; empty for a keyless table."""
        return () if self.layout.keyless else self.layout.primary_key

    @property
    def keyless(self) -> bool:
        """True for a table created without a primary key (append-only, duplicates kept)."""
        return self.layout.keyless

    @property
    def partition_columns(self) -> tuple[str, ...]:
        """The partition columns (empty for an unpartitioned table)."""
        return self.layout.partition_columns

    @property
    def version(self) -> int:
        """The catalog's head ID version of this table (what ``begin()`` would pin)."""
        return int(self._conn.catalog.table(self.name).head_version)

    @property
    def catalog(self) -> Any:
        """The consumer's catalog this handle reads from."""
        return self._conn.catalog

    @property
    def client(self) -> CommitClient:
        """The commit client this handle publishes with."""
        return self._conn.client

    def __repr__(self) -> str:
        return f"DeltaTable({self.name!r}, location={self.location!r})"

    # ------------------------------------------------------------------ transactions

    def begin(self, *, app_id: str | None = None, batch_id: int | None = None) -> Transaction:
        """A transaction pinned to the catalog's current head version.

        ``app_id``/``batch_id`` make the commit idempotent for streaming
        writers: the arbiter refuses a batch at or below one already committed
        for that application (``BATCH_ALREADY_COMMITTED``).
        """
        info = self._conn.catalog.table(self.name)
        if info.metadata != self.metadata:  # an ALTER TABLE since this handle read it: write the new schema
            self._set_metadata(info.metadata)
        return Transaction(self, int(info.head_version), app_id=app_id, batch_id=batch_id)

    def _set_metadata(self, metadata: TableMetadata) -> None:
        self.metadata = metadata
        self.layout = Layout.of(self.name, metadata)

    def alter(
        self,
        add_columns: str | StructType | None = None,
        *,
        set_properties: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """ALTER TABLE: append nullable columns (Spark DDL ``"note STRING"`` or a StructType) and/or set properties.

        Metadata only: no file is read or written. Files written before the
        change read the added columns as NULL; reads at older versions keep the
        older schema. A commit whose snapshot predates the change is rejected
        (``SCHEMA_CHANGED``), and the change itself fails against any commit
        made since its snapshot. Dropping, renaming or retyping columns,
        unsetting properties and changing ``ordo.*`` properties are not
        supported (``UNSUPPORTED_ALTER``). Raises ``CommitConflictError`` with
        the arbiter's reason when it is rejected.
        """
        from producer.data import check_definition, parse_schema, schema_to_ddl

        info = self._conn.catalog.table(self.name)
        current = info.metadata
        schema = current.schema
        if add_columns is not None:
            added = parse_schema(add_columns) if isinstance(add_columns, str) else add_columns
            if not added.fields:
                raise InvalidOperationError("add_columns names no column")
            schema = f"{schema}, {schema_to_ddl(added)}"
            check_definition(
                parse_schema(f"{current.user_schema}, {schema_to_ddl(added)}"),
                current.user_key,
                current.partition_columns,
            )
        properties = {**current.properties, **{str(k): str(v) for k, v in (set_properties or {}).items()}}
        if schema == current.schema and properties == dict(current.properties):
            raise InvalidOperationError("alter needs add_columns or set_properties that change the table")
        metadata = TableMetadata(
            location=current.location,
            schema=schema,
            primary_key=current.primary_key,
            partition_columns=current.partition_columns,
            properties=properties,
        )
        intent = CommitIntent(
            txn_id=uuid.uuid4().hex,
            table=self.name,
            operation=Operation.ALTER_TABLE,
            read_version=int(info.head_version),
            metadata=metadata,
            writer=self._writer,
        )
        result = self._commit_now(intent, f"ALTER TABLE {self.name}")
        self._set_metadata(metadata)
        return result

    def _run(self, stage: Any, retries: int = 0) -> CommitResult | None:
        with self.begin() as txn:
            stage(txn)
            return txn.commit(retries=retries)

    def insert_into(self, df: DataFrame, *, retries: int = 0) -> CommitResult | None:
        """INSERT INTO: add the rows as upserts (a row whose key exists replaces it). None if ``df`` is empty.

        ``retries`` > 0 retries a CONFLICT_LATER_FAILS rejection at the
        metadata level: the same files are republished, re-pinned to the new
        head, under a new txn id (INSERT reads nothing, so this is safe).
        """
        return self._run(lambda t: t.insert_into(df), retries)

    def insert_overwrite(
        self, df: DataFrame, partition: Mapping[str, Any] | None = None, *, whole_table: bool = False
    ) -> CommitResult | None:
        """INSERT OVERWRITE: replace the table, the given static ``partition``, or the partitions present in ``df``
        (``whole_table=True``: every partition, also those ``df`` has no row in)."""
        return self._run(lambda t: t.insert_overwrite(df, partition, whole_table=whole_table))

    def truncate(self, partition: Mapping[str, Any] | None = None) -> CommitResult | None:
        """TRUNCATE the table or one partition."""
        return self._run(lambda t: t.truncate(partition))

    def update(
        self,
        set: Mapping[str, str | Column] | str | Column | None = None,
        where: str | Column | Mapping[str, str | Column] | None = None,
        *,
        condition: str | Column | None = None,
        partition: Mapping[str, Any] | None = None,
    ) -> CommitResult | None:
        """UPDATE: ``set`` maps columns to SQL expressions, for rows matching ``where`` (and ``partition``).

        Delta's order is accepted too: ``update(condition, set)``, ``update(condition=..., set=...)``.
        Delta's ``update(None, set)`` updates every row. A condition with predicates on partition columns narrows
        the scope to the partitions it can match, from Spark's analysis of it (``producer.scope``).
        """
        if isinstance(set, Mapping):
            assignments, cond = set, where if condition is None else condition
            if condition is not None and where is not None:
                raise InvalidOperationError("give the condition once: where= or condition=")
        elif set is None and isinstance(where, Mapping):  # Delta's update(None, set): every row
            assignments, cond = where, condition
        elif set is None:
            assignments, cond = None, where if condition is None else condition
        else:  # Delta's positional order: (condition, set)
            assignments, cond = where, set  # type: ignore[assignment]
        if not isinstance(assignments, Mapping) or not assignments:
            raise InvalidOperationError("update needs set= (a mapping of column -> expression)")
        return self._run(
            lambda t: t.update(
                assignments,  # type: ignore[arg-type]
                cond,  # type: ignore[arg-type]
                partition=partition,
                partitions=self._scope_of(t, cond, partition, "UPDATE"),  # type: ignore[arg-type]
            )
        )

    def delete(
        self,
        where: str | Column | None = None,
        *,
        condition: str | Column | None = None,
        partition: Mapping[str, Any] | None = None,
    ) -> CommitResult | None:
        """DELETE the rows matching ``where`` (Delta: ``condition``; all rows when None), within ``partition``.

        A condition with predicates on partition columns narrows the scope as in ``update``.
        """
        if where is not None and condition is not None:
            raise InvalidOperationError("give the condition once: where= or condition=")
        cond = where if where is not None else condition
        return self._run(
            lambda t: t.delete(cond, partition=partition, partitions=self._scope_of(t, cond, partition, "DELETE"))
        )

    def _scope_of(
        self,
        txn: Transaction,
        condition: str | Column | None,
        partition: Mapping[str, Any] | None,
        operation: str,
    ) -> list[dict[str, str]] | None:
        """The partitions of ``txn``'s snapshot ``condition`` can match (``producer.scope``); None when
        ``partition`` is given, or (logged once) for the whole table."""
        from producer.delta import log_whole_table

        if partition is not None:
            return None
        found = txn.partitions_of_condition(condition)
        if found is None and self.partition_columns:
            log_whole_table(self.name, operation)
        return found

    def alias(self, name: str) -> DeltaTable:
        """Delta's ``alias``: this table under ``name`` in ``merge`` conditions and assignments, and in ``toDF()``."""
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidOperationError(f"alias {name!r} must be a SQL identifier")
        aliased = copy.copy(self)
        aliased._alias = name
        return aliased

    def merge(self, source: DataFrame, condition: str | Column) -> Any:
        """Delta's MERGE builder: ``.whenMatchedUpdate(All)``, ``.whenMatchedDelete``, ``.whenNotMatchedInsert(All)``,
        ``.whenNotMatchedBySourceUpdate``, ``.whenNotMatchedBySourceDelete``, then ``.execute()`` (one UPDATE
        transaction; Delta's metrics; see producer/delta.py). Names: ``alias()``'s (else ``target``) and the
        source's own alias (else ``source``)."""
        from producer.delta import MergeBuilder, alias_of

        return MergeBuilder(
            self, source, condition, source_alias=alias_of(source) or "source", target_alias=self._alias or "target"
        )

    def optimize(self) -> Any:
        """Delta's OPTIMIZE builder: ``.where(partition)``, ``.executeCompaction()`` (MAJOR COMPACT) or
        ``.executeZOrderBy(cols)`` (CLUSTER BY)."""
        from producer.delta import OptimizeBuilder

        return OptimizeBuilder(self)

    def vacuum(self, retentionHours: float | None = None, *, dry_run: bool = False) -> list[str]:
        """Delete files no version within ``retentionHours`` (default 168) references; the paths deleted.

        Delta's safety floor: less than 168 hours is refused unless the Spark conf
        ``spark.databricks.delta.retentionDurationCheck.enabled`` is ``false``.
        """
        from ordo.vacuum import VacuumError, apply_vacuum, plan_vacuum

        hours = DEFAULT_RETENTION_HOURS if retentionHours is None else float(retentionHours)
        if hours < DEFAULT_RETENTION_HOURS:
            check = self.spark.conf.get(RETENTION_CHECK_CONF, "true")
            if str(check).lower() != "false":
                raise VacuumError(
                    f"vacuum with a retention of {hours:g} hours is below the safety floor of "
                    f"{DEFAULT_RETENTION_HOURS} hours; set {RETENTION_CHECK_CONF}=false to allow it"
                )
        # Below the floor only with Delta's check off; that also lifts the table's ordo.retention_hours (RESTORE).
        force = str(self.spark.conf.get(RETENTION_CHECK_CONF, "true")).lower() == "false"
        plan = plan_vacuum(self._conn.catalog, self.name, hours, force=force)
        if dry_run:
            return [f.path for f in plan.files]
        deleted: list[str] = []
        apply_vacuum(self._conn.catalog, plan, on_delete=lambda f: deleted.append(f.path))
        return deleted

    def restoreToVersion(self, version: int, *, rewrite: bool = False) -> CommitResult | None:
        """Make the table what it was at ID ``version``: one RESTORE commit, metadata only (no data is written).

        The commit re-adds the files live at ``version`` that are not live now
        and the arbiter removes every file live now that was not then (files
        of partitions created since included; restoring an empty version
        empties the table). The arbiter checks that every re-added file was
        live at ``version`` and was removed within the table's
        ``ordo.retention_hours`` (``FILE_VACUUMED`` otherwise: restore with
        ``rewrite=True``). ``rewrite=True``: one whole-table INSERT OVERWRITE of
        that snapshot's rows instead (new files, the old behaviour). Raises
        ``CommitConflictError`` with the arbiter's reason when rejected.
        """
        if rewrite:
            return self.insert_overwrite(self.read(version=int(version)), whole_table=True)
        return self._restore(self._conn.catalog.snapshot(self.name, version=int(version)))

    def restoreToTimestamp(self, timestamp: datetime | str, *, rewrite: bool = False) -> CommitResult | None:
        """Make the table what it was as of ``timestamp``: ``restoreToVersion`` of the version readers saw then."""
        if rewrite:
            return self.insert_overwrite(self.read(timestamp=timestamp), whole_table=True)
        return self._restore(self._conn.catalog.snapshot(self.name, timestamp=timestamp))

    def _restore(self, target: Any) -> CommitResult:
        head = self._conn.catalog.snapshot(self.name)
        live = {f.path for f in head.files}
        added = tuple(
            DataFile(
                path=f.path,
                partition=dict(f.partition),
                record_count=f.record_count,
                size_bytes=f.size_bytes,
                min_key=f.min_key,
                max_key=f.max_key,
                bucket=f.bucket,
            )
            for f in target.files
            if f.path not in live
        )
        if len(added) > MAX_FILES_PER_INTENT:
            raise InvalidOperationError(
                f"restoring version {target.id_version} re-adds {len(added)} files, more than the "
                f"{MAX_FILES_PER_INTENT} one commit may name: restore with rewrite=True"
            )
        intent = CommitIntent(
            txn_id=uuid.uuid4().hex,
            table=self.name,
            operation=Operation.RESTORE,
            read_version=head.id_version,
            added_files=added,
            writer=self._writer,
            restore_version=target.id_version,
        )
        return self._commit_now(intent, f"RESTORE {self.name} TO VERSION {target.id_version}")

    def _commit_now(self, intent: CommitIntent, what: str) -> CommitResult:
        """Commit an intent that needs no Spark work (metadata, file actions the catalog knows): the decision, or
        ``CommitConflictError`` naming ``what``; returns once the catalog shows the version."""
        started = time.perf_counter()
        decision = self._conn.client.commit(intent, timeout=self.commit_timeout)
        if not decision.accepted or decision.id_version is None:
            raise conflict_error(decision, what)
        result = CommitResult(
            txn_id=intent.txn_id,
            id_version=decision.id_version,
            time_version=decision.time_version,
            operation=intent.operation,
            commit_seconds=time.perf_counter() - started,
            decision=decision,
        )
        self._wait_for_catalog(decision.id_version, result)
        return result

    def compact(
        self, mode: str = "minor", partition: Mapping[str, Any] | None = None, *, bucket: int | None = None
    ) -> CommitResult | None:
        """MINOR or MAJOR COMPACT of one partition or the whole table (one bucket of each when ``bucket`` is
        given; see ``Transaction.compact``); None when there was nothing to compact."""
        return self._run(lambda t: t.compact(mode, partition, bucket=bucket))

    def cluster(
        self, by: str | Sequence[str], partition: Mapping[str, Any] | None = None, *, bucket: int | None = None
    ) -> CommitResult | None:
        """CLUSTER BY ``by``: rewrite live rows sorted by those columns; None when there are no files."""
        return self._run(lambda t: t.cluster(by, partition, bucket=bucket))

    # ------------------------------------------------------------------ reads (delegated to the consumer)

    def read(self, version: int | None = None, timestamp: datetime | str | None = None) -> DataFrame:
        """The table as a DataFrame at the head, an ID ``version`` or a ``timestamp`` (time travel): merge-on-read,
        each (partition, bucket) in one task (no shuffle)."""
        from consumer.spark import read

        return read(self.spark, self.name, version=version, timestamp=timestamp, catalog=self._conn.catalog)

    def toDF(self) -> DataFrame:
        """Delta's name for ``read()``: the table at the head (under ``alias()``'s name when given)."""
        df = self.read()
        return df.alias(self._alias) if self._alias else df

    def changes(self, start: Any, end: Any = None, by: str = "id", form: str = "compact") -> DataFrame:
        """The change feed between two ID versions (``by="id"``) or time versions (``by="time"``), both inclusive.

        ``end=None`` is the head. ``form="compact"`` (the default, for compatibility): ``_change_type`` is
        ``upsert``/``delete``/``truncate`` with ``_scope``; ``form="delta"``: Delta's ``insert``,
        ``update_preimage``, ``update_postimage``, ``delete`` with full rows (what ``format("ordo")`` gives).
        Both add ``_commit_version`` and ``_commit_timestamp``.
        """
        from consumer.arrow import DELTA_FORM, check_form

        if check_form(form) == DELTA_FORM:
            from ordo.datasource import settings_options

            reader = self.spark.read.format("ordo").options(**settings_options(self.settings))
            reader = reader.option("readChangeFeed", "true")
            if by == "id":
                reader = reader.option("startingVersion", int(start))
                if end is not None:
                    reader = reader.option("endingVersion", int(end))
            elif by == "time":
                reader = reader.option("startingTimestamp", _stamp_text(start))
                if end is not None:
                    reader = reader.option("endingTimestamp", _stamp_text(end))
            else:
                raise ValueError(f"by must be 'id' or 'time', not {by!r}")
            return reader.load(self.name)
        from consumer.spark import changes

        return changes(self.spark, self.name, start, end, by=by, catalog=self._conn.catalog)

    def history(self, limit: int | None = None, *, include_rejected: bool = False) -> DataFrame:
        """Delta's DESCRIBE HISTORY as a DataFrame, newest first: ``version``, ``timestamp``, ``operation``,
        ``operationParameters``, ``readVersion``, then ordo's ``outcome``, ``reason``, ``rebase`` and more.

        Only accepted commits unless ``include_rejected`` (their ``version`` is null). ``decisions()`` gives
        the records themselves.
        """
        from producer.delta import HISTORY_SCHEMA, history_rows

        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise InvalidOperationError(f"history(limit): a positive number of commits, not {limit!r}")
        records = self._conn.catalog.history(self.name, limit, accepted_only=not include_rejected)
        return self.spark.createDataFrame(history_rows(records), HISTORY_SCHEMA)

    def decisions(self, limit: int | None = None) -> list[Any]:
        """The table's decision records (accepted and rejected), newest first, from the catalog."""
        return list(self._conn.catalog.history(self.name, limit))

    def snapshot(self, version: int | None = None) -> Any:
        """The catalog's snapshot (live files) at ``version`` (default: head)."""
        return self._conn.catalog.snapshot(self.name, version=version)

    # ------------------------------------------------------------------ internals

    def _wait_for_catalog(self, version: int, result: CommitResult | None) -> None:
        try:
            self._conn.catalog.wait_for_version(self.name, version, timeout=self.catalog_timeout)
        except TimeoutError as exc:
            raise CatalogLagError(
                f"table {self.name} committed version {version}, but the catalog {self.settings.catalog!r} did not "
                f"show it within {self.catalog_timeout:g} s (is `ordo consumer` running for prefix "
                f"{self.settings.topic_prefix!r}?)",
                result,
            ) from exc


# --------------------------------------------------------------------------- Transaction

_OPEN, _STAGED, _COMMITTED, _ABORTED, _FAILED, _UNKNOWN = "open", "staged", "committed", "aborted", "failed", "unknown"


class Transaction:
    """One optimistic transaction on a table, pinned to ``read_version``; exactly one operation.

    The operation methods only stage data (Spark writes the files); ``commit()``
    publishes the intent and waits. Leaving a ``with`` block without commit, or
    ``abort()``, deletes the staged files. When ``commit()`` times out the
    outcome is unknown: the files are kept and ``commit()`` may be called again
    (the same txn id always gets the same decision).
    """

    def __init__(
        self, table: DeltaTable, read_version: int, *, app_id: str | None = None, batch_id: int | None = None
    ) -> None:
        if (app_id is None) != (batch_id is None):
            raise ValueError("app_id and batch_id go together")
        self.table = table
        self.read_version = read_version
        self.app_id = app_id
        self.batch_id = batch_id
        self.txn_id = uuid.uuid4().hex
        self.operation: Operation | None = None
        self.partitions: tuple[dict[str, str], ...] | None = None
        self.added_files: tuple[DataFile, ...] = ()
        self.removed_files: tuple[str, ...] = ()
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
    def state(self) -> str:
        """open, staged, committed, aborted, failed (rejected), or unknown (commit timed out)."""
        return self._state

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> Transaction:
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
                raise

    def row_id_prefix(self) -> str:
        """A new prefix for a keyless table's new row ids (``producer.data.with_row_ids``): unique per call."""
        self._row_writes += 1
        return f"{self.txn_id}:{self._row_writes}:"

    def _user_rows(self, df: DataFrame) -> DataFrame:
        """``df`` conformed to the table as users write it, with new row ids for a keyless table."""
        from producer.data import conform, with_row_ids

        layout = self.table.layout
        return with_row_ids(conform(df, layout.user_schema()), layout, self.row_id_prefix())

    def _file_writer(self) -> FileWriter:
        from producer.data import FileWriter

        if self._writer is None:
            self._writer = FileWriter(self.table.spark, self.table.layout, self.txn_id)
        return self._writer

    def _staged(
        self,
        files: Sequence[DataFile],
        partitions: Sequence[Mapping[str, str]] | None,
        removed: Sequence[str] = (),
        noop: bool = False,
    ) -> Transaction:
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
        self.write_seconds += stats.spark_seconds + stats.finish_seconds
        self._time("spark_write", stats.spark_seconds)
        self._time("finish_files", stats.finish_seconds)
        return list(stats.files)

    def _time(self, phase: str, seconds: float) -> None:
        self.timings[phase] = self.timings.get(phase, 0.0) + seconds

    def _validate(self, rows: DataFrame, static: Mapping[str, str] | None = None, *, keys: bool | None = None) -> None:
        from producer.data import validate_records

        started = time.perf_counter()
        validate_records(rows, self.table.layout, static, keys=keys)
        seconds = time.perf_counter() - started
        self.write_seconds += seconds
        self._time("validate", seconds)

    def _static(self, partition: Mapping[str, Any] | None) -> dict[str, str] | None:
        from producer.data import canonical_partition

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
        from consumer.spark import read_snapshot

        snapshot = self.pinned_snapshot()
        if partitions is not None:
            wanted = [dict(p) for p in partitions]
            files = tuple(f for f in snapshot.files if dict(f.partition) in wanted)
            snapshot = dataclasses.replace(snapshot, files=files)
        return read_snapshot(self.table.spark, snapshot)

    # ------------------------------------------------------------------ operations (stage only)

    def insert_into(self, df: DataFrame) -> Transaction:
        """Stage INSERT INTO: the rows become upsert records. Scope: the partitions written."""
        from producer.data import upsert_records

        with self._stage(Operation.INSERT_INTO):
            rows = self._user_rows(df)
            self._validate(rows)
            files = self._write(upsert_records(rows))
            return self._staged(files, self._partitions_of(files), noop=not files)

    def insert_overwrite(
        self, df: DataFrame, partition: Mapping[str, Any] | None = None, *, whole_table: bool = False
    ) -> Transaction:
        """Stage INSERT OVERWRITE of the table, of static ``partition``, or of the partitions present in ``df``.

        With a static partition the DataFrame may leave the partition columns
        out (they are filled in); rows outside the partition are refused.
        Dynamic overwrite with an empty DataFrame overwrites nothing (a no-op).
        ``whole_table=True`` replaces every partition of a partitioned table,
        also those ``df`` has no row in (an empty ``df`` empties the table).
        """
        from producer.data import upsert_records, with_static_partition

        layout = self.table.layout
        if whole_table and partition is not None:
            raise InvalidOperationError("give a partition or whole_table=True, not both")
        with self._stage(Operation.INSERT_OVERWRITE):
            static = self._static(partition)
            if static is not None:
                df = with_static_partition(df, layout, static)
            rows = self._user_rows(df)
            self._validate(rows, static)
            files = self._write(upsert_records(rows))
            if not layout.partition_columns or whole_table:
                return self._staged(files, None)
            if static is not None:
                return self._staged(files, [static])
            return self._staged(files, self._partitions_of(files), noop=not files)

    def truncate(self, partition: Mapping[str, Any] | None = None) -> Transaction:
        """Stage TRUNCATE of the table or of one partition (no files; the arbiter removes the live ones)."""
        with self._stage(Operation.TRUNCATE):
            static = self._static(partition)
            return self._staged((), None if static is None else [static])

    def update(
        self,
        set: Mapping[str, str | Column],
        where: str | Column | None = None,
        *,
        partition: Mapping[str, Any] | None = None,
        partitions: Sequence[Mapping[str, Any]] | None = None,
    ) -> Transaction:
        """Stage UPDATE: upsert records with new values for the keys matching ``where`` in the pinned snapshot.

        Key and partition columns cannot be set. Scope: ``partition`` (or the
        several ``partitions``, e.g. from ``partitions_of_condition``; only their
        files are read) when given, else the whole table (the condition read
        every partition).
        """
        from producer.data import filtered, update_records

        layout = self.table.layout
        with self._stage(Operation.UPDATE):
            static, scope = self._scope(partition, partitions)
            rows = filtered(self._read_in(scope), layout, where, static)
            files = self._write(update_records(rows, layout, set))
            return self._staged(files, scope)

    def delete(
        self,
        where: str | Column | None = None,
        *,
        partition: Mapping[str, Any] | None = None,
        partitions: Sequence[Mapping[str, Any]] | None = None,
    ) -> Transaction:
        """Stage DELETE: delete records for the keys matching ``where`` in the pinned snapshot (scope as UPDATE's)."""
        from producer.data import delete_records, filtered

        layout = self.table.layout
        with self._stage(Operation.DELETE):
            static, scope = self._scope(partition, partitions)
            files = self._write(delete_records(filtered(self._read_in(scope), layout, where, static), layout))
            return self._staged(files, scope)

    def _scope(
        self, partition: Mapping[str, Any] | None, partitions: Sequence[Mapping[str, Any]] | None
    ) -> tuple[dict[str, str] | None, list[dict[str, str]] | None]:
        """``(the one static partition or None, the scope: canonical partitions or None for the whole table)``."""
        if partition is not None and partitions is not None:
            raise InvalidOperationError("give partition= or partitions=, not both")
        if partitions is None:
            static = self._static(partition)
            return static, None if static is None else [static]
        from producer.data import canonical_values

        layout = self.table.layout
        columns = layout.partition_columns
        if not columns:
            raise InvalidOperationError(f"table {layout.name!r} is not partitioned; do not pass partitions=")
        if not partitions:
            raise InvalidOperationError("partitions= names no partition (use None for the whole table)")
        for p in partitions:
            if not isinstance(p, Mapping) or set(p) != set(columns):
                raise InvalidOperationError(f"partition {p!r} must name exactly the partition columns {list(columns)}")
        texts = {c: canonical_values(self.table.spark, layout, c, [p[c] for p in partitions]) for c in columns}
        scope: dict[tuple[str, ...], dict[str, str]] = {}
        for p in partitions:
            key = tuple(texts[c][p[c]] for c in columns)
            if any(v is None for v in key):
                raise PartitionValueError(f"partition {dict(p)!r} has a value that is null, empty or not of its type")
            scope.setdefault(key, dict(zip(columns, key, strict=True)))  # type: ignore[arg-type]
        return None, [scope[k] for k in sorted(scope)]  # type: ignore[type-var]

    def partitions_of_condition(
        self,
        condition: str | Column | None,
        *,
        target_alias: str | None = None,
        source: DataFrame | None = None,
        source_alias: str | None = None,
    ) -> list[dict[str, str]] | None:
        """The partitions of the pinned snapshot (and those it names by equality) whose rows ``condition`` can
        match, canonical, or None for the whole table: from Spark's analysis of it (``producer.scope``)."""
        from producer.scope import condition_scope

        columns = self.table.layout.partition_columns
        partitions = {tuple(f.partition.get(c, "") for c in columns) for f in self.pinned_snapshot().files}
        return condition_scope(
            self.table.spark,
            self.table.layout,
            condition,
            [dict(zip(columns, key, strict=True)) for key in sorted(partitions)],
            target_alias=target_alias,
            source=source,
            source_alias=source_alias,
        )

    def compact(
        self,
        mode: str = "minor",
        partition: Mapping[str, Any] | None = None,
        *,
        bucket: int | None = None,
        files: Sequence[str] | None = None,
    ) -> Transaction:
        """Stage MINOR or MAJOR COMPACT of the (partition, bucket) groups in scope holding at least two live files.

        MINOR keeps per key the newest record, delete records included, and
        rewrites each such (partition, bucket) alone; ``bucket`` limits it to
        that bucket of each partition in scope, ``files`` to those live paths
        (taken together per partition). MAJOR writes base files of live rows
        only and rewrites every file of each partition holding such a group, or
        with ``bucket`` that bucket's files (the arbiter refuses it while another
        bucket of the partition holds data it read: INCOMPLETE_REWRITE). Output
        records keep their effective sequence number in ``_ordo_seq`` and are
        split by bucket; the inputs are the removed files. With nothing to
        compact the transaction is a no-op.
        """
        operation = {"minor": Operation.MINOR_COMPACT, "major": Operation.MAJOR_COMPACT}.get(str(mode).lower())
        if operation is None:
            raise InvalidOperationError(f"compact mode must be 'minor' or 'major', not {mode!r}")
        if files is not None and operation is not Operation.MINOR_COMPACT:
            raise InvalidOperationError("only a MINOR compaction may take a subset of a partition's files")
        with self._stage(operation):
            return self._rewrite(str(mode).lower(), partition, min_files=2, sort_by=(), bucket=bucket, files=files)

    def cluster(
        self, by: str | Sequence[str], partition: Mapping[str, Any] | None = None, *, bucket: int | None = None
    ) -> Transaction:
        """Stage CLUSTER BY: rewrite the live rows of each partition in scope (of ``bucket`` when given) sorted by
        ``by``, split by bucket."""
        columns = (by,) if isinstance(by, str) else tuple(by)
        names = [f.name for f in self.table.schema.fields]
        unknown = [c for c in columns if c not in names]
        if not columns or unknown:
            raise InvalidOperationError(f"cluster by needs table columns; unknown {unknown or 'none given'} in {names}")
        with self._stage(Operation.CLUSTER):
            return self._rewrite("cluster", partition, min_files=1, sort_by=columns, bucket=bucket)

    def _rewrite(
        self,
        mode: str,
        partition: Mapping[str, Any] | None,
        *,
        min_files: int,
        sort_by: Sequence[str],
        bucket: int | None = None,
        files: Sequence[str] | None = None,
    ) -> Transaction:
        from producer.data import read_files, rewrite_records, target_file_count

        layout = self.table.layout
        static = self._static(partition)
        if bucket is not None and (type(bucket) is not int or not 0 <= bucket < layout.buckets):
            raise InvalidOperationError(f"bucket {bucket!r} is not a bucket of this table (0..{layout.buckets - 1})")
        wanted_paths = None if files is None else set(files)
        # Groups are (partition, bucket): all records of a key are in its bucket's files. MINOR rewrites each
        # group with min_files files alone (with ``files``: the given files of each partition together). MAJOR
        # and CLUSTER take whole partitions (every bucket, or only ``bucket`` when given: the arbiter refuses
        # it with INCOMPLETE_REWRITE while another bucket of the partition holds data the rewrite read).
        groups: dict[tuple[tuple[str, ...], int], list[Any]] = {}
        for entry in self.pinned_snapshot().files:
            key = tuple(entry.partition.get(c, "") for c in layout.partition_columns)
            if static is not None and key != tuple(static[c] for c in layout.partition_columns):
                continue
            if (bucket is not None and entry.bucket != bucket) or (
                wanted_paths is not None and entry.path not in wanted_paths
            ):
                continue
            groups.setdefault((key, entry.bucket), []).append(entry)
        if mode == "minor" and wanted_paths is None:
            chosen = [group for _, group in sorted(groups.items()) if len(group) >= min_files]
        else:
            whole: dict[tuple[str, ...], list[Any]] = {}
            for (key, _), group in sorted(groups.items()):
                whole.setdefault(key, []).extend(group)
            if mode == "minor":
                chosen = [group for _, group in sorted(whole.items()) if len(group) >= min_files]
            else:
                busy = {key for (key, _), group in groups.items() if len(group) >= min_files}
                chosen = [group for key, group in sorted(whole.items()) if key in busy]
        inputs = self._rewrite_inputs(mode, chosen)
        scope = None if static is None else [static]
        if not inputs:
            return self._staged((), scope, noop=True)
        records = rewrite_records(
            read_files(self.table.spark, layout, [(e.absolute_path, e.added_version) for e in inputs]), layout, mode
        )
        target = None if layout.partition_columns else target_file_count(sum(e.size_bytes for e in inputs), layout)
        written = self._write(records, sort_by=sort_by, target_files=target)
        return self._staged(written, scope, removed=sorted(e.path for e in inputs))

    @staticmethod
    def _rewrite_inputs(mode: str, groups: list[list[Any]]) -> list[Any]:
        """Whole groups up to MAX_REWRITE_INPUTS files; MINOR may take the oldest files of a larger one.

        A group is a (partition, bucket) for MINOR, a partition for MAJOR and
        CLUSTER: they drop delete records and superseded rows, which is only
        correct when every live file holding the group's keys is an input (the
        arbiter checks it per partition).
        """
        inputs: list[Any] = []
        for files in groups:
            if len(inputs) + len(files) <= MAX_REWRITE_INPUTS:
                inputs.extend(files)
            elif not inputs and mode == "minor":
                inputs.extend(sorted(files, key=lambda f: (f.added_version, f.path))[:MAX_REWRITE_INPUTS])
            elif not inputs:
                raise InvalidOperationError(
                    f"a partition has {len(files)} live files, more than one {mode} rewrite may read "
                    f"({MAX_REWRITE_INPUTS}); run compact('minor') on it first"
                )
        return inputs

    # ------------------------------------------------------------------ commit

    def intent(self) -> CommitIntent:
        """The intent ``commit()`` publishes (the staged operation and files)."""
        if self.operation is None:
            raise TransactionStateError(f"transaction {self.txn_id} has no operation staged")
        return CommitIntent(
            txn_id=self.txn_id,
            table=self.table.name,
            operation=self.operation,
            read_version=self.read_version,
            partitions=self.partitions,
            added_files=self.added_files,
            removed_files=self.removed_files,
            app_id=self.app_id,
            batch_id=self.batch_id,
            writer=self.table._writer,
        )

    def commit(self, timeout: float | None = None, *, retries: int = 0) -> CommitResult | None:
        """Publish the intent, wait for the decision, then for the catalog to show the new version.

        Returns the ``CommitResult``, or None for a no-op (nothing to insert or
        compact: nothing is published). Raises ``CommitConflictError`` on a
        rejection (staged files deleted), ``CommitTimeoutError`` when no
        decision came (files kept; call ``commit()`` again), and
        ``CatalogLagError`` when the commit was accepted but the catalog lags.
        ``retries`` (INSERT INTO only) re-pins and republishes the same files
        after a CONFLICT_LATER_FAILS rejection, at most that many times.
        """
        with self._lock:
            if self._state == _COMMITTED:
                return self.result
            if self._state not in (_STAGED, _UNKNOWN):
                raise TransactionStateError(f"transaction {self.txn_id} is {self._state}; nothing to commit")
            if retries and self.operation is not Operation.INSERT_INTO:
                raise InvalidOperationError("metadata-level retries are only safe for INSERT INTO (it reads nothing)")
            if self._noop:
                self._state = _COMMITTED
                self._writer = None
                return None
            return self._publish(self.table.commit_timeout if timeout is None else timeout, retries)

    def _publish(self, timeout: float, retries: int) -> CommitResult:
        table = self.table
        client = table._conn.client
        attempts = 0
        started = time.perf_counter()
        while True:
            attempts += 1
            try:
                decision = client.commit(self.intent(), timeout=timeout)
            except CommitTimeoutError:
                self._state = _UNKNOWN  # maybe accepted: keep the files, let the caller retry commit()
                raise
            if decision.accepted:
                break
            if retries > 0 and decision.reason == CONFLICT_LATER_FAILS:
                retries -= 1
                self._repin(decision)
                continue
            self._discard()
            self._state = _FAILED
            raise conflict_error(decision, f"{self.operation.value if self.operation else 'txn'} {self.txn_id}")
        assert decision.id_version is not None
        result = CommitResult(
            txn_id=self.txn_id,
            id_version=decision.id_version,
            time_version=decision.time_version,
            operation=self.operation,
            added_files=self.added_files,
            removed_files=tuple(decision.removed_files) or self.removed_files,
            rebase=decision.rebase,
            write_seconds=self.write_seconds,
            commit_seconds=time.perf_counter() - started,
            attempts=attempts,
            decision=decision,
        )
        self._state = _COMMITTED
        self.result = result
        self._writer = None
        self._time("publish_decision", result.commit_seconds)
        started = time.perf_counter()
        table._wait_for_catalog(decision.id_version, result)
        self._time("catalog_wait", time.perf_counter() - started)
        return result

    def _repin(self, decision: CommitDecision) -> None:
        """Metadata-level retry: a new txn id on the newer head, the same files."""
        catalog = self.table._conn.catalog
        if decision.conflicting_version is not None:
            self.table._wait_for_catalog(decision.conflicting_version, None)
        head = int(catalog.table(self.table.name).head_version)
        log.info(
            "txn %s of %s rejected (%s, conflicting %s@%s); retrying on version %d",
            self.txn_id,
            self.table.name,
            decision.reason,
            decision.conflicting_txn_id,
            decision.conflicting_version,
            head,
        )
        self.read_version = max(self.read_version, head)
        self.txn_id = uuid.uuid4().hex
        self._snapshot = None
        time.sleep(RETRY_BACKOFF)

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


__all__ = [
    "CatalogLagError",
    "CommitConflictError",
    "CommitResult",
    "DeltaTable",
    "InvalidOperationError",
    "InvalidTableError",
    "PartitionValueError",
    "PrimaryKeyError",
    "SchemaMismatchError",
    "TableExistsError",
    "Transaction",
    "TransactionStateError",
    "WriteRefusedError",
    "close_connections",
]
