"""The writer side: the Spark-free ``CommitClient`` (Kafka only) and, later, the Spark writer API.

Importing this package does not import Kafka or Spark; clients connect on first use.
"""

from producer.client import ClientClosedError, CommitClient

__all__ = ["ClientClosedError", "CommitClient"]
