"""The ``ordo_files`` Spark data source: merge-on-read of given (partition, bucket) file groups, no shuffle.

Internal to ``consumer.spark.read_snapshot``, which registers it: the option
``groups`` (JSON) lists the tasks, each a list of (partition, bucket) groups of
files; every group is merged alone with pyarrow (``consumer.arrow.live_rows``)
in its task's Python worker. Spark plans a scan of one input partition per
task and no Exchange: all records of a key are in one group's files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

NAME = "ordo_files"


def groups_option(
    bins: Sequence[Sequence[Sequence[Any]]], primary_key: Sequence[str], partitions: Sequence[str]
) -> str:
    """The ``groups`` option: tasks of groups of ``FileRef`` (as JSON), key and partition columns."""
    from dataclasses import asdict

    return json.dumps(
        {
            "primary_key": list(primary_key),
            "partition_columns": list(partitions),
            "bins": [[[asdict(ref) for ref in group] for group in task] for task in bins],
        },
        separators=(",", ":"),
    )


class FilesDataSource(DataSource):
    """``format("ordo_files")`` with ``.schema(table schema)`` and the ``groups`` option."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def reader(self, schema: StructType) -> DataSourceReader:
        return FilesReader(schema, json.loads(self.options["groups"]))


class FilesReader(DataSourceReader):
    """One input partition per task; each task merges its (partition, bucket) groups one at a time."""

    def __init__(self, schema: StructType, spec: dict[str, Any]) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        from consumer.arrow import FileRef, TableShape

        self.shape = TableShape(
            to_arrow_schema(schema, timezone="UTC"), tuple(spec["primary_key"]), tuple(spec["partition_columns"])
        )
        self.bins = [[tuple(FileRef(**ref) for ref in group) for group in task] for task in spec["bins"]]

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(task) for task in self.bins] or [InputPartition([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from consumer.arrow import live_rows

        for refs in partition.value:
            yield from live_rows(refs, self.shape, merge=True).to_batches(max_chunksize=65_536)


def register(spark: Any) -> None:
    """Register ``ordo_files`` with ``spark`` once."""
    if id(spark) not in _REGISTERED:
        spark.dataSource.register(FilesDataSource)
        _REGISTERED.add(id(spark))


_REGISTERED: set[int] = set()
