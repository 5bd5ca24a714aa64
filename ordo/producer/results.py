"""What a commit gives back: ``CommitResult``, and the errors of the writer API (``conflict_error`` for rejections)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ordo.kernel.errors import CommitConflictError, OrdoError
from ordo.schemas import CommitDecision, DataFile, Operation, Reason, Rebase

CONFLICT_LATER_FAILS = Reason.CONFLICT_LATER_FAILS
TABLE_EXISTS = Reason.TABLE_EXISTS
BATCH_ALREADY_COMMITTED = Reason.BATCH_ALREADY_COMMITTED


class TableExistsError(CommitConflictError):
    """Raised by ``DeltaTable.create`` when the table already exists (the arbiter rejected with TABLE_EXISTS)."""


class TransactionStateError(OrdoError, RuntimeError):
    """Raised when a transaction is used out of order (a second operation, or after commit/abort)."""


class CatalogLagError(OrdoError, TimeoutError):
    """Raised when a commit was accepted but the catalog did not show its version in time (is a consumer running?).

    ``result`` is the accepted commit: the data is committed, only reading it back would not see it yet.
    """

    def __init__(self, message: str, result: CommitResult | None = None) -> None:
        super().__init__(message)
        self.result = result


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CommitResult:
    """An accepted commit: its transaction id and the versions the arbiter gave it.

    ``time_version`` is None for compaction and clustering (no logical change).
    The other fields say what was committed and how long it took; ``attempts``
    counts publications (more than one after metadata-level retries).
    """

    txn_id: str
    id_version: int
    time_version: datetime | None
    operation: Operation | None = None
    added_files: tuple[DataFile, ...] = field(default=(), repr=False)
    removed_files: tuple[str, ...] = field(default=(), repr=False)
    rebase: Rebase = Rebase.NONE
    write_seconds: float = 0.0
    commit_seconds: float = 0.0
    attempts: int = 1
    decision: CommitDecision | None = field(default=None, repr=False, compare=False)

    @property
    def record_count(self) -> int:
        """Records in the files this commit added."""
        return sum(f.record_count for f in self.added_files)


# --------------------------------------------------------------------------- shared clients


def conflict_error(decision: CommitDecision, what: str) -> CommitConflictError:
    """The error a rejected ``decision`` of ``what`` raises: its reason, message and conflicting commit."""
    cls = TableExistsError if decision.reason == TABLE_EXISTS else CommitConflictError
    detail = f": {decision.message}" if decision.message else ""
    return cls(
        f"{what} was rejected ({decision.reason}){detail}",
        reason=decision.reason,
        conflicting_txn_id=decision.conflicting_txn_id,
        conflicting_version=decision.conflicting_version,
        decision=decision,
    )


# --------------------------------------------------------------------------- DeltaTable
