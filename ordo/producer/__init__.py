"""The writer side: the Spark-free ``CommitClient`` (Kafka only) and the Spark writer API.

Importing this package imports neither Kafka nor Spark; clients connect and
Spark is imported on first use.
"""

from ordo.producer.client import ClientClosedError, CommitClient
from ordo.producer.data import (
    ConstraintViolationError,
    InvalidOperationError,
    InvalidTableError,
    PartitionValueError,
    PrimaryKeyError,
    SchemaMismatchError,
    WriteRefusedError,
)
from ordo.producer.streaming import BatchCommitter, foreach_batch_committer
from ordo.producer.table import (
    CatalogLagError,
    CommitResult,
    DeltaTable,
    TableExistsError,
    Transaction,
    TransactionStateError,
    close_connections,
)

__all__ = [
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
]
