"""CHECK constraints end to end (since 0.6): ``DeltaTable.add_constraint`` checks the table's rows, every Spark
write path refuses a row that violates one (INSERT, INSERT OVERWRITE, UPDATE, MERGE; a RESTORE to rows that
do), a compaction keeps working, ``format("ordo")`` writes are refused, and ``drop_constraint`` lifts it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ordo.errors import CommitConflictError
from ordo.producer.data import ConstraintViolationError, InvalidOperationError
from ordo.producer.table import DeltaTable
from ordo.spark.datasource import settings_options
from tests.e2e.stack import writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

SCHEMA = "id BIGINT, amount DOUBLE, dt STRING"
KEY = "delta.constraints.positive_amount"


def rows_of(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def test_a_constraint_is_checked_when_added_and_by_every_spark_write(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    settings = writer_stack.settings
    table = DeltaTable.create(spark, "checked", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings)
    table.insert_into(spark.createDataFrame([(1, 10.0, "d1"), (2, -5.0, "d2")], SCHEMA))  # v1

    # Added only when every row satisfies it: the table's rows are checked first, nothing is committed.
    with pytest.raises(
        ConstraintViolationError, match=r"1 rows violate CHECK constraint positive_amount \(amount > 0\)"
    ):
        table.add_constraint("Positive_Amount", "amount > 0")
    assert table.version == 1 and KEY not in table.metadata.properties
    for bad in ("amount >", "amount + 1", "max(amount) > 0"):  # not SQL, not a boolean, an aggregate
        with pytest.raises(
            InvalidOperationError, match=rf"CHECK constraint bad \({re.escape(bad)}\) is not a condition"
        ):
            table.add_constraint("bad", bad)
    table.update({"amount": "5.0"}, where="id = 2")  # v2
    stale = table.begin()  # pinned to v2: a write staged before the constraint
    stale.insert_into(spark.createDataFrame([(9, -9.0, "d1")], SCHEMA))
    added = table.add_constraint("Positive_Amount", "amount > 0")  # v3; the name is kept lower-case, as Delta's
    assert added.id_version == 3 and table.metadata.properties[KEY] == "amount > 0"
    with pytest.raises(CommitConflictError) as rejected:
        stale.commit()
    assert rejected.value.reason == "SCHEMA_CHANGED"

    # Every Spark write checks the rows it adds as it writes them: false and null both violate.
    violations = [
        lambda: table.insert_into(spark.createDataFrame([(3, 1.0, "d1"), (4, -1.0, "d2")], SCHEMA)),
        lambda: table.insert_into(spark.createDataFrame([(5, None, "d1")], SCHEMA)),
        lambda: table.insert_overwrite(spark.createDataFrame([(6, 0.0, "d1")], SCHEMA)),
        lambda: table.update({"amount": "-amount"}, where="id = 1"),
        lambda: (
            table.alias("t")
            .merge(spark.createDataFrame([(7, -7.0, "d2")], SCHEMA).alias("s"), "t.id = s.id")
            .whenNotMatchedInsertAll()
            .execute()
        ),
    ]
    for write in violations:
        with pytest.raises(ConstraintViolationError, match=r"CHECK constraint positive_amount \(amount > 0\) violated"):
            write()
        assert table.version == 3
    with pytest.raises(ConstraintViolationError, match=r'violated by row with values \{"id":4,"amount":-1.0'):
        violations[0]()
    assert rows_of(table.read()) == [(1, 10.0, "d1"), (2, 5.0, "d2")]

    # Rows that satisfy it are written; a compaction rewrites rows without checking them again.
    table.insert_into(spark.createDataFrame([(3, 1.0, "d1")], SCHEMA))  # v4
    table.update({"amount": "amount * 2"}, where="id = 3")  # v5
    table.optimize().executeCompaction()  # v6
    assert rows_of(table.read()) == [(1, 10.0, "d1"), (2, 5.0, "d2"), (3, 2.0, "d1")]

    # A RESTORE keeps the constraints: a version whose rows violate one cannot be restored.
    with pytest.raises(ConstraintViolationError, match=r"version 1 of checked: 1 rows violate CHECK constraint"):
        table.restoreToVersion(1)
    restored = table.restoreToVersion(2)
    assert restored is not None and rows_of(table.read()) == [(1, 10.0, "d1"), (2, 5.0, "d2")]

    # format("ordo") writes rows in Python workers, without Spark SQL: refused, nothing written.
    before = table.version
    with pytest.raises(Exception, match="format\\('ordo'\\) writes do not check"):
        spark.createDataFrame([(8, 8.0, "d1")], SCHEMA).write.format("ordo").options(**settings_options(settings)).mode(
            "append"
        ).save("checked")
    assert table.version == before

    # An ALTER TABLE may not set one (it would skip the check of the rows): the arbiter refuses it.
    with pytest.raises(CommitConflictError) as sneaked:
        table.alter(set_properties={"delta.constraints.other": "id > 0"})
    assert sneaked.value.reason == "INVALID_CONSTRAINT"

    # DESCRIBE HISTORY names them; dropping one lifts it.
    dropped = table.drop_constraint("POSITIVE_AMOUNT")
    assert dropped is not None and KEY not in table.metadata.properties
    table.insert_into(spark.createDataFrame([(4, -1.0, "d2")], SCHEMA))
    with pytest.raises(InvalidOperationError, match="has no constraint positive_amount"):
        table.drop_constraint("positive_amount")
    assert table.drop_constraint("positive_amount", if_exists=True) is None
    operations = [h["operation"] for h in table.history().collect()]
    assert operations.count("ADD CONSTRAINT") == 1 and operations.count("DROP CONSTRAINT") == 1
