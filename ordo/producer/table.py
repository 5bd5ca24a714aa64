"""The Spark writer API: ``DeltaTable``, a table handle with its operations, each one transaction.

A transaction is optimistic (docs/architecture.md, docs/conflicts.md): it pins
the catalog's head, stages Parquet files, publishes one intent and waits for
the arbiter's decision. The writer API's files, one idea each:

* ``producer.handle``: which table and how it is reached; create, open, find;
* ``producer.definition``: the metadata a CREATE TABLE or an ALTER TABLE publishes;
* ``producer.table``: ``DeltaTable``, the operations (writes, DML, maintenance, reads);
* ``producer.metadata``: the metadata-only commits (ALTER TABLE) and how such a commit is made;
* ``producer.transaction``: ``Transaction`` (``begin()``), the operations that stage data;
* ``producer.lifecycle``: a transaction's state, staged files and commit;
* ``producer.commit``: the one commit path every writer takes (intent, decision, retry policy, catalog wait);
* ``producer.delta``: Delta's MERGE and OPTIMIZE builders and history rows;
* ``producer.maintenance``: VACUUM and RESTORE;
* ``producer.results``, ``producer.connection``: results and errors, shared clients.

Importing this module imports neither Spark nor Kafka: both are loaded on use.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ordo.kernel.errors import CommitConflictError
from ordo.producer.connection import close_connections
from ordo.producer.data import (
    InvalidOperationError,
    InvalidTableError,
    PartitionValueError,
    PrimaryKeyError,
    SchemaMismatchError,
    WriteRefusedError,
)
from ordo.producer.maintenance import DEFAULT_RETENTION_HOURS, restore, vacuum
from ordo.producer.metadata import MetadataCommits
from ordo.producer.results import (
    CatalogLagError,
    CommitResult,
    TableExistsError,
    TransactionStateError,
)
from ordo.producer.transaction import Transaction

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


class DeltaTable(MetadataCommits):
    """A table (``producer.handle``) and what can be done with it: writes, each one transaction (``begin()``
    for one of your own), metadata changes (``producer.metadata``), maintenance and reads."""

    # ------------------------------------------------------------------ writes (each one transaction)

    def _run(self, stage: Any, retries: int = 0) -> CommitResult | None:
        with self.begin() as txn:
            stage(txn)
            return txn.commit(retries=retries)

    # ------------------------------------------------------------------ internals

    def insert_into(self, df: DataFrame, *, retries: int = 0, merge_schema: bool = False) -> CommitResult | None:
        """INSERT INTO: add the rows as upserts (a row whose key exists replaces it). None if ``df`` is empty.

        ``retries`` > 0 retries a CONFLICT_LATER_FAILS rejection at the
        metadata level: the same files are republished, re-pinned to the new
        head, under a new txn id (INSERT reads nothing, so this is safe).
        ``merge_schema=True`` (Delta's ``mergeSchema``): columns of ``df`` the
        table lacks are added, nullable, in the same commit.
        """
        return self._run(lambda t: t.insert_into(df, merge_schema=merge_schema), retries)

    def insert_overwrite(
        self,
        df: DataFrame,
        partition: Mapping[str, Any] | None = None,
        *,
        whole_table: bool = False,
        merge_schema: bool = False,
        overwrite_schema: bool = False,
    ) -> CommitResult | None:
        """INSERT OVERWRITE: replace the table, the given static ``partition``, or the partitions present in ``df``
        (``whole_table=True``: every partition, also those ``df`` has no row in). ``merge_schema=True``: columns
        of ``df`` the table lacks are added in the same commit. ``overwrite_schema=True``: ``df``'s schema becomes
        the table's, with an overwrite of the whole table (``whole_table=True`` when partitioned)."""
        return self._run(
            lambda t: t.insert_overwrite(
                df, partition, whole_table=whole_table, merge_schema=merge_schema, overwrite_schema=overwrite_schema
            )
        )

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
        from ordo.producer.delta import log_whole_table

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
        transaction; Delta's metrics; see ordo/producer/delta.py). Names: ``alias()``'s (else ``target``) and the
        source's own alias (else ``source``)."""
        from ordo.producer.delta import MergeBuilder, alias_of

        return MergeBuilder(
            self, source, condition, source_alias=alias_of(source) or "source", target_alias=self._alias or "target"
        )

    def optimize(self) -> Any:
        """Delta's OPTIMIZE builder: ``.where(partition)``, ``.executeCompaction()`` (MAJOR COMPACT) or
        ``.executeZOrderBy(cols)`` (CLUSTER BY)."""
        from ordo.producer.delta import OptimizeBuilder

        return OptimizeBuilder(self)

    # ------------------------------------------------------------------ maintenance

    def vacuum(self, retentionHours: float | None = None, *, dry_run: bool = False) -> list[str]:
        """Delete files no version within ``retentionHours`` (default 168) references; the paths deleted.

        Delta's safety floor: less than 168 hours is refused unless the Spark conf
        ``spark.databricks.delta.retentionDurationCheck.enabled`` is ``false``.
        """
        return vacuum(self, DEFAULT_RETENTION_HOURS if retentionHours is None else float(retentionHours), dry_run)

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
        return restore(self, self._conn.catalog.snapshot(self.name, version=int(version)))

    def restoreToTimestamp(self, timestamp: datetime | str, *, rewrite: bool = False) -> CommitResult | None:
        """Make the table what it was as of ``timestamp``: ``restoreToVersion`` of the version readers saw then."""
        if rewrite:
            return self.insert_overwrite(self.read(timestamp=timestamp), whole_table=True)
        return restore(self, self._conn.catalog.snapshot(self.name, timestamp=timestamp))

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
        from ordo.consumer.spark import read

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
        from ordo.consumer.arrow import DELTA_FORM, check_form

        if check_form(form) == DELTA_FORM:
            from ordo.producer.connection import settings_options

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
        from ordo.consumer.spark import changes

        return changes(self.spark, self.name, start, end, by=by, catalog=self._conn.catalog)

    def history(self, limit: int | None = None, *, include_rejected: bool = False) -> DataFrame:
        """Delta's DESCRIBE HISTORY as a DataFrame, newest first: ``version``, ``timestamp``, ``operation``,
        ``operationParameters``, ``readVersion``, then ordo's ``outcome``, ``reason``, ``rebase`` and more.

        Only accepted commits unless ``include_rejected`` (their ``version`` is null). ``decisions()`` gives
        the records themselves.
        """
        from ordo.producer.delta import HISTORY_SCHEMA, history_rows

        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise InvalidOperationError(f"history(limit): a positive number of commits, not {limit!r}")
        records = self._conn.catalog.history(self.name, limit, accepted_only=not include_rejected)
        return self.spark.createDataFrame(history_rows(records), HISTORY_SCHEMA)

    def detail(self) -> DataFrame:
        """Delta's DESCRIBE DETAIL as a one-row DataFrame (``format`` is ``ordo``; ``producer.delta.detail_row``)."""
        from ordo.producer.delta import DETAIL_SCHEMA, detail_row

        catalog = self._conn.catalog
        return self.spark.createDataFrame(
            [detail_row(catalog.table(self.name), catalog.snapshot(self.name))], DETAIL_SCHEMA
        )

    def decisions(self, limit: int | None = None) -> list[Any]:
        """The table's decision records (accepted and rejected), newest first, from the catalog."""
        return list(self._conn.catalog.history(self.name, limit))

    def snapshot(self, version: int | None = None) -> Any:
        """The catalog's snapshot (live files) at ``version`` (default: head)."""
        return self._conn.catalog.snapshot(self.name, version=version)


def _stamp_text(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


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
