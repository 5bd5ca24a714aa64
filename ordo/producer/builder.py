"""Delta's ``DeltaTableBuilder``: ``DeltaTable.create(spark).tableName(...).addColumns(...).execute()``.

The builder collects a definition and ends in ``DeltaTable.create`` (or
``createIfNotExists``), the one place a table is made. Delta's calls map as:

``tableName``/``location``/``addColumn``/``addColumns``/``partitionedBy``
    the table's name, location, schema (in order) and partition columns.
``clusterBy``
    the columns the table service clusters by (the property ``ordo.cluster_by``).
``property``/``comment``
    table properties (``comment`` is the property ``comment``).
``primaryKey``
    ordo's: the key merge-on-read orders records by (also the property
    ``ordo.primaryKey``). Every ordo table has one today.

``DeltaTable.replace(spark)`` and ``createOrReplace(spark)`` (Delta's
meaning): the existing table's schema becomes the definition's and its data is
removed, in one commit that keeps the history (a whole-table INSERT OVERWRITE
with no rows that carries the new metadata, as ``overwriteSchema``); ``replace``
of a table that does not exist raises ``TableNotFoundError``, ``createOrReplace``
creates it. The primary key, partition columns, location and properties cannot
change that way (files are bucketed and placed by the first two, a write
carries no property change): a definition that changes them is refused naming
them, before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ordo.producer.data import InvalidOperationError, InvalidTableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructField, StructType

    from ordo.producer.table import DeltaTable

PRIMARY_KEY_PROPERTY = "ordo.primaryKey"
CLUSTER_BY_PROPERTY = "ordo.cluster_by"  # read by the table service (ordo.services.compactor)
MODES = ("create", "createIfNotExists", "replace", "createOrReplace")


def _names(columns: tuple[str | Sequence[str], ...]) -> list[str]:
    flat: list[str] = []
    for c in columns:
        flat.extend([c] if isinstance(c, str) else list(c))
    return flat


class DeltaTableBuilder:
    """Collects a table definition; ``execute()`` creates the table (see the module docstring)."""

    def __init__(self, spark: SparkSession, mode: str, table_class: type[DeltaTable], **connection: Any) -> None:
        """``table_class``: the ``DeltaTable`` class ``execute()`` creates or opens (the one whose builder this is)."""
        if mode not in MODES:
            raise InvalidOperationError(f"builder mode {mode!r} is not one of {MODES}")
        self._spark = spark
        self._mode = mode
        self._table_class = table_class
        self._connection = connection
        self._name: str | None = None
        self._location: str | None = None
        self._fields: list[StructField] = []
        self._partitions: list[str] = []
        self._key: list[str] = []
        self._properties: dict[str, str] = {}

    def tableName(self, identifier: str) -> DeltaTableBuilder:
        self._name = identifier
        return self

    def location(self, location: str) -> DeltaTableBuilder:
        self._location = location
        return self

    def addColumn(
        self, colName: str, dataType: Any, nullable: bool = True, generatedAlwaysAs: str | None = None,
        comment: str | None = None,
    ) -> DeltaTableBuilder:  # fmt: skip
        """One column: ``dataType`` a DDL type name (``"BIGINT"``) or a Spark ``DataType``."""
        from pyspark.sql.types import DataType, StructField

        from ordo.producer.data import parse_schema

        if generatedAlwaysAs is not None:
            raise InvalidTableError(f"column {colName!r}: generated columns are not supported")
        if isinstance(dataType, str):
            dataType = parse_schema(f"`{colName.replace('`', '``')}` {dataType}")[0].dataType
        if not isinstance(dataType, DataType):
            raise InvalidTableError(f"column {colName!r}: dataType must be a type name or a Spark DataType")
        metadata = {"comment": comment} if comment is not None else {}
        self._fields.append(StructField(colName, dataType, nullable, metadata))
        return self

    def addColumns(self, cols: StructType | Sequence[StructField] | str) -> DeltaTableBuilder:
        """Several columns: a StructType, a list of StructFields, or a DDL string (``"id BIGINT, v STRING"``)."""
        from ordo.producer.data import parse_schema

        fields = parse_schema(cols).fields if isinstance(cols, str) else list(cols)
        self._fields.extend(fields)
        return self

    def partitionedBy(self, *cols: str | Sequence[str]) -> DeltaTableBuilder:
        self._partitions = _names(cols)
        return self

    def clusterBy(self, *cols: str | Sequence[str]) -> DeltaTableBuilder:
        self._properties[CLUSTER_BY_PROPERTY] = ",".join(_names(cols))
        return self

    def primaryKey(self, *cols: str | Sequence[str]) -> DeltaTableBuilder:
        self._key = _names(cols)
        return self

    def property(self, key: str, value: Any) -> DeltaTableBuilder:
        self._properties[str(key)] = str(value)
        return self

    def comment(self, comment: str) -> DeltaTableBuilder:
        self._properties["comment"] = comment
        return self

    def execute(self) -> DeltaTable:
        """Create the table (``createIfNotExists``: or open the one that exists) and return its handle."""
        from pyspark.sql.types import StructType

        table_class = self._table_class
        if not self._name:
            raise InvalidTableError("name the table: .tableName('events')")
        if not self._fields:
            raise InvalidTableError(f"table {self._name!r} needs columns: .addColumn(...) or .addColumns(...)")
        properties = dict(self._properties)
        named = [c.strip() for c in properties.pop(PRIMARY_KEY_PROPERTY, "").split(",") if c.strip()]
        if named and self._key and named != self._key:
            raise InvalidTableError(f"primaryKey {self._key} and property {PRIMARY_KEY_PROPERTY}={named} disagree")
        key = self._key or named or None  # none: a keyless table, Delta's default
        if self._mode in ("replace", "createOrReplace"):
            opening = {k: v for k, v in self._connection.items() if not k.endswith("_timeout") and k != "warehouse"}
            if table_class.exists(self._spark, self._name, **opening):
                return self._replace(StructType(self._fields), key, properties)
            if self._mode == "replace":
                from ordo.consumer.errors import TableNotFoundError

                raise TableNotFoundError(
                    f"DeltaTable.replace: table {self._name!r} does not exist (createOrReplace creates it)"
                )
        create = table_class.createIfNotExists if self._mode == "createIfNotExists" else table_class.create
        return create(
            self._spark,
            self._name,
            schema=StructType(self._fields),
            primary_key=key,
            partitioned_by=self._partitions,
            location=self._location,
            properties=properties or None,
            **self._connection,
        )

    def _replace(self, schema: StructType, key: list[str] | None, properties: dict[str, str]) -> DeltaTable:
        """Replace the existing table's schema and remove its data in one commit (see the module docstring)."""
        table_class = self._table_class
        assert self._name is not None
        handle_keys = ("settings", "bootstrap_servers", "topic_prefix", "catalog", "commit_timeout", "catalog_timeout")
        table = table_class.open(
            self._spark, self._name, **{k: v for k, v in self._connection.items() if k in handle_keys}
        )
        current = table.metadata
        # ordo.* properties the definition leaves out (buckets, policy) are the table's: they were chosen at creation
        wanted_properties = {k: v for k, v in current.properties.items() if k.startswith("ordo.")}
        wanted_properties.update(properties)
        wanted_key = tuple(key) if key else ()
        changes = [
            f"{what} {before!r} -> {after!r}"
            for what, before, after in (
                ("primary key", table.primary_key, wanted_key),
                ("partition columns", tuple(current.partition_columns), tuple(self._partitions)),
                ("location", current.location, self._absolute_location() or current.location),
                ("properties", dict(current.properties), wanted_properties),
            )
            if before != after
        ]
        if changes:
            raise InvalidTableError(
                f"DeltaTable.{self._mode}({self._name!r}): ordo replaces a table's schema and data, not its "
                f"{'; '.join(changes)} (files are bucketed and placed by key and partitions; alter() sets "
                "properties): create a new table for that"
            )
        empty = self._spark.createDataFrame([], schema)
        table.insert_overwrite(empty, whole_table=bool(current.partition_columns), overwrite_schema=True)
        return table

    def _absolute_location(self) -> str | None:
        from ordo.producer.connection import absolute_location

        return None if self._location is None else absolute_location(self._location)
