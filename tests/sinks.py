"""Which sink the tests' arbiters use (``ORDO_DECISIONS_TRANSACTIONS``), for whole test runs.

``ORDO_TEST_DECISIONS_TRANSACTIONS=false`` runs every broker-facing test whose settings come from the fixtures
(or from ``decisions_transactions_default``) against the sink without Kafka transactions (``DirectSink``). Tests
that take a ``decisions_transactions`` argument run with both, whatever this says.
"""

from __future__ import annotations

import os


def decisions_transactions_default() -> bool:
    """``ORDO_TEST_DECISIONS_TRANSACTIONS`` (default true)."""
    from ordo.kernel.settings import parse_bool

    return parse_bool(os.environ.get("ORDO_TEST_DECISIONS_TRANSACTIONS", "true"))
