"""Shared Kafka plumbing below the services: reading single-partition logs safely (``kernel.logread``).

A leaf package: it imports ``schemas``, the standard library and
``confluent_kafka`` (lazily), nothing else of ours.
"""

from ordo.kernel.logread import GapChecker, GapStats, LogReadError, read_to_end

__all__ = ["GapChecker", "GapStats", "LogReadError", "read_to_end"]
