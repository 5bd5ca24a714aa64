"""What a delta-spark user reaches for, on ordo: MERGE, OPTIMIZE builders, scope from conditions, history rows.

``DeltaTable.merge`` returns a ``MergeBuilder``; ``DeltaTable.optimize`` an
``OptimizeBuilder``. Both end in one ordo transaction. Spark is imported on use.

A MERGE is one UPDATE transaction: it reads the pinned snapshot (the join with
the source), then writes upsert records (matched updates, not-matched inserts)
and delete records (matched deletes) in one commit. Its row of the conflict
matrix is UPDATE's, scoped to the partitions it writes, plus the partitions
its condition can match (filters on the target's partition columns; it reads
only those), or the whole table for an unpartitioned one. On a key table the
merge condition should match the key; on a keyless table an updated or deleted
target row keeps its hidden row id (exact change rows), each inserted row gets
a new one, and a target row matched by several source rows is refused.

Scope from a condition: the partitions whose rows it can match, from Spark's
own analysis of it (``producer.scope``), never from its text; the whole
table when no conjunct of it is a filter on partition columns alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ordo.producer.data import InvalidOperationError
from ordo.schemas import Operation
from ordo.schemas.operations import MERGE_METRICS as MERGE_HISTORY_METRICS
from ordo.schemas.operations import ROW_ID_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from ordo.producer.table import CommitResult, DeltaTable

log = logging.getLogger("ordo.producer")

_LOGGED_WHOLE_TABLE: set[tuple[str, str]] = set()


def log_whole_table(table: str, operation: str) -> None:
    """Log once per table and operation that a write's scope is the whole table (it conflicts everywhere)."""
    key = (table, operation)
    if key not in _LOGGED_WHOLE_TABLE:
        _LOGGED_WHOLE_TABLE.add(key)
        log.info(
            "%s on %s has whole-table scope (its condition pins no partition with equality predicates): "
            "it conflicts with writes in every partition",
            operation,
            table,
        )


# --------------------------------------------------------------------------- MERGE


@dataclass
class _Clause:
    kind: str  # "update", "update_all", "delete", "insert", "insert_all", "source_update", "source_delete"
    condition: str | Column | None = None
    assignments: Mapping[str, str | Column] | None = None


@dataclass
class MergeBuilder:
    """Delta's ``merge`` builder: add ``whenMatched*``/``whenNotMatched*`` clauses, then ``execute()``.

    Clauses apply in order; a row takes the first clause of its kind (matched,
    not matched, not matched by source) whose condition holds. The names in
    conditions and assignments are the caller's: the table's alias
    (``DeltaTable.alias``, else ``target``) and the source DataFrame's own
    alias (``df.alias("s")``, else ``source``). ``execute()`` returns Delta's
    metrics as a one-row DataFrame; the commit is in ``result``.
    """

    table: DeltaTable
    source: DataFrame
    condition: str | Column
    source_alias: str = "source"
    target_alias: str = "target"
    clauses: list[_Clause] = field(default_factory=list)
    result: CommitResult | None = None
    metrics: dict[str, int] = field(default_factory=dict)

    def whenMatchedUpdate(self, condition: Any = None, set: Mapping[str, Any] | None = None) -> MergeBuilder:
        """Update matched rows: ``set`` maps table columns to expressions over source and target."""
        if not set:
            raise InvalidOperationError("whenMatchedUpdate needs set= (column -> expression)")
        self.clauses.append(_Clause("update", condition, set))
        return self

    def whenMatchedUpdateAll(self, condition: Any = None) -> MergeBuilder:
        """Update matched rows with the source row's values."""
        self.clauses.append(_Clause("update_all", condition))
        return self

    def whenMatchedDelete(self, condition: Any = None) -> MergeBuilder:
        """Delete matched rows."""
        self.clauses.append(_Clause("delete", condition))
        return self

    def whenNotMatchedInsert(self, condition: Any = None, values: Mapping[str, Any] | None = None) -> MergeBuilder:
        """Insert source rows without a match: ``values`` maps table columns to expressions over the source."""
        if not values:
            raise InvalidOperationError("whenNotMatchedInsert needs values= (column -> expression)")
        self.clauses.append(_Clause("insert", condition, values))
        return self

    def whenNotMatchedInsertAll(self, condition: Any = None) -> MergeBuilder:
        """Insert source rows without a match, as they are."""
        self.clauses.append(_Clause("insert_all", condition))
        return self

    def whenNotMatchedBySourceUpdate(self, condition: Any = None, set: Mapping[str, Any] | None = None) -> MergeBuilder:
        """Update table rows no source row matches: ``set`` maps table columns to expressions over the target."""
        if not set:
            raise InvalidOperationError("whenNotMatchedBySourceUpdate needs set= (column -> expression)")
        self.clauses.append(_Clause("source_update", condition, set))
        return self

    def whenNotMatchedBySourceDelete(self, condition: Any = None) -> MergeBuilder:
        """Delete table rows no source row matches."""
        self.clauses.append(_Clause("source_delete", condition))
        return self

    def execute(self) -> DataFrame:
        """Run the merge as one UPDATE transaction (none when no clause applied to any row); Delta's metrics.

        The one row has ``num_affected_rows``, ``num_updated_rows``, ``num_deleted_rows`` and
        ``num_inserted_rows``; ``result`` is the ``CommitResult`` (None without a commit).
        """
        if not self.clauses:
            raise InvalidOperationError("a merge needs at least one whenMatched*/whenNotMatched* clause")
        with self.table.begin() as txn:
            self.metrics = _stage_merge(txn, self)
            self.result = txn.commit()
        values = tuple(self.metrics[name] for name in MERGE_METRICS)
        return self.table.spark.createDataFrame([values], ", ".join(f"{name} BIGINT" for name in MERGE_METRICS))


