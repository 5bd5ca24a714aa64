"""The writer's metadata-only commits: ALTER TABLE, and how a commit that needs no Spark write is made.

``MetadataCommits`` is the part of ``DeltaTable`` (``producer.table``) that
changes a table's metadata: no data file is read or written, one intent is
published and the caller waits for the catalog to show the new version.
RESTORE (``producer.maintenance``) commits the same way (``_commit_now``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ordo.producer.handle import TableHandle, altered_metadata
from ordo.producer.results import CommitResult, conflict_error
from ordo.schemas import CommitIntent, Operation

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
        intent = CommitIntent(
            txn_id=uuid.uuid4().hex,
            table=self.name,
            operation=Operation.ALTER_TABLE,
            read_version=int(info.head_version),
            metadata=metadata,
            writer=self._writer,
        )
        result = self._commit_now(intent, f"ALTER TABLE {self.name}")
        self._set_metadata(metadata)
        return result

    def _commit_now(self, intent: CommitIntent, what: str) -> CommitResult:
        """Commit an intent that needs no Spark work (metadata, file actions the catalog knows): the decision, or
        ``CommitConflictError`` naming ``what``; returns once the catalog shows the version."""
        started = time.perf_counter()
        decision = self._conn.client.commit(intent, timeout=self.commit_timeout)
        if not decision.accepted or decision.id_version is None:
            raise conflict_error(decision, what)
        result = CommitResult(
            txn_id=intent.txn_id,
            id_version=decision.id_version,
            time_version=decision.time_version,
            operation=intent.operation,
            commit_seconds=time.perf_counter() - started,
            decision=decision,
        )
        self._wait_for_catalog(decision.id_version, result)
        return result
