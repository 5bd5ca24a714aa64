"""The bucket of a primary key: one stable function for the Spark writer, the pyarrow writer and tests.

A bucketed table (property ``ordo.buckets`` = N > 1) splits each partition's
data files by bucket: every record of a file is in the file's bucket
(``DataFile.bucket``), so all records of one key are in one bucket's files and
merge-on-read can merge each (partition, bucket) alone, in one task, without a
shuffle. The function (docs/architecture.md, "Buckets"):

    text(key)   = the key columns' canonical texts joined by U+001F
    bucket(key) = int(first 15 hex digits of md5(UTF-8 of text(key)), 16) mod N

A column's canonical text: integers (tinyint..bigint) in decimal, strings as
they are, booleans ``true``/``false``, dates ``YYYY-MM-DD``, timestamps their
microseconds since the epoch in decimal. Other key types (floating point,
decimal, binary, timestamp without time zone) have no text form both Spark and
pyarrow give identically: a table keyed by them has one bucket. Spark computes
it with built-ins (``md5``, ``conv``); pyarrow with ``hashlib``: the same value
in every process, Python version and Spark version (tests check fixed vectors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ordo.kernel.errors import OrdoError
from ordo.schemas.buckets import (
    BUCKETS_PROPERTY,
    HEX_DIGITS,
    MAX_BUCKETS,
    SEPARATOR,
    UNBUCKETED,
    bucket_of_text,
    table_buckets,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column
    from pyspark.sql.types import StructType

DEFAULT_BUCKETS = 4  # new tables whose key types all have a canonical text
# Spark type names (simpleString) whose canonical text both engines give identically.
BUCKETABLE_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "string", "boolean", "date", "timestamp"})


class BucketError(OrdoError, ValueError):
    """Raised for an invalid ``ordo.buckets`` value or a bucketed table whose key types cannot be bucketed."""


def bucketable(key_types: Sequence[str]) -> bool:
    """True when every key column type (Spark ``simpleString``) has a canonical text."""
    return all(t.lower() in BUCKETABLE_TYPES for t in key_types)


def choose_buckets(requested: Any, key_types: Sequence[str]) -> int:
    """The bucket count a new table gets: ``requested`` (validated), else the default for its key types."""
    if requested is None:
        return DEFAULT_BUCKETS if bucketable(key_types) else UNBUCKETED
    try:
        value = int(str(requested))
    except ValueError:
        raise BucketError(f"{BUCKETS_PROPERTY} must be an integer, not {requested!r}") from None
    if not 1 <= value <= MAX_BUCKETS:
        raise BucketError(f"{BUCKETS_PROPERTY} must be between 1 and {MAX_BUCKETS}, not {value}")
    if value > 1 and not bucketable(key_types):
        raise BucketError(
            f"a table with {value} buckets needs primary-key types among {sorted(BUCKETABLE_TYPES)}; "
            f"the key has {list(key_types)} (use buckets=1)"
        )
    return value


# --------------------------------------------------------------------------- Python / pyarrow


def _column_text(column: Any) -> Any:
    """A pyarrow column as canonical texts (see the module docstring)."""
    import pyarrow as pa

    t = column.type
    if pa.types.is_timestamp(t):
        column = column.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    elif pa.types.is_large_string(t):
        return column.cast(pa.string())
    elif not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_boolean(t) or pa.types.is_date32(t)):
        raise BucketError(f"key type {t} has no canonical text for bucketing")
    return column.cast(pa.string())


def key_texts(rows: pa.Table, primary_key: Sequence[str]) -> list[str]:
    """The canonical text of each row's key."""
    import pyarrow.compute as pc

    texts = [_column_text(rows.column(k)) for k in primary_key]
    joined = texts[0] if len(texts) == 1 else pc.binary_join_element_wise(*texts, SEPARATOR)
    return [str(v) for v in joined.to_pylist()]


def bucket_array(rows: pa.Table, primary_key: Sequence[str], buckets: int) -> pa.Array:
    """The bucket of each row (int32); all zeros for one bucket."""
    import pyarrow as pa

    if buckets <= 1:
        return pa.array([0] * rows.num_rows, pa.int32())
    return pa.array([bucket_of_text(t, buckets) for t in key_texts(rows, primary_key)], pa.int32())


# --------------------------------------------------------------------------- Spark


def bucket_column(schema: StructType, primary_key: Sequence[str], buckets: int) -> Column:
    """The bucket of each row as a Spark expression (built-ins only: no Python worker)."""
    from pyspark.sql import functions as F

    if buckets <= 1:
        return F.lit(0)
    parts = []
    for k in primary_key:
        column = F.col("`" + k.replace("`", "``") + "`")
        kind = schema[k].dataType.simpleString().lower()
        if kind not in BUCKETABLE_TYPES:
            raise BucketError(f"key column {k!r} of type {kind} has no canonical text for bucketing")
        if kind == "timestamp":
            column = F.unix_micros(column)
        parts.append(column.cast("string"))
    text = parts[0] if len(parts) == 1 else F.concat_ws(SEPARATOR, *parts)
    digest = F.substring(F.md5(text), 1, HEX_DIGITS)
    return F.pmod(F.conv(digest, 16, 10).cast("bigint"), F.lit(buckets)).cast("int")


__all__ = [
    "BUCKETABLE_TYPES",
    "BUCKETS_PROPERTY",
    "DEFAULT_BUCKETS",
    "BucketError",
    "bucket_array",
    "bucket_column",
    "bucket_of_text",
    "bucketable",
    "choose_buckets",
    "key_texts",
    "table_buckets",
]