MERGE_METRICS = ("num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows")
# execute()'s metric of each MERGE metric the intent carries (Delta's history names, schemas.operations)
_EXECUTE_NAME = {
    "numTargetRowsInserted": "num_inserted_rows",
    "numTargetRowsUpdated": "num_updated_rows",
    "numTargetRowsDeleted": "num_deleted_rows",
}
_MATCHED = frozenset({"update", "update_all", "delete"})
_BY_SOURCE = frozenset({"source_update", "source_delete"})
_METRIC_OF = {
    "update": "num_updated_rows",
    "update_all": "num_updated_rows",
    "source_update": "num_updated_rows",
    "delete": "num_deleted_rows",
    "source_delete": "num_deleted_rows",
    "insert": "num_inserted_rows",
    "insert_all": "num_inserted_rows",
}


def alias_of(df: DataFrame) -> str | None:
    """The alias a DataFrame was given last (``df.alias("s")``), from its analyzed plan; None without one."""
    plan = df._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() != "SubqueryAlias":
        return None
    return str(plan.alias())


def _expr(value: Any) -> Column:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import functions as F

    return value if isinstance(value, SparkColumn) else F.expr(str(value))


def _stage_merge(txn: Any, merge: MergeBuilder) -> dict[str, int]:
    from pyspark.sql import functions as F

    from ordo.producer.data import conform, delete_records, upsert_records, with_row_ids

    table = merge.table
    layout = table.layout
    names = [f.name for f in layout.schema().fields]
    visible = [f.name for f in layout.user_schema().fields]
    src, tgt = merge.source_alias, merge.target_alias
    for clause in merge.clauses:
        unknown = [c for c in (clause.assignments or {}) if c not in visible]
        if unknown:
            raise InvalidOperationError(f"merge assigns unknown columns {unknown}; table columns are {names}")
        if clause.kind in ("update", "source_update"):
            frozen = [c for c in clause.assignments or {} if c in layout.identity]
            if frozen:
                raise InvalidOperationError(f"an update cannot change key or partition columns {frozen}")
    by_source = any(clause.kind in _BY_SOURCE for clause in merge.clauses)
    with txn._stage(Operation.UPDATE):
        # the target rows the condition can match: only these partitions are read (every partition when rows
        # no source row matches are updated or deleted)
        pinned = (
            None
            if by_source
            else txn.partitions_of_condition(merge.condition, target_alias=tgt, source=merge.source, source_alias=src)
        )
        target = txn._read_in(pinned)
        target = target.withColumn("__ordo_matched", F.lit(True)).alias(tgt)
        source = merge.source.withColumn("__ordo_source", F.lit(True)).alias(src)
        joined = source.join(target, _expr(merge.condition), "full" if by_source else "left")
        matched = F.col(f"{tgt}.__ordo_matched").isNotNull()
        from_source = F.col(f"{src}.__ordo_source").isNotNull()
        action = None
        for i, clause in enumerate(merge.clauses):
            if clause.kind in _MATCHED:
                when = matched & from_source
            elif clause.kind in _BY_SOURCE:
                when = matched & ~from_source
            else:
                when = ~matched & from_source
            if clause.condition is not None:
                when = when & _expr(clause.condition)
            action = F.when(when, F.lit(i)) if action is None else action.when(when, F.lit(i))
        assert action is not None
        joined = joined.withColumn("__ordo_action", action).where(F.col("__ordo_action").isNotNull())
        upserts, deletes, upsert_kinds, delete_kinds = [], [], [], []
        for i, clause in enumerate(merge.clauses):
            rows = joined.where(F.col("__ordo_action") == i)
            if clause.kind in ("delete", "source_delete"):
                deletes.append(rows.select(*[F.col(f"{tgt}.`{c}`").alias(c) for c in names]))
                delete_kinds.append(_METRIC_OF[clause.kind])
                continue
            upsert_kinds.append(_METRIC_OF[clause.kind])
            columns = []
            for c in names:
                if c == ROW_ID_COLUMN:  # keyless: an updated row keeps its row id (exact pre/postimage pairs)
                    matches = clause.kind not in ("insert", "insert_all")
                    columns.append((F.col(f"{tgt}.`{c}`") if matches else F.lit(None).cast("string")).alias(c))
                elif clause.kind in ("update", "source_update"):
                    given = (clause.assignments or {}).get(c)
                    columns.append((_expr(given) if given is not None else F.col(f"{tgt}.`{c}`")).alias(c))
                elif clause.kind == "update_all" or clause.kind == "insert_all":
                    columns.append(F.col(f"{src}.`{c}`").alias(c))
                else:
                    given = (clause.assignments or {}).get(c)
                    columns.append((_expr(given) if given is not None else F.lit(None)).alias(c))
            chosen = rows.select(*columns)
            if clause.kind in ("insert", "insert_all"):  # keyless: each inserted row a new row id
                chosen = with_row_ids(chosen.drop(ROW_ID_COLUMN), layout, txn.row_id_prefix())
            upserts.append(chosen)
        schema = layout.schema()
        written = [conform(df, schema) for df in upserts]
        removed = [conform(df, schema) for df in deletes]
        every, kinds = written + removed, upsert_kinds + delete_kinds
        metrics = dict.fromkeys(MERGE_METRICS, 0)
        if not every:
            txn._staged((), None, noop=True)
            return metrics
        union = every[0].withColumn("__ordo_kind", F.lit(kinds[0]))
        for other, kind in zip(every[1:], kinds[1:], strict=True):
            union = union.unionByName(other.withColumn("__ordo_kind", F.lit(kind)))
        union = union.persist()
        try:
            for row in union.groupBy("__ordo_kind").count().collect():
                metrics[row["__ordo_kind"]] += int(row["count"])
            metrics["num_affected_rows"] = sum(metrics[m] for m in MERGE_METRICS[1:])
            txn._validate(union.drop("__ordo_kind"), keys=True)  # keyless: a target row matched twice
            records = None
            for df in written:
                part = upsert_records(df)
                records = part if records is None else records.unionByName(part)
            for df in removed:
                part = delete_records(df, layout)
                records = part if records is None else records.unionByName(part)
            assert records is not None
            files = txn._write(records)
        finally:
            union.unpersist()
        if not layout.partition_columns or by_source:
            scope = None
            log_whole_table(table.name, "MERGE")
        else:  # what it read (the pinned partitions) and what it wrote (inserts may land anywhere)
            cols = layout.partition_columns
            both = {tuple(p[c] for c in cols): p for p in [*(pinned or ()), *(txn._partitions_of(files) or ())]}
            scope = [both[k] for k in sorted(both)]
        txn._staged(files, scope, noop=not files)
        # the rows a MERGE changed, by Delta's history names: its claim, checked by the arbiter (at most the records)
        txn.operation_metrics = {name: metrics[_EXECUTE_NAME[name]] for name in MERGE_HISTORY_METRICS}
        return metrics


