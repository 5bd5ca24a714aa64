"""Re-export of the exception hierarchy (defined in ``schemas.errors``) plus runtime families."""

from __future__ import annotations

from ordo.schemas.errors import CodecError, InvalidNameError, OrdoError, SigningError, UnknownSchemaError


class CommitTimeoutError(OrdoError, TimeoutError):
    """Raised when no decision for a published intent arrived in time (no arbiter running, or an outage)."""


class BrokerUnavailableError(OrdoError, ConnectionError):
    """Raised when the Kafka broker cannot be reached."""


class CommitConflictError(OrdoError):
    """Raised by the Spark writer API when the arbiter rejected a transaction.

    ``reason`` is the decision's reason code; ``conflicting_txn_id`` and
    ``conflicting_version`` name the transaction that won, when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        conflicting_txn_id: str | None = None,
        conflicting_version: int | None = None,
        decision: object | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.conflicting_txn_id = conflicting_txn_id
        self.conflicting_version = conflicting_version
        self.decision = decision


class ArbiterFencedError(OrdoError):
    """Raised inside an arbiter that a newer arbiter with the same transactional id has fenced."""


class TableNotFoundError(OrdoError, LookupError):
    """Raised by readers for a table the catalog does not know."""


class VersionNotFoundError(OrdoError, LookupError):
    """Raised by readers for a version or timestamp the table does not have (yet)."""


__all__ = [
    "ArbiterFencedError",
    "BrokerUnavailableError",
    "CodecError",
    "CommitConflictError",
    "CommitTimeoutError",
    "InvalidNameError",
    "OrdoError",
    "SigningError",
    "TableNotFoundError",
    "UnknownSchemaError",
    "VersionNotFoundError",
]
