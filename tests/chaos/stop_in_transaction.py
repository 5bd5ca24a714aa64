"""``python -m tests.chaos.stop_in_transaction <ordo arguments>``: ``ordo``, whose arbiter freezes itself once, in the
middle of a transaction, when the test asks.

A SIGSTOP sent from outside lands wherever the arbiter happens to be, so whether
a pause finds a transaction open is luck (issue 30: one run of two failed). This
lands it where that member was: decisions of several tables produced or held in
open transactions, none committed. The test arms it by creating the file named
by ``CHAOS_STOP_FILE``; the next commit of a batch in which at least two tables
have two decisions or more (so each has records in its transaction on the
broker, not only the held last one: they are flushed first) stops the whole process (``SIGSTOP`` to itself,
every thread at once, as a ``kill -STOP`` would) and the test sends
``SIGCONT``. Nothing of ordo is replaced: the hooks count and stop, then call
the shipped methods.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from ordo.arbiter.directsink import DirectSink
from ordo.arbiter.sink import TransactionalSink

STOP_FILE = "CHAOS_STOP_FILE"
TABLES_OPEN = 2  # tables with records produced in their open transactions when the process stops
PRODUCED_AFTER = 2  # decisions of a table in one transaction before one is produced (the last is held)


def arm(trigger: Path) -> None:
    """Make the arbiter's sink stop the process once, at a commit, after ``trigger`` exists (``TransactionalSink``,
    or ``DirectSink`` with ``ORDO_DECISIONS_TRANSACTIONS=false``: each class's own ``begin`` and ``commit``)."""
    decisions: dict[str, int] = {}  # table -> decisions in its open transaction (begin is called for each)
    fired = False

    def hook(sink_class: type[TransactionalSink]) -> None:
        begin, commit = sink_class.begin, sink_class.commit

        def counting_begin(self: TransactionalSink, table: str) -> None:
            decisions[table] = decisions.get(table, 0) + 1 if table in self.open else 1
            begin(self, table)

        def stopping_commit(self: TransactionalSink) -> Any:
            nonlocal fired
            produced = sorted(t for t in self.open if decisions.get(t, 0) >= PRODUCED_AFTER)
            if not fired and len(produced) >= TABLES_OPEN and trigger.exists():
                fired = True
                for table in produced:  # their records reach the broker: the partitions are in the transactions
                    self.producers[table].flush(10.0)
                print(f"chaos: stopping in the middle of the transactions of {sorted(self.open)}", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            return commit(self)

        sink_class.begin = counting_begin  # type: ignore[method-assign]
        sink_class.commit = stopping_commit  # type: ignore[method-assign]

    hook(TransactionalSink)
    hook(DirectSink)


def main() -> None:
    trigger = os.environ.get(STOP_FILE)
    if trigger:
        arm(Path(trigger))
    from ordo.cli import main as ordo_main

    sys.argv[0] = "ordo"
    ordo_main()


if __name__ == "__main__":
    main()