# --------------------------------------------------------------------------- OPTIMIZE


@dataclass
class OptimizeBuilder:
    """Delta's ``optimize()``: ``where(partition predicate)``, then ``executeCompaction()`` or ``executeZOrderBy``."""

    table: DeltaTable
    partition: dict[str, str] | None = None

    def where(self, condition: str) -> OptimizeBuilder:
        """Restrict to one partition: the condition (a predicate on partition columns) must match exactly one
        partition of the table's current snapshot."""
        from ordo.producer.scope import condition_scope

        table = self.table
        columns = table.partition_columns
        keys = {tuple(f.partition.get(c, "") for c in columns) for f in table.snapshot().files}
        found = condition_scope(
            table.spark, table.layout, condition, [dict(zip(columns, k, strict=True)) for k in sorted(keys)]
        )
        if found is None or len(found) != 1:
            raise InvalidOperationError(
                f"optimize().where({condition!r}) must select exactly one partition of the partition columns "
                f"{list(columns)}; it selects {'the whole table' if found is None else found}"
            )
        self.partition = found[0]
        return self

    def executeCompaction(self) -> CommitResult | None:
        """Bin-packing: a MAJOR COMPACT (base files of live rows) of each partition in scope."""
        return self.table.compact("major", self.partition)

    def executeZOrderBy(self, *columns: str | Sequence[str]) -> CommitResult | None:
        """Data layout by ``columns``: a CLUSTER (sorted by the columns in that order; not a Z-curve)."""
        flat: list[str] = []
        for c in columns:
            flat.extend([c] if isinstance(c, str) else list(c))
        return self.table.cluster(flat, self.partition)


