"""ordo on Spark: sessions configured for ordo, local or on a cluster (``session``), and the ``format("ordo")`` data source
(``datasource``). Importing this package imports no Spark; ``register`` does, on first use."""

from ordo.spark.session import (
    cluster_spark_session,
    local_spark_session,
    object_store_settings,
    register,
    registered_settings,
)

__all__ = [
    "cluster_spark_session",
    "local_spark_session",
    "object_store_settings",
    "register",
    "registered_settings",
]
