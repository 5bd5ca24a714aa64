"""``Transaction``: one optimistic transaction on a table and the operations that stage its data.

Each transaction holds exactly one operation (the intent names one):
INSERT INTO, INSERT OVERWRITE, TRUNCATE, UPDATE, DELETE, MINOR/MAJOR COMPACT
or CLUSTER. An operation only stages data; ``commit()`` (``producer.lifecycle``)
publishes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ordo.producer.data import InvalidOperationError, PartitionValueError
from ordo.producer.lifecycle import Lifecycle
from ordo.schemas import Operation

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Inputs of one compaction/cluster commit (an intent lists at most MAX_FILES_PER_INTENT files each way).
MAX_REWRITE_INPUTS = 5_000


class Transaction(Lifecycle):
    """One optimistic transaction on a table, pinned to ``read_version``; exactly one operation.

    The operation methods only stage data (Spark writes the files); ``commit()``
    publishes the intent and waits. Leaving a ``with`` block without commit, or
    ``abort()``, deletes the staged files. When ``commit()`` times out the
    outcome is unknown: the files are kept and ``commit()`` may be called again
    (the same txn id always gets the same decision).
    """

    # ------------------------------------------------------------------ operations (stage only)

    def insert_into(self, df: DataFrame, *, merge_schema: bool = False) -> Transaction:
        """Stage INSERT INTO: the rows become upsert records. Scope: the partitions written.

        ``merge_schema=True`` (Delta's ``mergeSchema``): columns of ``df`` the table lacks are added, nullable, in
        the same commit (rows written before read them as null); a rejected commit changes nothing.
        """
        with self._stage(Operation.INSERT_INTO):
            self._evolve(df, merge=merge_schema)
            files = self._write_upserts(self._user_rows(df))
            return self._staged(files, self._partitions_of(files), noop=not files)

    def insert_overwrite(
        self,
        df: DataFrame,
        partition: Mapping[str, Any] | None = None,
        *,
        whole_table: bool = False,
        merge_schema: bool = False,
        overwrite_schema: bool = False,
    ) -> Transaction:
        """Stage INSERT OVERWRITE of the table, of static ``partition``, or of the partitions present in ``df``.

        With a static partition the DataFrame may leave the partition columns
        out (they are filled in); rows outside the partition are refused.
        Dynamic overwrite with an empty DataFrame overwrites nothing (a no-op).
        ``whole_table=True`` replaces every partition of a partitioned table,
        also those ``df`` has no row in (an empty ``df`` empties the table).
        ``merge_schema=True``: columns of ``df`` the table lacks are added in the same commit (as ``insert_into``).
        ``overwrite_schema=True`` (Delta's ``overwriteSchema``): ``df``'s schema becomes the table's in the same
        commit, which replaces the whole table (``whole_table=True`` on a partitioned table); key and partition
        columns keep their definition.
        """
        from ordo.producer.data import with_static_partition

        if whole_table and partition is not None:
            raise InvalidOperationError("give a partition or whole_table=True, not both")
        if overwrite_schema and (partition is not None or (self.table.layout.partition_columns and not whole_table)):
            raise InvalidOperationError(
                "overwrite_schema replaces the schema with an overwrite of the whole table: pass whole_table=True "
                "and no partition (merge_schema=True adds columns to a partial overwrite)"
            )
        with self._stage(Operation.INSERT_OVERWRITE):
            self._evolve(df, merge=merge_schema, replace=overwrite_schema)
            layout = self.layout
            static = self._static(partition)
            if static is not None:
                df = with_static_partition(df, layout, static)
            files = self._write_upserts(self._user_rows(df), static)
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
        from ordo.producer.data import filtered, update_records

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
        from ordo.producer.data import delete_records, filtered

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
        from ordo.producer.data import canonical_values

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
        from ordo.producer.scope import condition_scope

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
        from ordo.producer.data import read_files, rewrite_records, target_file_count

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