# --------------------------------------------------------------------------- history


HISTORY_COLUMNS = (
    "version",
    "timestamp",
    "operation",
    "operationParameters",
    "operationMetrics",
    "ordoOperation",
    "readVersion",
    "outcome",
    "reason",
    "rebase",
    "txnId",
    "appId",
    "batchId",
    "userName",
    "numFiles",
    "numOutputRows",
    "numOutputBytes",
)
HISTORY_SCHEMA = (
    "version BIGINT, timestamp TIMESTAMP, operation STRING, operationParameters MAP<STRING, STRING>, "
    "operationMetrics MAP<STRING, STRING>, ordoOperation STRING, readVersion BIGINT, outcome STRING, reason STRING, "
    "rebase STRING, txnId STRING, appId STRING, batchId BIGINT, userName STRING, numFiles BIGINT, "
    "numOutputRows BIGINT, numOutputBytes BIGINT"
)


# DESCRIBE DETAIL's columns that mean something for an ordo table, then ordo's own (docs/api.md, "detail()").
DETAIL_SCHEMA = (
    "format STRING, id STRING, name STRING, description STRING, location STRING, createdAt TIMESTAMP, "
    "lastModified TIMESTAMP, partitionColumns ARRAY<STRING>, clusteringColumns ARRAY<STRING>, numFiles BIGINT, "
    "sizeInBytes BIGINT, properties MAP<STRING, STRING>, primaryKey ARRAY<STRING>, version BIGINT, "
    "numRecords BIGINT"
)


