"""Reading a table's data files without Spark, for the CLI (``ordo show``, ``ordo changes --rows``, ``ordo vacuum``).

The reading itself is ``consumer.arrow``'s, the one merge-on-read and change
feed that Spark reads (through the ``ordo`` and ``ordo_files`` data sources)
and these commands share; this module shapes its results for the CLI.
pyarrow reads in a fraction of a second where a Spark session takes ten to
start; Spark remains the reader for data-sized work (``consumer.spark``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ordo.consumer.arrow import COMPACT_FORM, FileRef, TableShape, filesystem, live_rows, merge_groups, plan_commits
from ordo.consumer.arrow import change_rows as _change_rows
from ordo.consumer.errors import DataFileError
from ordo.schemas.models import ddl_columns

if TYPE_CHECKING:
    from ordo.consumer.catalog import Catalog
    from ordo.consumer.models import Commit, Snapshot


def live_row_count(snapshot: Snapshot) -> int:
    """Rows a reader sees at ``snapshot`` (merge-on-read), reading only the key and partition columns."""
    metadata = snapshot.metadata
    shape = TableShape.of(metadata, columns=[*metadata.partition_columns, *metadata.primary_key])
    refs = [FileRef.of(f) for f in snapshot.files if f.record_count]
    return sum(
        live_rows(group, shape, merge=merge).num_rows for group, merge in merge_groups(refs, shape.partition_columns)
    )


def change_rows(catalog: Catalog, table: str, commits: Iterable[Commit]) -> list[dict]:
    """The change feed of ``commits`` in the compact form as plain rows (``consumer.arrow.change_rows``).

    Each row holds the table's columns plus ``_change_type`` (``upsert``,
    ``delete`` or ``truncate``), ``_commit_version``, ``_commit_timestamp`` and
    ``_scope``; a version's ``truncate`` row comes before its other rows.
    Compaction and clustering contribute nothing; a RESTORE gives the
    difference between the table before and after it.
    """
    shape = TableShape.of(catalog.table(table).metadata)
    logical = sorted((c for c in commits if c.data_change), key=lambda c: c.id_version)
    rows: list[dict] = []
    for plan in plan_commits(catalog, table, logical, shape, form=COMPACT_FORM):
        rows.extend(_change_rows(plan, shape, COMPACT_FORM).to_pylist())
    return rows


__all__ = ["DataFileError", "change_rows", "ddl_columns", "filesystem", "live_row_count"]
