"""Fault-injection suite (issue 7): kill -9, twin arbiters, broker outage, bad input, tampering, checkpoints.

``CHAOS_PROFILE`` chooses the size: unset or ``quick`` (inside ``make test``, a
few kills and 1,000 fuzzed records) or ``full`` (``make chaos``: 100 kills of
each process, 10,000 fuzzed records). Every test is bounded in time, runs on
loopback only and stops what it started. The figures each test records
(``figures.py``) are printed at the end of the session by tests/conftest.py.

Fixtures: everything of ``tests/conftest.py`` plus ``consumer`` (the consumer
process factory of ``tests/integration/conftest.py``).
"""

from __future__ import annotations

from ..integration.conftest import ConsumerProcess, consumer  # noqa: F401  (re-exported fixture)
