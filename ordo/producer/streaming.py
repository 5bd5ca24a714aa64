"""Streaming ingestion: commit each Structured Streaming micro-batch as one idempotent INSERT INTO.

Use with ``foreachBatch`` and a checkpoint location::

    committer = foreach_batch_committer(table)
    query = (stream_df.writeStream.foreachBatch(committer)
             .option("checkpointLocation", "/chk/my-stream").start())

Exactly once: every intent carries the idempotency pair ``app_id`` (default:
the streaming query id, which Spark keeps in the checkpoint, so it is stable
across restarts) and ``batch_id`` (Spark's micro-batch id). When a query fails
after a batch committed but before Spark recorded it in the checkpoint, Spark
replays the batch with the same id after the restart; the arbiter rejects it
with ``BATCH_ALREADY_COMMITTED``, which the committer counts as success (the
replay's staged files are deleted). Nothing is committed twice.

INSERT INTO vs a concurrent INSERT INTO in the same partition fails the later
one (docs/conflicts.md). Streams should write partitions no other concurrent
writer writes, or set ``retries``: a rejected batch is republished, re-pinned to
the new head under a new txn id, with the same files (a metadata-level retry).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ordo.kernel.errors import CommitConflictError
from ordo.producer.commit import STREAM_RETRIES
from ordo.producer.connection import QUERY_ID_PROPERTY
from ordo.producer.results import BATCH_ALREADY_COMMITTED, CommitResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ordo.producer.table import DeltaTable

log = logging.getLogger("ordo.producer.streaming")


@dataclass
class BatchCommitter:
    """A ``foreachBatch`` function that commits each micro-batch to ``table`` exactly once.

    Counters (``committed``, ``replayed``, ``empty``) and the last
    ``CommitResult`` are kept for monitoring and tests.
    """

    table: DeltaTable
    app_id: str | None = None
    retries: int = STREAM_RETRIES
    persist: bool = True
    on_commit: Callable[[int, CommitResult | None], None] | None = None
    committed: list[int] = field(default_factory=list)
    replayed: list[int] = field(default_factory=list)
    empty: list[int] = field(default_factory=list)
    last_result: CommitResult | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def application_id(self, batch: DataFrame) -> str:
        """The idempotency application id: the one given, else the streaming query id of the running batch."""
        if self.app_id:
            return self.app_id
        query_id = batch.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not query_id:
            raise ValueError(
                "cannot find the streaming query id of this batch; pass app_id= to foreach_batch_committer"
            )
        return str(query_id)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Commit one micro-batch (called by Spark on the driver)."""
        app_id = self.application_id(batch)
        if self.persist:
            batch = batch.persist()
        try:
            with self.table.begin(app_id=app_id, batch_id=int(batch_id)) as txn:
                txn.insert_into(batch)
                try:
                    result = txn.commit(retries=self.retries)
                except CommitConflictError as exc:
                    if exc.reason != BATCH_ALREADY_COMMITTED:
                        raise
                    log.info("batch %d of %s was already committed; replay skipped (%s)", batch_id, app_id, exc)
                    with self._lock:
                        self.replayed.append(int(batch_id))
                    if self.on_commit is not None:
                        self.on_commit(int(batch_id), None)
                    return
        finally:
            if self.persist:
                batch.unpersist()
        with self._lock:
            if result is None:
                self.empty.append(int(batch_id))
            else:
                self.committed.append(int(batch_id))
                self.last_result = result
        if self.on_commit is not None:
            self.on_commit(int(batch_id), result)


def foreach_batch_committer(
    table: DeltaTable,
    *,
    app_id: str | None = None,
    retries: int = STREAM_RETRIES,
    persist: bool = True,
    on_commit: Callable[[int, CommitResult | None], None] | None = None,
) -> BatchCommitter:
    """A ``foreachBatch`` function committing each micro-batch to ``table`` as an idempotent INSERT INTO.

    ``app_id`` defaults to the streaming query id (stable across restarts with
    a checkpoint location). ``retries`` bounds metadata-level retries of a
    batch rejected by a concurrent INSERT INTO. ``persist`` caches each batch
    while it is validated and written (two passes over it). ``on_commit`` is
    called with the batch id and its result (None for an empty or replayed batch).
    """
    return BatchCommitter(table, app_id=app_id, retries=retries, persist=persist, on_commit=on_commit)


__all__ = ["BatchCommitter", "foreach_batch_committer"]
