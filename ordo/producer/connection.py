"""How the writer API reaches ordo: one commit client and one catalog per process and settings, shared by every
table handle (opened on first use, closed at exit), and the settings and identity a handle starts with (and the
options that carry its settings to the ``format("ordo")`` data source)."""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ordo.kernel.settings import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ordo.producer.client import CommitClient

log = logging.getLogger("ordo.producer")


class Connection:
    """The commit client and catalog for one set of settings, shared by every table handle using them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._client: CommitClient | None = None
        self._catalog: Any = None

    @property
    def client(self) -> CommitClient:
        with self._lock:
            if self._client is None:
                from ordo.producer.client import CommitClient

                self._client = CommitClient(settings=self.settings)
            return self._client

    @property
    def catalog(self) -> Any:
        with self._lock:
            if self._catalog is None:
                from ordo.consumer import Catalog

                self._catalog = Catalog(self.settings.catalog)
            return self._catalog

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
            catalog, self._catalog = self._catalog, None
        if client is not None:
            client.close()
        if catalog is not None and hasattr(catalog, "close"):
            catalog.close()


_CONNECTIONS: dict[tuple[Any, ...], Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def shared_connection(settings: Settings) -> Connection:
    """The commit client and catalog this process shares for ``settings`` (opened on first use, closed at exit).

    Every ``DeltaTable`` handle uses it, and so do writers outside one that commit again and again in one
    process, such as the ``format("ordo")`` sink's commits in a reused Python worker (a new ``CommitClient``
    per commit costs its Kafka connections).
    """
    key = (
        settings.bootstrap_servers,
        settings.topic_prefix,
        settings.catalog,
        tuple(sorted(settings.kafka.items())),
        settings.trusted_keys,  # the keys its decision readers trust
        settings.require_signatures,
    )
    with _CONNECTIONS_LOCK:
        conn = _CONNECTIONS.get(key)
        if conn is None:
            conn = _CONNECTIONS[key] = Connection(settings)
        return conn


def close_connections() -> None:
    """Close every commit client and catalog the writer API opened (also done at interpreter exit)."""
    with _CONNECTIONS_LOCK:
        conns = list(_CONNECTIONS.values())
        _CONNECTIONS.clear()
    for conn in conns:
        try:
            conn.close()
        except Exception:  # closing at exit must not raise
            log.debug("closing a writer connection failed", exc_info=True)


atexit.register(close_connections)


def resolve_settings(settings: Settings | None, overrides: Mapping[str, Any]) -> Settings:
    if settings is None:
        return load_settings(**overrides)
    return settings.with_overrides(**overrides)


# The local property Spark sets to the streaming query's id in a micro-batch (kept in the checkpoint): the
# exactly-once identity of a foreachBatch stream (``producer.streaming``) and of the format("ordo") sink.
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def writer_identity(spark: SparkSession) -> str:
    try:
        app = spark.sparkContext.applicationId
    except Exception:  # pragma: no cover - a session without a context (Spark Connect)
        app = "spark"
    return f"ordo-spark/{app}@{socket.gethostname()}:{os.getpid()}"[:256]


def settings_options(settings: Settings) -> dict[str, str]:
    """The ``format("ordo")`` options that carry ``settings`` (broker, prefix, catalog, warehouse, trusted keys): how
    ``DeltaTable`` hands its settings to a Spark read, and the data source's registered defaults."""
    values = {
        "ordo.bootstrapServers": settings.bootstrap_servers,
        "ordo.topicPrefix": settings.topic_prefix,
        "ordo.catalog": settings.catalog,
        "ordo.warehouse": settings.warehouse,
        "ordo.trustedKeys": settings.trusted_keys or None,
        "ordo.requireSignatures": str(settings.require_signatures).lower(),
    }
    return {k: str(v) for k, v in values.items() if v is not None}


def has_scheme(location: str) -> bool:
    head = location.split("/", 1)[0]
    return head.endswith(":") and len(head) > 2


def absolute_location(location: str) -> str:
    """A table location as it is stored: a local path made absolute, an S3 one in its one spelling
    (``s3://bucket/prefix`` for ``s3a://`` and ``s3n://`` too: ``kernel.objectstore``), any other URI as given."""
    from ordo.kernel.objectstore import canonical_location

    if has_scheme(location):
        return canonical_location(location)
    return os.path.abspath(location)
