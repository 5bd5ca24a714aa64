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

``DeltaTable.replace(spark)`` and ``createOrReplace(spark)`` give a builder
whose ``execute()`` refuses to run: replacing a table's definition and data in
one commit is not an ordo operation yet.
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
CLUSTER_BY_PROPERTY = "ordo.cluster_by"  # read by the table service (ordo.compactor)
MODES = ("create", "createIfNotExists", "replace", "createOrReplace")


def _names(columns: tuple[str | Sequence[str], ...]) -> list[str]:
    flat: list[str] = []
    for c in columns:
        flat.extend([c] if isinstance(c, str) else list(c))
    return flat


class DeltaTableBuilder:
    """Collects a table definition; ``execute()`` creates the table (see the module docstring)."""

    def __init__(self, spark: SparkSession, mode: str, **connection: Any) -> None:
        if mode not in MODES:
            raise InvalidOperationError(f"builder mode {mode!r} is not one of {MODES}")
        self._spark = spark
        self._mode = mode
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

        from ordo.producer.table import DeltaTable

        if self._mode in ("replace", "createOrReplace"):
            raise InvalidOperationError(
                f"DeltaTable.{self._mode}: replacing a table's definition and data in one commit is not supported "
                "yet; use DeltaTable.create for a new table, alter() to add columns, insert_overwrite for the data"
            )
        if not self._name:
            raise InvalidTableError("name the table: .tableName('events')")
        if not self._fields:
            raise InvalidTableError(f"table {self._name!r} needs columns: .addColumn(...) or .addColumns(...)")
        properties = dict(self._properties)
        named = [c.strip() for c in properties.pop(PRIMARY_KEY_PROPERTY, "").split(",") if c.strip()]
        if named and self._key and named != self._key:
            raise InvalidTableError(f"primaryKey {self._key} and property {PRIMARY_KEY_PROPERTY}={named} disagree")
        key = self._key or named or None  # none: a keyless table, Delta's default
        create = DeltaTable.createIfNotExists if self._mode == "createIfNotExists" else DeltaTable.create
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
