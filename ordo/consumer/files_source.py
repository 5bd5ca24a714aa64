"""The ``ordo_files`` Spark data source: ``consumer.arrow``'s reads of given files, in Spark's tasks.

Internal to ``consumer.spark``, which registers it. Two options, one each:

``groups`` (JSON; ``read_snapshot``)
    the tasks, each a list of (partition, bucket) groups of files; every group
    is merged alone with pyarrow (``consumer.arrow.live_rows``) in its task's
    Python worker. Spark plans a scan of one input partition per task and no
    Exchange: all records of a key are in one group's files.
``commits`` (JSON; ``changes``)
    the planned commits (``consumer.arrow.CommitChanges``) and the change feed
    form; consecutive commits are packed into input partitions
    (``consumer.arrow.pack_commits``), whose rows are each commit's
    ``consumer.arrow.change_rows``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, Filter, In, InputPartition
from pyspark.sql.types import StructType

NAME = "ordo_files"


def arrow_schema(schema: StructType) -> Any:
    """The Arrow schema of Spark rows as Python data sources exchange them (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def groups_option(
    bins: Sequence[Sequence[Sequence[Any]]], primary_key: Sequence[str], partitions: Sequence[str], buckets: int = 1
) -> str:
    """The ``groups`` option: tasks of groups of ``FileRef`` (as JSON), key and partition columns, bucket count."""
    from dataclasses import asdict

    return json.dumps(
        {
            "primary_key": list(primary_key),
            "partition_columns": list(partitions),
            "buckets": buckets,
            "bins": [[[asdict(ref) for ref in group] for group in task] for task in bins],
        },
        separators=(",", ":"),
    )


def commits_option(plans: Sequence[Any], primary_key: Sequence[str], partitions: Sequence[str], form: str) -> str:
    """The ``commits`` option: planned commits (``CommitChanges``, as JSON), key and partition columns, the form."""
    from dataclasses import asdict

    def plan(p: Any) -> dict[str, Any]:
        return {
            "id_version": p.id_version,
            "timestamp": p.timestamp.isoformat(),
            "operation": p.operation,
            "scope": None if p.scope is None else [dict(s) for s in p.scope],
            "added": [asdict(r) for r in p.added],
            "previous": [asdict(r) for r in p.previous],
        }

    spec = {"primary_key": list(primary_key), "partition_columns": list(partitions), "form": form}
    return json.dumps({**spec, "commits": [plan(p) for p in plans]}, separators=(",", ":"))


class FilesDataSource(DataSource):
    """``format("ordo_files")`` with ``.schema(...)`` and the ``groups`` or the ``commits`` option."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def reader(self, schema: StructType) -> DataSourceReader:
        if "commits" in self.options:
            return ChangesReader(schema, json.loads(self.options["commits"]))
        return FilesReader(schema, json.loads(self.options["groups"]))


class FilesReader(DataSourceReader):
    """One input partition per task; each task merges its (partition, bucket) groups one at a time.

    A filter ``key = v`` or ``key IN (...)`` on a one-column primary key (``pushFilters``) keeps only the files
    of those keys' buckets whose key range may hold them, and reads only their rows (a point read no longer
    merges the table);
    Spark still applies every filter.
    """

    def __init__(self, schema: StructType, spec: dict[str, Any]) -> None:
        from ordo.consumer.arrow import FileRef, TableShape

        self.shape = TableShape(arrow_schema(schema), tuple(spec["primary_key"]), tuple(spec["partition_columns"]))
        self.bins = [[tuple(FileRef(**ref) for ref in group) for group in task] for task in spec["bins"]]
        self.buckets = int(spec.get("buckets", 1))
        self.keys: Any = None  # the key values a pushed filter asks for (a pyarrow table), or None: every key

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        from ordo.consumer.arrow import files_with_keys, key_lookup

        for f in filters:
            attribute = tuple(getattr(f, "attribute", ()))
            if self.keys is None and attribute == self.shape.primary_key and isinstance(f, EqualTo | In):
                keys = key_lookup(self.shape, [f.value] if isinstance(f, EqualTo) else list(f.value))
                if keys is not None:
                    self.keys = keys
                    kept = [
                        [tuple(files_with_keys(g, self.shape, keys, self.buckets)) for g in task] for task in self.bins
                    ]
                    self.bins = [[g for g in task if g] for task in kept if any(task)]
            yield f

    def __getstate__(self) -> dict[str, Any]:
        return _without(self, "bins")

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(task) for task in self.bins] or [InputPartition([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from ordo.consumer.arrow import live_rows

        for refs in partition.value:
            yield from live_rows(refs, self.shape, keys=self.keys, merge=True).to_batches(max_chunksize=65_536)


class ChangesReader(DataSourceReader):
    """One input partition per task of consecutive commits (``consumer.arrow.pack_commits``): their change rows in
    the requested form."""

    def __init__(self, schema: StructType, spec: dict[str, Any]) -> None:
        from datetime import datetime

        from ordo.consumer.arrow import CHANGE_COLUMNS, CommitChanges, FileRef, TableShape

        table = StructType([f for f in schema.fields if f.name not in CHANGE_COLUMNS])
        self.shape = TableShape(arrow_schema(table), tuple(spec["primary_key"]), tuple(spec["partition_columns"]))
        self.schema = arrow_schema(schema)  # Spark's, nullability included
        self.form = spec["form"]
        self.plans = [
            CommitChanges(
                c["id_version"],
                datetime.fromisoformat(c["timestamp"]),
                c["operation"],
                None if c["scope"] is None else tuple(c["scope"]),
                tuple(FileRef(**r) for r in c["added"]),
                tuple(FileRef(**r) for r in c["previous"]),
            )
            for c in spec["commits"]
        ]

    def __getstate__(self) -> dict[str, Any]:
        return _without(self, "plans")

    def partitions(self) -> Sequence[InputPartition]:
        from ordo.consumer.arrow import pack_commits

        return [InputPartition(task) for task in pack_commits(self.plans)] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from ordo.consumer.arrow import task_change_rows

        for rows in task_change_rows(partition.value or (), self.shape, self.form):
            yield from rows.cast(self.schema).to_batches(max_chunksize=65_536)


def _without(reader: DataSourceReader, name: str) -> dict[str, Any]:
    """``reader``'s state without its ``name`` list: Spark pickles the reader into every task's command (before it
    asks for the partitions), and each task's own share travels in its input partition."""
    state = dict(reader.__dict__)
    state[name] = []
    return state


def register(spark: Any) -> None:
    """Register ``ordo_files`` with ``spark`` once."""
    if id(spark) not in _REGISTERED:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")  # FilesReader.pushFilters
        spark.dataSource.register(FilesDataSource)
        _REGISTERED.add(id(spark))


_REGISTERED: set[int] = set()
