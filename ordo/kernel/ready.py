"""The lines the services log once they are ready: the one declaration the services and their supervisors share.

``ordo arbiter`` logs ``ARBITER_READY`` after fencing older arbiters and
rebuilding its tables, ``ordo consumer`` logs ``CONSUMER_READY`` once it
follows its topics; ``ordo.services.stack`` (and tests, benchmarks) wait for them.
"""

from __future__ import annotations

ARBITER_READY = "arbiter ready"
CONSUMER_READY = "consumer ready"

__all__ = ["ARBITER_READY", "CONSUMER_READY"]
