"""Small writes on the driver: when Spark's estimate of a write's rows is small, the rows come to the driver.

A Spark job costs, before any row is touched, its scheduling and, for ordo's
Python data sources, a Python worker for planning, one per task and one for
the commit; a shuffle costs a second stage. For a few rows that is most of a
write. ``driver_side`` says when a DataFrame is small enough to collect
instead (the session setting ``DRIVER_WRITE_CONF``); then ``FileWriter``
writes the collected records itself, with the ``RecordWrite`` its tasks run,
and ``data.validate_records`` groups the keys in Arrow instead of a shuffle.
Every expression (casts, buckets, CHECK constraints, partition checks) is
still Spark's, evaluated by the collection: only where the rows go changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ordo.kernel.settings import SettingsError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

# The session setting that bounds the driver-side write (``driver_side``): Spark's estimate of the records' size, in
# bytes, at or under which they are collected and written by the driver; 0 turns the driver-side write off.
DRIVER_WRITE_CONF = "spark.ordo.driverWrite.maxBytes"
# The records' check (``validate_records``, ``data.RecordCheck``): whether a row's partition value is bad.
BAD_PARTITION_COLUMN = "_ordo_badp"
# Spark's own bound for data it collects to the driver to broadcast (spark.sql.autoBroadcastJoinThreshold's default).
DEFAULT_DRIVER_WRITE_MAX_BYTES = 10 * 1024 * 1024
UNKNOWN_SIZE = 2**63 - 1  # Spark's estimate of a plan it cannot size (spark.sql.defaultSizeInBytes, Long.MaxValue)


def driver_write_max_bytes(spark: SparkSession) -> int:
    """The session's ``DRIVER_WRITE_CONF``; a value that is not a whole number of bytes is a ``SettingsError``."""
    text = str(spark.conf.get(DRIVER_WRITE_CONF, str(DEFAULT_DRIVER_WRITE_MAX_BYTES))).strip()
    try:
        return int(text)
    except ValueError:
        raise SettingsError(f"{DRIVER_WRITE_CONF} must be a whole number of bytes, got {text!r}") from None


def driver_side(df: DataFrame) -> bool:
    """Whether ``df`` is small enough to collect and write on the driver, with no Spark write job.

    The rule is Spark's own size estimate of the optimized plan (``stats().sizeInBytes``, the figure it compares
    with ``spark.sql.autoBroadcastJoinThreshold`` to decide that a relation fits on the driver) at or under
    ``DRIVER_WRITE_CONF``. A ``LocalRelation`` (SQL ``VALUES``) and ``spark.range`` are estimated from their
    rows, a file scan from its files' size; a plan Spark cannot size (an RDD, such as classic Spark's
    ``createDataFrame`` of a Python list; a Python data source, ``format("ordo")`` itself) is estimated at
    Long.MaxValue, too large for any bound but the largest. Spark Connect's DataFrames (no plan here) and
    streams take the job.
    """
    limit = driver_write_max_bytes(df.sparkSession)
    jdf = getattr(df, "_jdf", None)
    if limit <= 0 or jdf is None or df.isStreaming:
        return False
    try:
        size = int(str(jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))  # a Python int or a BigInt
    except Exception:  # py4j's errors: no estimate, no driver-side write
        return False
    # Spark's "no estimate" is Long.MaxValue, and a projection scales it past that: the largest limit takes any plan
    return min(size, UNKNOWN_SIZE) <= limit


def offending_groups(
    checked: DataFrame, identity: Sequence[str], primary_key: Sequence[str], limit: int
) -> list[dict[str, Any]] | None:
    """``validate_records``' check of small ``checked`` rows (the identity columns and ``_ordo_badp``), in Arrow.

    The groups of identity values that hold two rows, a null key or a bad partition value, each as
    ``validate_records``' grouping gives them (identity values, ``_ordo_n``, ``_ordo_badp``), at most ``limit``;
    None when Arrow cannot group the key's types (a nested key): the caller groups with Spark.
    """
    return offending_in(checked.coalesce(1).toArrow(), identity, primary_key, limit)  # one task, as the write's


def offending_in(
    rows: pa.Table, identity: Sequence[str], primary_key: Sequence[str], limit: int
) -> list[dict[str, Any]] | None:
    """``offending_groups`` of rows already collected (the identity columns and ``_ordo_badp``, maybe others)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        groups = rows.group_by(list(identity), use_threads=False).aggregate(
            [([], "count_all"), (BAD_PARTITION_COLUMN, "max")]
        )
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
        return None
    wrong = pc.or_(
        pc.greater(groups.column("count_all"), 1), pc.fill_null(groups.column(f"{BAD_PARTITION_COLUMN}_max"), False)
    )
    for k in primary_key:
        wrong = pc.or_(wrong, pc.is_null(groups.column(k)))
    found = groups.filter(wrong).slice(0, limit).to_pylist()
    return [
        {
            **{c: r[c] for c in identity},
            "_ordo_n": r["count_all"],
            BAD_PARTITION_COLUMN: bool(r[f"{BAD_PARTITION_COLUMN}_max"]),
        }
        for r in found
    ]
