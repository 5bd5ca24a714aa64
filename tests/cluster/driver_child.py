"""``python -m tests.cluster.driver_child <master> <table> <first id> <rows> <when>``: a Spark driver on the cluster
that appends rows to an ordo table and is killed with SIGKILL in the middle of the commit.

``when`` is where the kill lands:

* ``published``: the moment the broker acknowledges the append's intent (its
  delivery report: the intent is on the intents topic), before the driver can
  read a decision;
* ``unpublished``: after the executors wrote every data file, before the
  intent is produced (what the write leaves are orphans).

The kill is ``killpg`` of the driver's whole process group (its Python and its
JVM, as ``kill -9`` of a driver would leave nothing of it); the parent starts
it in a session of its own. A SIGKILL sent from outside lands wherever the
driver happens to be, so hitting "intent on the broker, no decision read yet"
would be luck: this lands it there every time. Nothing of ordo is replaced:
the hooks print a line, kill, or call the shipped methods (as
tests/chaos/stop_in_transaction.py does for the arbiter).

Settings come from the ``ORDO_*`` variables, Spark's from ``SPARK_CONF_DIR``
and the executors' Python from ``PYSPARK_PYTHON`` (``Topology.driver_env``).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from ordo.producer.client import CommitClient, _DecisionReader

SCHEMA = "id BIGINT, name STRING, score INT, dt STRING"
PUBLISHED = "driver_child: intent published"  # followed by "<table> <offset> <txn id>"
UNPUBLISHED = "driver_child: files written, intent not published"  # followed by "<table> <txn id>"
WHEN = ("published", "unpublished")


def rows(first: int, count: int) -> list[tuple[int, str, int, str]]:
    """The rows the driver appends (the test's model has the same)."""
    return [(i, f"k{i}", i * 7, f"d{i % 2}") for i in range(first, first + count)]


def die(line: str) -> None:
    """Print ``line`` and SIGKILL this process group: the driver's Python and its JVM."""
    print(line, flush=True)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def arm(table: str, when: str) -> None:
    """Kill the driver at ``when`` in the commit of its first intent for ``table``."""
    if when == "published":
        delivered = _DecisionReader.delivered

        def killed_on_delivery(
            self: _DecisionReader, pending: Any, error: Any, offset: int | None, repeat: bool = False
        ) -> None:
            if self.table == table and not repeat and error is None and offset is not None:
                die(f"{PUBLISHED} {table} {offset} {pending.txn_id}")
            delivered(self, pending, error, offset, repeat)

        _DecisionReader.delivered = killed_on_delivery  # type: ignore[method-assign]
        return
    submit = CommitClient.submit

    def killed_before_submit(self: CommitClient, intent: Any, timeout: float = 30.0) -> Any:
        if intent.table == table:
            die(f"{UNPUBLISHED} {table} {intent.txn_id}")
        return submit(self, intent, timeout)

    CommitClient.submit = killed_before_submit  # type: ignore[method-assign]


def main() -> None:
    master, table, first, count, when = sys.argv[1:]
    if when not in WHEN:
        raise SystemExit(f"when must be one of {WHEN}, not {when!r}")
    arm(table, when)
    from ordo.producer.table import DeltaTable
    from ordo.spark import cluster_spark_session

    spark = cluster_spark_session(master, f"driver-killed-{when}")
    handle = DeltaTable.forName(spark, table)
    handle.insert_into(spark.createDataFrame(rows(int(first), int(count)), SCHEMA))
    print("driver_child: committed (the kill did not land)", flush=True)


if __name__ == "__main__":
    main()
