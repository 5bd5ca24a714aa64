"""The one commit path: what a writer did becomes a ``CommitIntent``, which is published, decided, retried by one
policy, and shown by the catalog before the writer returns.

Every writer commits here: ``Transaction.commit`` (``DeltaTable``'s writes, DML, MERGE, compactions, the table
service's rewrites, ``foreachBatch`` streams), the metadata-only commits (CREATE TABLE, ALTER TABLE, CHECK
constraints, RESTORE) and the ``format("ordo")`` data source (batch and streaming writes, a write creating its
table). VACUUM deletes files and commits nothing. Two parts:

* ``Change``: what a writer did (its operation, files, scope, metadata, idempotency pair, counted metrics).
  ``Change.intent`` is the one place ordo builds a ``CommitIntent``; an attempt adds only its txn id and read
  version (tests/unit/test_commit_path.py holds the tree to that).
* ``Committer``: publishes an intent through the process's shared ``CommitClient``, waits for the decision, applies
  the retry policy and waits for the catalog to show the new version (read-your-writes).

The retry policy (docs/writer.md, "Retries"), one for every writer, at two levels:

1. **Transport** (``CommitClient``): an intent whose decision is overdue is published again, the same bytes under
   the same txn id (``resubmit_after``, doubling, at most a minute apart); the arbiter answers a repeat with the
   first decision. No decision within the timeout raises ``CommitTimeoutError``: the outcome is unknown, and
   publishing the same txn id again learns it.
2. **Conflict** (here): a rejection is final, except ``CONFLICT_LATER_FAILS`` of an INSERT INTO (it reads nothing)
   when the writer asked for retries: the catalog is waited for up to the conflicting version, and the same files
   are published again under a new txn id, pinned to the head, after ``RETRY_BACKOFF`` seconds. The writer API
   asks with ``retries=`` (0 by default; ``STREAM_RETRIES`` for ``foreach_batch_committer``), the
   ``format("ordo")`` sink with ``STREAM_RETRIES`` per micro-batch; every other commit takes 0.

Importing this module imports neither Spark nor Kafka.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ordo.producer.data import InvalidOperationError
from ordo.producer.results import CONFLICT_LATER_FAILS, CatalogLagError, CommitResult, conflict_error
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, TableMetadata

if TYPE_CHECKING:
    from ordo.producer.connection import Connection

log = logging.getLogger("ordo.producer")

RETRY_BACKOFF = 0.05  # seconds between a CONFLICT_LATER_FAILS rejection and the retry on the new head
STREAM_RETRIES = 5  # conflict retries of a stream's micro-batch: foreach_batch_committer's default, the sink's
RETRYABLE = frozenset({Operation.INSERT_INTO})  # the operations that read nothing: their files stay valid on any head


def new_txn_id() -> str:
    """A fresh transaction id (32 hex digits)."""
    return uuid.uuid4().hex


def check_retries(operation: Operation | None, retries: int) -> None:
    """Refuse conflict retries for an operation whose files depend on what it read (all but INSERT INTO)."""
    if retries and operation not in RETRYABLE:
        raise InvalidOperationError("metadata-level retries are only safe for INSERT INTO (it reads nothing)")


@dataclass(frozen=True)
class Change:
    """What one writer did to one table, ready to commit: everything of its intent but the attempt's txn id and
    read version (a conflict retry changes both and nothing else)."""

    table: str
    operation: Operation
    partitions: tuple[Mapping[str, str], ...] | None = None
    added_files: tuple[DataFile, ...] = ()
    removed_files: tuple[str, ...] = ()
    metadata: TableMetadata | None = None
    app_id: str | None = None
    batch_id: int | None = None
    writer: str | None = None
    restore_version: int | None = None
    operation_metrics: Mapping[str, int] = field(default_factory=dict)

    def intent(self, txn_id: str, read_version: int) -> CommitIntent:
        """The intent of one attempt at this change: the one place a ``CommitIntent`` is built."""
        return CommitIntent(
            txn_id=txn_id,
            table=self.table,
            operation=self.operation,
            read_version=read_version,
            partitions=self.partitions,
            added_files=self.added_files,
            removed_files=self.removed_files,
            metadata=self.metadata,
            app_id=self.app_id,
            batch_id=self.batch_id,
            writer=self.writer,
            restore_version=self.restore_version,
            operation_metrics=self.operation_metrics,
        )


@dataclass(frozen=True)
class Decided:
    """The decision of a change and the attempt it answered (a retry publishes under a new txn id and pin)."""

    change: Change
    decision: CommitDecision
    txn_id: str
    read_version: int
    attempts: int
    seconds: float  # from the first publication to the decision

    def result(self, write_seconds: float = 0.0) -> CommitResult:
        """The ``CommitResult`` of an accepted decision."""
        decision = self.decision
        assert decision.accepted and decision.id_version is not None
        return CommitResult(
            txn_id=self.txn_id,
            id_version=decision.id_version,
            time_version=decision.time_version,
            operation=self.change.operation,
            added_files=self.change.added_files,
            removed_files=tuple(decision.removed_files) or self.change.removed_files,
            rebase=decision.rebase,
            write_seconds=write_seconds,
            commit_seconds=self.seconds,
            attempts=self.attempts,
            decision=decision,
        )


class Committer:
    """Publishes changes to one process's shared client and waits for their decisions and versions.

    ``timeout`` bounds the wait for each decision, ``catalog_timeout`` each wait
    for the catalog. ``reconnect`` closes the shared connection when no decision
    came (broker gone, timeout), so the next commit connects afresh: the
    ``format("ordo")`` writers' choice, in a Python worker that Spark reuses.
    """

    def __init__(
        self, connection: Connection, *, timeout: float, catalog_timeout: float, reconnect: bool = False
    ) -> None:
        self.connection = connection
        self.timeout = timeout
        self.catalog_timeout = catalog_timeout
        self.reconnect = reconnect

    def decide(
        self,
        change: Change,
        txn_id: str,
        read_version: int,
        *,
        retries: int = 0,
        repinned: Callable[[str, int], None] | None = None,
    ) -> Decided:
        """Publish ``change`` as ``txn_id`` read at ``read_version`` and wait for the decision, retrying a
        ``CONFLICT_LATER_FAILS`` rejection at most ``retries`` times (``repinned`` hears each new txn id and read
        version). A rejection is returned, not raised: what it undoes is the writer's."""
        check_retries(change.operation, retries)
        started = time.perf_counter()
        attempts = 0
        while True:
            attempts += 1
            decision = self._publish(change.intent(txn_id, read_version))
            if decision.accepted or decision.reason != CONFLICT_LATER_FAILS or retries <= 0:
                return Decided(change, decision, txn_id, read_version, attempts, time.perf_counter() - started)
            retries -= 1
            txn_id, read_version = self._repin(change.table, txn_id, read_version, decision)
            if repinned is not None:
                repinned(txn_id, read_version)
            time.sleep(RETRY_BACKOFF)

    def commit(self, change: Change, what: str, *, read_version: int) -> CommitResult:
        """Commit ``change`` under a new txn id, no retry (a commit with no files of its own: metadata, RESTORE):
        its result once the catalog shows it; ``CommitConflictError`` naming ``what`` when rejected."""
        decided = self.decide(change, new_txn_id(), read_version)
        if not decided.decision.accepted or decided.decision.id_version is None:
            raise conflict_error(decided.decision, what)
        result = decided.result()
        self.visible(change.table, result.id_version, result)
        return result

    def visible(self, table: str, version: int, result: CommitResult | None = None) -> None:
        """Wait until the catalog shows ``table`` at ``version`` (read-your-writes); ``CatalogLagError`` if it does
        not within ``catalog_timeout`` (``result``: the accepted commit, when the wait is for one's own)."""
        settings = self.connection.settings
        try:
            self.connection.catalog.wait_for_version(table, version, timeout=self.catalog_timeout)
        except TimeoutError as exc:
            raise CatalogLagError(
                f"table {table} committed version {version}, but the catalog {settings.catalog!r} did not show it "
                f"within {self.catalog_timeout:g} s (is `ordo consumer` running for prefix {settings.topic_prefix!r}?)",
                result,
            ) from exc

    def _publish(self, intent: CommitIntent) -> CommitDecision:
        """The decision of ``intent`` (the client resubmits it while overdue: the transport level of the policy)."""
        try:
            return self.connection.client.commit(intent, timeout=self.timeout)
        except BaseException:
            if self.reconnect:
                self.connection.close()
            raise

    def _repin(self, table: str, txn_id: str, read_version: int, decision: CommitDecision) -> tuple[str, int]:
        """A new txn id and read version after ``decision`` (CONFLICT_LATER_FAILS): the head once the catalog
        shows the conflicting commit."""
        if decision.conflicting_version is not None:
            self.visible(table, decision.conflicting_version)
        head = int(self.connection.catalog.table(table).head_version)
        log.info(
            "txn %s of %s rejected (%s, conflicting %s@%s); retrying on version %d",
            txn_id,
            table,
            decision.reason,
            decision.conflicting_txn_id,
            decision.conflicting_version,
            head,
        )
        return new_txn_id(), max(read_version, head)


__all__ = ["RETRY_BACKOFF", "STREAM_RETRIES", "Change", "Committer", "Decided", "check_retries", "new_txn_id"]
