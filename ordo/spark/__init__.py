"""ordo on Spark: a local session configured for ordo (``session``) and the ``format("ordo")`` data source
(``datasource``). Importing this package imports no Spark; ``register`` does, on first use."""

from ordo.spark.session import local_spark_session, register, registered_settings

__all__ = ["local_spark_session", "register", "registered_settings"]
