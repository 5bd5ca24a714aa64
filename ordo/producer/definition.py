"""A table's definition as the writer publishes it: the metadata a CREATE TABLE carries (checked, buckets chosen,
the location made absolute) and the metadata an ALTER TABLE carries.

Shared by ``DeltaTable`` (``producer.handle``, ``producer.metadata``) and by a ``format("ordo")`` write that
creates its table (``ordo.spark.datasource``); importing it imports neither Spark nor Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ordo.producer.connection import absolute_location
from ordo.producer.data import InvalidOperationError, InvalidTableError
from ordo.schemas import TableMetadata, validate_table_name
from ordo.schemas.operations import ROW_ID_COLUMN, ROW_ID_DDL, ROW_ID_KEY

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


def table_metadata(
    name: str,
    schema: str | StructType,
    primary_key: str | Sequence[str] | None,
    partitioned_by: str | Sequence[str],
    location: str | None,
    properties: Mapping[str, Any] | None,
    buckets: int | None,
    warehouse: str,
) -> TableMetadata:
    """The metadata ``create`` publishes: the definition checked, buckets chosen, the location made absolute.

    Raises ``InvalidTableError`` for a definition that cannot be a table.
    """
    from ordo.producer.buckets import BUCKETS_PROPERTY, BucketError, choose_buckets
    from ordo.producer.data import check_definition, parse_schema, schema_to_ddl

    validate_table_name(name)
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
        location = warehouse.rstrip("/") + "/" + name
    try:
        location = absolute_location(location)
    except ValueError as exc:  # kernel.objectstore.ObjectStoreError: an S3 location without a bucket
        raise InvalidTableError(str(exc)) from exc
    return TableMetadata(
        location=location,
        schema=ddl,
        primary_key=key,
        partition_columns=parts,
        properties=props,
    )


def altered_metadata(
    current: TableMetadata, add_columns: str | StructType | None, set_properties: Mapping[str, Any] | None
) -> TableMetadata:
    """The metadata an ALTER TABLE publishes: ``current`` with nullable columns appended and properties set.

    Raises ``InvalidOperationError`` when nothing would change, ``InvalidTableError`` for a bad definition.
    """
    from ordo.producer.data import check_definition, parse_schema, schema_to_ddl

    schema = current.schema
    if add_columns is not None:
        added = parse_schema(add_columns) if isinstance(add_columns, str) else add_columns
        if not added.fields:
            raise InvalidOperationError("add_columns names no column")
        schema = f"{schema}, {schema_to_ddl(added)}"
        check_definition(
            parse_schema(f"{current.user_schema}, {schema_to_ddl(added)}"), current.user_key, current.partition_columns
        )
    properties = {**current.properties, **{str(k): str(v) for k, v in (set_properties or {}).items()}}
    if schema == current.schema and properties == dict(current.properties):
        raise InvalidOperationError("alter needs add_columns or set_properties that change the table")
    return TableMetadata(
        location=current.location,
        schema=schema,
        primary_key=current.primary_key,
        partition_columns=current.partition_columns,
        properties=properties,
    )


__all__ = ["altered_metadata", "table_metadata"]