def detail_row(info: Any, snapshot: Any) -> tuple[Any, ...]:
    """``DeltaTable.detail()``'s one row from the catalog's ``TableInfo`` and head ``Snapshot``.

    ``numRecords`` counts the records of the live files (upserts and delete records not yet merged away
    included: it is the merge-on-read's work, not the row count). ``lastModified`` is the head's time version.
    """
    metadata = info.metadata
    properties = {str(k): str(v) for k, v in metadata.properties.items()}
    clustering = [c.strip() for c in properties.get("ordo.cluster_by", "").split(",") if c.strip()]
    return (
        "ordo",
        info.name,
        info.name,
        properties.get("comment"),
        metadata.location,
        info.created_time,
        snapshot.time_version,
        list(metadata.partition_columns),
        clustering,
        len(snapshot.files),
        sum(f.size_bytes for f in snapshot.files),
        properties,
        list(metadata.user_key),
        snapshot.id_version,
        snapshot.record_count,
    )


_ROWS_METRIC = {"UPDATE": "numUpdatedRows", "DELETE": "numDeletedRows"}  # Delta's names, derived from the records


def history_rows(records: Sequence[Any]) -> list[tuple[Any, ...]]:
    """One row per decision record, in ``HISTORY_COLUMNS`` order (newest first as given).

    ``operation`` is Delta's name for the commit (``schemas.operations.delta_operation``: the registry's
    ``delta_name``, ``WRITE``, ``UPDATE``, ``OPTIMIZE``, ...; ``MERGE`` for an UPDATE whose writer counted a
    MERGE's rows), ``ordoOperation`` ordo's own. ``operationMetrics`` has Delta's keys: what the commit's files
    give (files, rows and bytes added, files removed; an UPDATE's ``numUpdatedRows`` and a DELETE's
    ``numDeletedRows``, the records it wrote: derived, never the writer's word) and, since 0.5, a MERGE's rows as
    its writer counted them and the arbiter checked them (``numTargetRowsInserted``/``Updated``/``Deleted``, the
    decision's ``operation_metrics``), with ``numTargetFilesAdded``/``Removed``.
    """
    import json

    from ordo.schemas.operations import Operation, delta_operation

    rows = []
    for d in records:
        params: dict[str, str] = {}
        if d.operation in (Operation.INSERT_INTO, Operation.INSERT_OVERWRITE):
            params["mode"] = "Append" if d.operation is Operation.INSERT_INTO else "Overwrite"
        if d.partitions is not None:
            params["partitions"] = json.dumps([dict(p) for p in d.partitions], sort_keys=True)
        if d.restore_version is not None:
            params["version"] = str(d.restore_version)
        if d.message:
            params["message"] = d.message
        if d.conflicting_version is not None:
            params["conflictingVersion"] = str(d.conflicting_version)
        name = delta_operation(d.operation, d.operation_metrics) if d.operation is not None else None
        metrics: dict[str, str] = {}
        if d.accepted and d.duplicate_of is None:
            metrics = {
                "numFiles": str(d.files_added),
                "numAddedFiles": str(d.files_added),
                "numRemovedFiles": str(d.files_removed),
                "numOutputRows": str(d.records_added),
                "numOutputBytes": str(d.bytes_added),
            }
            if name == "MERGE":
                metrics["numTargetFilesAdded"] = str(d.files_added)
                metrics["numTargetFilesRemoved"] = str(d.files_removed)
            elif name in _ROWS_METRIC:  # each record an UPDATE or DELETE writes is one row it changed
                metrics[_ROWS_METRIC[name]] = str(d.records_added)
            metrics.update((key, str(value)) for key, value in sorted(d.operation_metrics.items()))
        rows.append(
            (
                d.id_version,
                d.timestamp or d.log_timestamp,
                name,
                params,
                metrics,
                d.operation.value if d.operation is not None else None,
                d.read_version,
                d.outcome.value,
                d.reason,
                d.rebase.value if d.rebase is not None else None,
                d.txn_id,
                d.app_id,
                d.batch_id,
                d.writer,
                d.files_added,
                d.records_added,
                d.bytes_added,
            )
        )
    return rows


__all__ = [
    "HISTORY_COLUMNS",
    "MergeBuilder",
    "OptimizeBuilder",
    "history_rows",
    "log_whole_table",
]
