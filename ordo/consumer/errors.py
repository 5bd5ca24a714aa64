"""Errors of the catalog readers beyond the shared ``TableNotFoundError``/``VersionNotFoundError``.

They subclass ``ordo.errors.OrdoError`` so callers can catch every ordo error
with one clause. (Candidates to move into ``ordo.errors`` once stable.)
"""

from __future__ import annotations

from ordo.kernel.errors import OrdoError, TableNotFoundError, VersionNotFoundError
from ordo.schemas.decisionlog import LogProblem


def repair_hint(table: str) -> str:
    """What a user runs to re-materialize a stopped table from its decisions log (part of every stop reason)."""
    return f"to re-materialize it from its decisions log once the log is fixed, run: ordo repair {table}"


class CatalogError(OrdoError):
    """Raised when the catalog cannot answer (missing file, unreachable service, bad request)."""


class CatalogUnavailableError(CatalogError, ConnectionError):
    """Raised when the catalog file does not exist or the catalog's HTTP service cannot be reached."""


class CatalogTimeoutError(CatalogError, TimeoutError):
    """Raised by ``wait_for_version`` when the version was not materialized in time."""


class DataFileError(OrdoError):
    """Raised when a data file the catalog lists cannot be read (moved, deleted, or unreachable storage)."""


class TableBrokenError(CatalogError):
    """Raised when waiting on a table whose decision log the consumer stopped applying (a broken log).

    ``kind`` is the invariant the log broke (``schemas.decisionlog.LogProblem``: ``CHAIN``, ``VERSION_GAP``,
    ``LOST``, ...), read from the stop reason; None for a reason that names none (a catalog constraint).
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.kind: LogProblem | None = LogProblem.of(reason)


__all__ = [
    "CatalogError",
    "CatalogTimeoutError",
    "CatalogUnavailableError",
    "DataFileError",
    "TableBrokenError",
    "TableNotFoundError",
    "VersionNotFoundError",
    "repair_hint",
]
