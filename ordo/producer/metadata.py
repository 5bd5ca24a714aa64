"""The writer's metadata-only commits: ALTER TABLE, CHECK constraints, and how a commit with no data is made.

``MetadataCommits`` is the part of ``DeltaTable`` (``producer.table``) that
changes a table's metadata: no data file is read or written, one intent is
published and the caller waits for the catalog to show the new version.
RESTORE (``producer.maintenance``) commits the same way (``producer.commit.Committer.commit``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ordo.producer.commit import Change
from ordo.producer.data import InvalidOperationError
from ordo.producer.definition import altered_metadata
from ordo.producer.handle import TableHandle
from ordo.producer.results import CommitResult
from ordo.schemas import Operation, TableMetadata
from ordo.schemas.models import MAX_PATH_LENGTH
from ordo.schemas.operations import CONSTRAINT_PREFIX

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


class MetadataCommits(TableHandle):
    """A table handle's metadata changes (``DeltaTable`` inherits them)."""

    def alter(
        self,
        add_columns: str | StructType | None = None,
        *,
        set_properties: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """ALTER TABLE: append nullable columns (Spark DDL ``"note STRING"`` or a StructType) and/or set properties.

        Metadata only: no file is read or written. Files written before the
        change read the added columns as NULL; reads at older versions keep the
        older schema. A commit whose snapshot predates the change is rejected
        (``SCHEMA_CHANGED``), and the change itself fails against any commit
        made since its snapshot. Dropping, renaming or retyping columns,
        unsetting properties and changing ``ordo.*`` properties are not
        supported (``UNSUPPORTED_ALTER``). Raises ``CommitConflictError`` with
        the arbiter's reason when it is rejected.
        """

        info = self._conn.catalog.table(self.name)
        metadata = altered_metadata(info.metadata, add_columns, set_properties)
        return self._change_metadata(Operation.ALTER_TABLE, int(info.head_version), metadata, "")

    def add_constraint(self, name: str, expression: str) -> CommitResult:
        """``ALTER TABLE ... ADD CONSTRAINT name CHECK (expression)`` (Delta's, since 0.6): every row a later write
        adds must make ``expression`` true; a row for which it is false or null is refused
        (``ConstraintViolationError``, nothing is committed).

        ``expression`` is a Spark SQL condition on the table's columns (no aggregate, no window). The rows the
        table holds at its head are checked first, in one Spark job, and none may violate it. The constraint is
        the table property ``delta.constraints.<name>`` (the name lower-cased), as in Delta; DESCRIBE HISTORY shows
        ``ADD CONSTRAINT``. Its commit is metadata only, of class ALTER: it fails against any commit made since
        the rows were read, and any commit that read an older version fails after it (``SCHEMA_CHANGED``).
        Raises ``CommitConflictError`` with the arbiter's reason when it is rejected.
        """
        from ordo.consumer.spark import read
        from ordo.producer.data import check_constraint, check_rows, constraint_key

        key = constraint_key(name)
        label = key.removeprefix(CONSTRAINT_PREFIX)
        if not isinstance(expression, str) or not expression.strip() or len(expression) > MAX_PATH_LENGTH:
            raise InvalidOperationError(f"constraint {label} needs an expression of 1 to {MAX_PATH_LENGTH} characters")
        info = self._conn.catalog.table(self.name)
        if key in info.metadata.properties:
            raise InvalidOperationError(f"table {self.name} has a constraint {label} already: drop it first")
        version = int(info.head_version)
        rows = read(self.spark, self.name, version=version, catalog=self._conn.catalog)
        check_constraint(rows, label, expression)
        check_rows(rows, {label: expression}, f"table {self.name} at version {version}")
        metadata = _with_properties(info.metadata, {**info.metadata.properties, key: expression})
        return self._change_metadata(Operation.ADD_CONSTRAINT, version, metadata, f" ADD CONSTRAINT {label}")

    def drop_constraint(self, name: str, *, if_exists: bool = False) -> CommitResult | None:
        """``ALTER TABLE ... DROP CONSTRAINT [IF EXISTS] name`` (Delta's, since 0.6): later writes no longer check it.

        Metadata only, of class ALTER (as ``add_constraint``). ``InvalidOperationError`` when the table has no
        such constraint, unless ``if_exists`` (then nothing is committed: None).
        """
        from ordo.producer.data import constraint_key

        key = constraint_key(name)
        label = key.removeprefix(CONSTRAINT_PREFIX)
        info = self._conn.catalog.table(self.name)
        if key not in info.metadata.properties:
            if if_exists:
                return None
            raise InvalidOperationError(f"table {self.name} has no constraint {label}")
        properties = {k: v for k, v in info.metadata.properties.items() if k != key}
        metadata = _with_properties(info.metadata, properties)
        return self._change_metadata(
            Operation.DROP_CONSTRAINT, int(info.head_version), metadata, f" DROP CONSTRAINT {label}"
        )

    def _change_metadata(
        self, operation: Operation, read_version: int, metadata: TableMetadata, clause: str
    ) -> CommitResult:
        """Commit ``metadata`` as the table's from ``read_version`` on (``clause``: what the ALTER TABLE statement
        says after the table's name, for errors); the handle writes by it afterwards."""
        change = Change(self.name, operation, metadata=metadata, writer=self._writer)
        result = self._committer().commit(change, f"ALTER TABLE {self.name}{clause}", read_version=read_version)
        self._set_metadata(metadata)
        return result


def _with_properties(metadata: TableMetadata, properties: Mapping[str, str]) -> TableMetadata:
    """``metadata`` with ``properties`` instead of its own."""
    return TableMetadata(
        location=metadata.location,
        schema=metadata.schema,
        primary_key=metadata.primary_key,
        partition_columns=metadata.partition_columns,
        properties=properties,
    )
