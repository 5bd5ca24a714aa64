"""A Spark driver on the cluster killed (SIGKILL of its Python and JVM) in the middle of an append to a table on S3.

* Right after its intent reached the intents topic: the arbiter decides it
  without the driver, the catalog honours the decision (the table equals the
  model with the driver's rows), every object in the bucket is a whole file a
  commit names, and the restarted driver's resubmission of the same intent is
  answered by the first decision (``duplicate_of``), changing nothing.
* After its executors wrote the files, before the intent was published: the
  table is unchanged, and the files are orphans no commit names that VACUUM
  (with orphans) removes, and nothing else.

The driver is a process of its own (tests/cluster/driver_child.py), its own
application on the cluster, killed exactly there by a hook around the shipped
client (a kill sent from outside would land there only by luck).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ordo.producer.client import CommitClient
from ordo.producer.table import DeltaTable
from ordo.schemas import CommitDecision, CommitIntent, Operation, decode
from ordo.services.stack import settings_env
from tests.chaos.common import first_decisions, read_logs
from tests.cluster.conftest import ROOT, Topology, objects, rows_of
from tests.cluster.driver_child import PUBLISHED, SCHEMA, UNPUBLISHED, rows

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.timeout(600)]

DRIVER_TIMEOUT = 300.0  # a second driver's start on the cluster, its write, up to the kill
DECISION_TIMEOUT = 60.0
APPENDED = (5, 20)  # the killed driver's rows: ids 5..24


def killed_driver(topology: Topology, table: str, first: int, count: int, when: str, log: Path) -> list[str]:
    """Run tests/cluster/driver_child.py until it is killed; its marker line's words after the marker."""
    env = os.environ | settings_env(topology.settings) | topology.driver_env() | {"PYTHONPATH": str(ROOT)}
    args = [topology.cluster.url, table, str(first), str(count), when]
    with log.open("wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.driver_child", *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the one it kills
        )
    try:
        child.wait(timeout=DRIVER_TIMEOUT)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    output = log.read_text(errors="replace")
    assert child.returncode == -signal.SIGKILL, f"the driver was not killed ({child.returncode}):\n{output[-3000:]}"
    marker = PUBLISHED if when == "published" else UNPUBLISHED
    lines = [line for line in output.splitlines() if line.startswith(marker)]
    assert len(lines) == 1, f"no kill at {when!r}:\n{output[-3000:]}"
    return lines[0][len(marker) :].split()


def killed_while_appending(
    topology: Topology, name: str, when: str, log: Path
) -> tuple[Any, dict[int, tuple[Any, ...]], int, list[str]]:
    """A keyed, partitioned table at ``s3://lake/<prefix>/<name>`` holding ten rows; then a driver appending rows
    5..24 to it (5..9 are upserts), killed at ``when``. The table, its model before the append, its head version
    before the append and the words of the driver's marker line."""
    spark = topology.spark
    table = DeltaTable.create(
        spark, name, schema=SCHEMA, primary_key="id", partitioned_by="dt",
        location=topology.location(name), settings=topology.settings,
    )  # fmt: skip
    model = {i: (f"s{i}", i, f"d{i % 2}") for i in range(10)}
    table.insert_into(spark.createDataFrame([(k, *v) for k, v in model.items()], SCHEMA))
    head = table.catalog.head(name)
    return table, model, head, killed_driver(topology, name, *APPENDED, when, log)


def named_files(table: Any) -> set[str]:
    """Every data file a commit of ``table`` added."""
    commits = table.catalog.commits(table.name, 0, None, include_rewrites=True)
    return {f.path for c in commits for f in c.added_files}


def decision_for(topology: Topology, table: str, intent_offset: int) -> CommitDecision:
    """The decision of the intent at ``intent_offset`` (the first in log order), once the arbiter made it."""
    deadline = time.monotonic() + DECISION_TIMEOUT
    while True:
        first, _ = first_decisions(read_logs(topology.settings, table))
        if intent_offset in first:
            return first[intent_offset]
        assert time.monotonic() < deadline, f"no decision for intent offset {intent_offset} of {table}"
        time.sleep(0.5)


