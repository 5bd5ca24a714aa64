"""The ``ordo_records`` Spark data source: ``producer.filewriter.FileWriter``'s writes, in Spark's tasks.

Internal to ``FileWriter``, which registers it and writes a transaction's
records with ``df.write.format("ordo_records").mode("append").save()``. Each
task writes its rows with pyarrow straight to their final paths
(``producer.arrow.RecordWrite``) and sends back the ``DataFile`` of each file
it made. The job's commit runs on the driver's machine, in a Python worker of
its own, so it hands the files to the writer through the ``result`` file (a
local path the writer gave); the job's abort deletes the files its finished
tasks reported. A data source writer needs no pandas (``mapInArrow`` does).

Options (strings, shown in the query plan, so never a secret):

``write`` (JSON)
    location, partition columns, primary key, write id, the hidden columns the
    rows are sorted by (partition texts, then the bucket when ``bucketed``),
    and the records per file;
``result``
    the local file the commit writes the ``DataFile``s to, one JSON per line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

NAME = "ordo_records"


class RecordsDataSource(DataSource):
    """Writes records of one transaction (``FileWriter``); reads nothing."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema: StructType, overwrite: bool) -> RecordsWriter:
        return RecordsWriter(schema, json.loads(self.options["write"]), self.options["result"])


@dataclass
class RecordsMessage(WriterCommitMessage):
    """The files one task wrote (``DataFile`` JSON)."""

    files: tuple[str, ...]


class RecordsWriter(DataSourceArrowWriter):
    """Each task: ``RecordWrite.write`` of its Arrow batches; the job: the files to the ``result`` file."""

    def __init__(self, schema: StructType, spec: dict[str, Any], result: str) -> None:
        self.task = record_write(schema, spec)
        self.result = result

    def write(self, iterator: Iterator[Any]) -> RecordsMessage:
        return RecordsMessage(tuple(f.model_dump_json() for f in self.task.write(iterator)))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        lines = [text for m in messages if isinstance(m, RecordsMessage) for text in m.files]
        partial = f"{self.result}.partial"
        with open(partial, "w", encoding="utf-8") as out:
            out.writelines(f"{line}\n" for line in lines)
        os.replace(partial, self.result)  # the writer reads a whole list or none

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        from ordo.producer.data import Storage
        from ordo.schemas import DataFile

        storage = Storage(self.task.location)
        for text in (t for m in messages if isinstance(m, RecordsMessage) for t in m.files):
            try:
                storage.delete_file(DataFile.model_validate_json(text).path)
            except OSError:
                pass  # an orphan then: no commit names it (``ordo vacuum --orphans``)


def record_write(schema: StructType, spec: dict[str, Any]) -> Any:
    """The ``producer.arrow.RecordWrite`` of a write's ``spec`` (``write_spec``) for records of Spark ``schema``
    (file columns plus the hidden ones): what each task runs, and what ``FileWriter``'s driver-side path runs."""
    import pyarrow as pa

    from ordo.consumer.files_source import arrow_schema
    from ordo.producer.arrow import RecordWrite

    hidden = tuple(spec["hidden"])
    columns = StructType([f for f in schema.fields if f.name not in hidden])
    return RecordWrite(
        location=spec["location"],
        partition_columns=tuple(spec["partition_columns"]),
        primary_key=tuple(spec["primary_key"]),
        write_id=spec["write_id"],
        hidden=hidden,
        bucketed=bool(spec["bucketed"]),
        schema=pa.schema([f.with_nullable(True) for f in arrow_schema(columns)]),
        max_records=int(spec["max_records"]),
        write_ids={tuple(values): write_id for values, write_id in spec.get("write_ids") or ()} or None,
    )


def write_spec(
    location: str,
    partition_columns: Sequence[str],
    primary_key: Sequence[str],
    write_id: str,
    hidden: Sequence[str],
    bucketed: bool,
    max_records: int,
    write_ids: Mapping[tuple[str, ...], str] | None = None,
) -> dict[str, Any]:
    """What a write's tasks need to know (``record_write``); the ``write`` option is its JSON (``write_options``)."""
    return {
        "location": location,
        "partition_columns": list(partition_columns),
        "primary_key": list(primary_key),
        "write_id": write_id,
        "hidden": list(hidden),
        "bucketed": bucketed,
        "max_records": max_records,
        "write_ids": [[list(values), write_id] for values, write_id in (write_ids or {}).items()],
    }


def write_options(spec: Mapping[str, Any]) -> str:
    """The ``write`` option: ``spec`` (``write_spec``) as JSON."""
    return json.dumps(spec, separators=(",", ":"))


def register(spark: Any) -> None:
    """Register ``ordo_records`` with ``spark``, right before each write.

    Not cached: a streaming query's micro-batches run in a clone of the
    session, a session's Python object id may be reused by a later one, and
    beside a running stream the session's own look-up did not find a source
    it reported registered (tests/e2e/test_compactor.py); registering costs
    a JVM call and a warning in Spark's log that it replaced the source.
    """
    spark.dataSource.register(RecordsDataSource)
