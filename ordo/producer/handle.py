"""A table handle: which table, its metadata, how it is reached (``TableHandle``), and how to get one: create,
open, find by name or path, ``createIfNotExists`` and Delta's builders. ``DeltaTable`` (ordo/producer/table.py) is this
handle with the operations.

Importing this module imports neither Spark nor Kafka: both are loaded on use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, cast

from ordo.kernel.settings import Settings
from ordo.producer.commit import Change, Committer
from ordo.producer.connection import absolute_location, resolve_settings, shared_connection, writer_identity
from ordo.producer.data import InvalidTableError, Layout
from ordo.producer.definition import table_metadata
from ordo.producer.results import TableExistsError
from ordo.producer.transaction import Transaction
from ordo.schemas import Operation, TableMetadata, validate_table_name
from ordo.schemas.topics import table_identifier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from ordo.producer.client import CommitClient
    from ordo.producer.table import DeltaTable

DEFAULT_COMMIT_TIMEOUT = 60.0
DEFAULT_CATALOG_TIMEOUT = 60.0


def register_source(spark: SparkSession, settings: Settings) -> None:
    """Register the ``ordo`` data source with this session, defaulting to these settings (once per change)."""
    from ordo.spark import register, registered_settings

    if registered_settings(spark) != (True, settings):
        register(spark, settings)


class TableHandle:
    """A handle on one table: its name, metadata and connection, how to get one, and ``begin()``.

    ``DeltaTable`` (ordo/producer/table.py) adds the operations; get one with
    ``DeltaTable.create`` or ``DeltaTable.open``. Settings come from keyword
    arguments, else ``ORDO_*`` environment variables (``load_settings()``);
    handles with equal settings share one Kafka client and one catalog
    connection.
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
        self._writer = writer_identity(spark)
        register_source(spark, settings)

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
    ) -> Self:
        """Create a table: publish CREATE_TABLE, wait for the decision, then for the catalog to have it.

        ``schema`` is a Spark DDL string (``"id BIGINT, v STRING"``) or a
        StructType. ``location`` defaults to ``<warehouse>/<name>`` as an
        absolute path. ``name`` is a Spark identifier, as in ``forName``
        (``schemas.topics.table_identifier``): ``"Events"`` and ``"`EVENTS`"``
        create table ``events``; ``db.events`` or a name that is not
        ``[a-z][a-z0-9_]*`` once lower-cased raises ``InvalidNameError`` naming
        the rule. ``buckets`` (also the property ``ordo.buckets``) is the
        number of buckets per partition (default 4; 1 when a key type has no
        canonical text, see ``producer.buckets``). Raises ``TableExistsError`` if
        the table exists and ``InvalidTableError`` for a definition that cannot be a table.

        Without ``primary_key`` the table is keyless (Delta's default): INSERT INTO appends and keeps
        duplicates, concurrent appends never conflict, and a hidden row id (``_ordo_row_id``, never in what
        users read or write) is its internal key (docs/api.md, "Keyless tables").

        ``DeltaTable.create(spark)`` (no name) is Delta's builder: ``.tableName(...).addColumns(...)...execute()``
        (``producer.builder``).
        """
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
        name = table_identifier(name)  # Spark's rules, as forName: "Events" and `EVENTS` create table events
        if schema is None:
            raise InvalidTableError(f"DeltaTable.create({name!r}, ...) needs schema=")
        resolved = resolve_settings(
            settings,
            {
                "bootstrap_servers": bootstrap_servers,
                "topic_prefix": topic_prefix,
                "warehouse": warehouse,
                "catalog": catalog,
            },
        )
        metadata = table_metadata(
            name, schema, primary_key, partitioned_by, location, properties, buckets, resolved.warehouse
        )
        table = cls(
            spark,
            name,
            metadata,
            settings=resolved,
            commit_timeout=commit_timeout,
            catalog_timeout=catalog_timeout,
        )
        change = Change(name, Operation.CREATE_TABLE, metadata=metadata, writer=table._writer)
        table._committer().commit(change, f"CREATE TABLE {name}", read_version=0)
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
    ) -> Self:
        """Open an existing table from the catalog; ``TableNotFoundError`` if the catalog does not know it.

        ``name`` is a Spark identifier, as in ``forName``."""
        resolved = resolve_settings(
            settings, {"bootstrap_servers": bootstrap_servers, "topic_prefix": topic_prefix, "catalog": catalog}
        )
        name = table_identifier(name)
        info = shared_connection(resolved).catalog.table(name)
        return cls(
            spark,
            name,
            info.metadata,
            settings=resolved,
            commit_timeout=commit_timeout,
            catalog_timeout=catalog_timeout,
        )

    @classmethod
    def forName(cls, spark: SparkSession, name: str, **options: Any) -> Self:
        """Delta's name for ``open``: the table ``name`` (``TableNotFoundError`` if the catalog does not know it).

        ``name`` is a Spark identifier (``schemas.topics.table_identifier``): case-insensitive
        (``"Events"`` is table ``events``), backticks quote; ``db.table`` raises ``InvalidNameError``.
        """
        return cls.open(spark, name, **options)

    @classmethod
    def forPath(cls, spark: SparkSession, location: str, **options: Any) -> Self:
        """The table whose data lives at ``location`` (``TableNotFoundError`` if no table does)."""
        from ordo.consumer.errors import TableNotFoundError

        resolved = resolve_settings(
            options.pop("settings", None),
            {k: options.pop(k, None) for k in ("bootstrap_servers", "topic_prefix", "catalog")},
        )
        wanted = absolute_location(location).rstrip("/")
        for info in shared_connection(resolved).catalog.tables():
            if absolute_location(info.metadata.location).rstrip("/") == wanted:
                return cls.open(spark, info.name, settings=resolved, **options)
        raise TableNotFoundError(f"no table has its data at {location!r}")

    @classmethod
    def exists(cls, spark: SparkSession, name: str, **options: Any) -> bool:
        """True when the catalog knows table ``name``."""
        from ordo.consumer.errors import TableNotFoundError

        resolved = resolve_settings(
            options.pop("settings", None),
            {k: options.pop(k, None) for k in ("bootstrap_servers", "topic_prefix", "catalog")},
        )
        register_source(spark, resolved)  # like every DeltaTable call: format("ordo") works with these settings
        try:
            shared_connection(resolved).catalog.table(table_identifier(name))
        except TableNotFoundError:
            return False
        return True

    @classmethod
    def createIfNotExists(cls, spark: SparkSession, name: str | None = None, **definition: Any) -> Self:
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
        """Delta's ``replace`` builder: ``execute()`` replaces the existing table's schema and removes its data in one
        commit, history kept (``producer.builder``)."""
        return cls._builder(spark, "replace", None, None, **connection)

    @classmethod
    def createOrReplace(cls, spark: SparkSession, **connection: Any) -> Any:
        """Delta's ``createOrReplace`` builder: ``replace`` when the table exists, else ``create``
        (``producer.builder``)."""
        return cls._builder(spark, "createOrReplace", None, None, **connection)

    @classmethod
    def _builder(cls, spark: SparkSession, mode: str, schema: Any, primary_key: Any, **connection: Any) -> Any:
        from ordo.producer.builder import DeltaTableBuilder

        if schema is not None or primary_key is not None:
            raise InvalidTableError("the builder takes no schema= or primary_key=: name the table first")
        table_class = cast("type[DeltaTable]", cls)  # the builders are DeltaTable's
        return DeltaTableBuilder(spark, mode, table_class, **{k: v for k, v in connection.items() if v is not None})

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

    def _committer(self, timeout: float | None = None) -> Committer:
        """The one commit path (``producer.commit``), waiting ``timeout`` (default ``commit_timeout``) per decision."""
        return Committer(
            self._conn,
            timeout=self.commit_timeout if timeout is None else timeout,
            catalog_timeout=self.catalog_timeout,
        )