def wait_for_head(table: Any, version: int | None) -> None:
    """Until the catalog shows ``version`` of ``table``."""
    assert version is not None
    deadline = time.monotonic() + DECISION_TIMEOUT
    while table.catalog.head(table.name) < version:
        assert time.monotonic() < deadline, f"the catalog does not show version {version} of {table.name}"
        time.sleep(0.2)


def test_a_driver_killed_right_after_publishing_is_honoured_and_its_resubmission_is_a_duplicate(
    topology: Topology, tmp_path: Path
) -> None:
    settings = topology.settings
    table, model, before, marker = killed_while_appending(topology, "driver_killed", "published", tmp_path / "log")
    _, offset_text, txn_id = marker
    offset = int(offset_text)
    # the intent is on the broker as the driver left it
    published = [r for r in read_logs(settings, "driver_killed").intents if r.offset == offset]
    assert len(published) == 1
    intent = decode(published[0].value or b"")
    assert isinstance(intent, CommitIntent) and intent.txn_id == txn_id
    assert intent.operation is Operation.INSERT_INTO and intent.added_files
    # honoured without the driver: decided, in the catalog, the table equal to the model with the driver's rows
    decision = decision_for(topology, "driver_killed", offset)
    assert decision.accepted and decision.duplicate_of is None, decision
    assert decision.id_version == before + 1
    wait_for_head(table, decision.id_version)
    model |= {i: (n, s, d) for i, n, s, d in rows(*APPENDED)}
    assert rows_of(table.read()) == model
    history = {d.txn_id: d for d in table.catalog.history("driver_killed")}
    assert history[txn_id].accepted and history[txn_id].id_version == decision.id_version
    # nothing half-visible: every object is a whole file a commit names, the driver's among them
    named = named_files(table)
    assert {f.path for f in intent.added_files} <= named
    stored = objects(table.location)
    assert set(stored) == named, sorted(set(stored) ^ named)
    assert all(stored[f.path] == f.size_bytes for f in intent.added_files), "a file of the intent is not whole"
    # the restarted driver publishes the same intent again: the first decision answers it, nothing changes
    with CommitClient(settings=settings) as client:
        again = client.commit(intent, timeout=DECISION_TIMEOUT)
    assert again.duplicate_of == offset, again
    assert again.accepted and again.id_version == decision.id_version
    assert table.catalog.head("driver_killed") == decision.id_version
    assert rows_of(table.read()) == model
    assert set(objects(table.location)) == named


def test_a_driver_killed_before_publishing_leaves_the_table_and_only_orphans_that_vacuum_removes(
    topology: Topology, tmp_path: Path
) -> None:
    from ordo.services.vacuum import apply_vacuum, kafka_intents_reader, plan_vacuum

    settings = topology.settings
    table, model, head, (_, txn_id) = killed_while_appending(
        topology, "driver_abandoned", "unpublished", tmp_path / "log"
    )
    named = named_files(table)
    intents = [decode(r.value or b"") for r in read_logs(settings, "driver_abandoned").intents]
    assert txn_id not in {i.txn_id for i in intents if isinstance(i, CommitIntent)}, "the intent was published"
    assert table.catalog.head("driver_abandoned") == head
    assert rows_of(table.read()) == model
    orphans = set(objects(table.location)) - named
    assert orphans, "the executors wrote no file before the kill"
    assert all(Path(p).name.startswith(f"{txn_id}-") for p in orphans), sorted(orphans)
    reader = kafka_intents_reader(settings)
    plan = plan_vacuum(
        table.catalog, "driver_abandoned", 0, orphans=True, intents=reader, orphan_age_hours=0, force=True
    )
    assert {f.path for f in plan.files} == orphans and {f.kind for f in plan.files} == {"orphan"}
    result = apply_vacuum(table.catalog, plan, intents=reader)
    assert {f.path for f in result.deleted} == orphans
    assert set(objects(table.location)) == named
    assert rows_of(table.read()) == model
