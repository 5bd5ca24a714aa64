"""Shared fixtures. Owned by the Kafka-foundation engineer; see module docstrings of the fixtures."""
