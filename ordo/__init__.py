"""ordo: a transaction manager for Delta tables whose commit log lives on Kafka.

The entry point a user imports from::

    from ordo import DeltaTable, CommitClient, CommitIntent, Operation, CommitConflictError

The parts install under this package: ``ordo.producer`` (the writer side), ``ordo.arbiter``, ``ordo.consumer``,
``ordo.schemas`` (the wire contract) and ``ordo.kernel``; ``ordo`` itself is the composition root (settings, CLI,
embedded stack). The names below are loaded on first use, so ``import ordo`` (which the CLI
does) pulls in neither Spark, Kafka nor pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.6.0"

# name -> the module that defines it (docs/api.md lists them)
_EXPORTS = {
    **dict.fromkeys(
        (
            "BatchCommitter",
            "CatalogLagError",
            "ClientClosedError",
            "CommitClient",
            "CommitResult",
            "ConstraintViolationError",
            "DeltaTable",
            "InvalidOperationError",
            "InvalidTableError",
            "PartitionValueError",
            "PrimaryKeyError",
            "SchemaMismatchError",
            "TableExistsError",
            "Transaction",
            "TransactionStateError",
            "WriteRefusedError",
            "close_connections",
            "foreach_batch_committer",
        ),
        "ordo.producer",
    ),
    **dict.fromkeys(
        (
            "CommitDecision",
            "CommitIntent",
            "DataFile",
            "Operation",
            "Outcome",
            "Reason",
            "TableMetadata",
            "decode",
            "encode",
            "decisions_topic",
            "intents_topic",
        ),
        "ordo.schemas",
    ),
    **dict.fromkeys(("Catalog", "CatalogError", "CatalogUnavailableError"), "ordo.consumer"),
    **dict.fromkeys(
        (
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
        ),
        "ordo.errors",
    ),
    "Settings": "ordo.settings",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ordo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:
    from ordo.consumer import Catalog, CatalogError, CatalogUnavailableError
    from ordo.errors import (
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
    from ordo.producer import (
        BatchCommitter,
        CatalogLagError,
        ClientClosedError,
        CommitClient,
        CommitResult,
        ConstraintViolationError,
        DeltaTable,
        InvalidOperationError,
        InvalidTableError,
        PartitionValueError,
        PrimaryKeyError,
        SchemaMismatchError,
        TableExistsError,
        Transaction,
        TransactionStateError,
        WriteRefusedError,
        close_connections,
        foreach_batch_committer,
    )
    from ordo.schemas import (
        CommitDecision,
        CommitIntent,
        DataFile,
        Operation,
        Outcome,
        Reason,
        TableMetadata,
        decisions_topic,
        decode,
        encode,
        intents_topic,
    )
    from ordo.settings import Settings
