"""The exception families: defined in ``kernel.errors`` (below arbiter, consumer and producer); this public path stays."""

from __future__ import annotations

from ordo.kernel.errors import (
    ArbiterFencedError,
    BrokerUnavailableError,
    CodecError,
    CommitConflictError,
    CommitTimeoutError,
    InvalidNameError,
    OrdoError,
    SigningError,
    TableNotFoundError,
    UnknownSchemaError,
    VersionNotFoundError,
)

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
