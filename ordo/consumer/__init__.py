"""The consumer: follows the decisions topics and materializes the catalog; serves reads.

``Catalog`` is the read interface (SQLite file or HTTP service). The Kafka loop
(``consumer.materializer``), the HTTP service (``consumer.http``) and the Spark
reads (``consumer.spark``) are imported on demand: importing this package pulls
in neither Kafka, FastAPI nor Spark.
"""

from ordo.consumer.catalog import Catalog, to_millis
from ordo.consumer.errors import (
    CatalogError,
    CatalogTimeoutError,
    CatalogUnavailableError,
    TableBrokenError,
    TableNotFoundError,
    VersionNotFoundError,
)
from ordo.consumer.models import Commit, DecisionRecord, FileEntry, Snapshot, TableInfo

__all__ = [
    "Catalog",
    "CatalogError",
    "CatalogTimeoutError",
    "CatalogUnavailableError",
    "Commit",
    "DecisionRecord",
    "FileEntry",
    "Snapshot",
    "TableBrokenError",
    "TableInfo",
    "TableNotFoundError",
    "VersionNotFoundError",
    "to_millis",
]
