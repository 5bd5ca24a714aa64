"""Taking a table over from a live arbiter, the way the fencing tests do it.

Tansu 0.6.0 can leave a transaction open for good when a produce of the fenced
producer races the newer producer's ``InitProducerId`` (docs/tansu.md, "A
fenced produce racing InitProducerId"): every read_committed reader of that
decisions log then stops there. Apache Kafka rejects such a produce and ends
any transaction after ``transaction.timeout.ms``. So on the embedded broker the
tests freeze the elder (SIGSTOP) before the newer arbiter takes its tables and
thaw it afterwards: a zombie, paused mid-transaction, that wakes up fenced.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ordo.services.stack import ManagedProcess

# Requests the elder had already sent when frozen are answered within this.
IN_FLIGHT_GRACE = 1.0


def take_over(elder: ManagedProcess, start_newer: Callable[[], ManagedProcess]) -> ManagedProcess:
    """Freeze ``elder``, start the newer arbiter (ready: its tables taken), thaw ``elder``; return the newer."""
    elder.pause()
    try:
        time.sleep(IN_FLIGHT_GRACE)
        return start_newer()
    finally:
        elder.resume()
