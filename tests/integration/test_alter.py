"""ALTER TABLE through Kafka: real ``ordo arbiter`` and ``ordo consumer`` processes, a real ``ordo replay --verify``.

A stale writer is rejected ``SCHEMA_CHANGED``, an ALTER concurrent with a
commit fails, hostile ALTER intents published straight onto the intents topic
are each rejected with their reason while the table goes on; the arbiter
restarted from its log keeps the new schema; the consumer's catalog serves
each version with its own schema; the replay re-derives every decision.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ordo.producer import CommitClient
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, Outcome, Reason, TableMetadata, encode
from ordo.services.audit import EXIT_OK, run_replay
from ordo.services.stack import ManagedProcess
from ordo.settings import Settings

from .conftest import ConsumerProcess
from .test_arbiter_service import check_log, create_intent, wait_until

pytestmark = pytest.mark.timeout(240)

TABLE = "altered"


def data_file(txn: str, part: str) -> DataFile:
    return DataFile(path=f"p={part}/{txn}-0.parquet", partition={"p": part}, record_count=1, size_bytes=10)


def insert(txn: str, read: int, part: str = "a") -> CommitIntent:
    return CommitIntent(
        txn_id=txn,
        table=TABLE,
        operation=Operation.INSERT_INTO,
        read_version=read,
        partitions=({"p": part},),
        added_files=(data_file(txn, part),),
    )


def alter(txn: str, read: int, metadata: TableMetadata) -> CommitIntent:
    return CommitIntent(txn_id=txn, table=TABLE, operation=Operation.ALTER_TABLE, read_version=read, metadata=metadata)


def test_alter_table_through_kafka(
    arbiter: Callable[..., ManagedProcess],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
    settings: Settings,
) -> None:
    def raw(value: CommitIntent) -> CommitDecision:
        """Straight onto the intents topic, as a producer that is not our client would."""
        offset = commit_client.publish_raw(TABLE, encode(value))
        wait_until(lambda: len(commit_client.decisions(TABLE)) > offset, 30, f"the decision of offset {offset}")
        return commit_client.decisions(TABLE)[offset]

    first = arbiter()
    created = commit_client.commit(create_intent(TABLE), timeout=30)
    v0 = created.metadata
    assert v0 is not None
    assert commit_client.commit(insert("w1", 0), timeout=30).id_version == 1
    v1 = v0.model_copy(update={"schema": v0.schema + ", `note` string", "properties": {"owner": "team-a"}})

    # A writer staged at version 1 commits after the ALTER: its snapshot predates the change.
    staged = insert("stale", 1, "b")
    changed = commit_client.commit(alter("alter-1", 1, v1), timeout=30)
    assert changed.accepted and changed.id_version == 2 and changed.metadata == v1, changed.message
    stale = commit_client.commit(staged, timeout=30)
    assert (stale.outcome, stale.reason) == (Outcome.REJECTED, Reason.SCHEMA_CHANGED)
    assert (stale.conflicting_txn_id, stale.conflicting_version) == ("alter-1", 2)
    assert commit_client.commit(insert("w2", 2, "b"), timeout=30).id_version == 3

    # An ALTER whose snapshot is older than a commit fails (column ALTER of the matrix).
    v2 = v1.model_copy(update={"schema": v1.schema + ", `score` double"})
    late = commit_client.commit(alter("alter-late", 2, v2), timeout=30)
    assert (late.reason, late.conflicting_txn_id) == (Reason.CONFLICT_LATER_FAILS, "w2"), late.message

    # Hostile ALTERs, each rejected with its reason; none consumes a version.
    hostile = [
        (alter("drop", 3, v1.model_copy(update={"schema": "id BIGINT, p STRING, note STRING"})), "UNSUPPORTED_ALTER"),
        (
            alter("retype", 3, v1.model_copy(update={"schema": v1.schema.replace("v STRING", "v INT")})),
            "UNSUPPORTED_ALTER",
        ),
        (alter("dup", 3, v1.model_copy(update={"schema": v1.schema + ", NOTE string"})), "INVALID_METADATA"),
        (alter("type", 3, v1.model_copy(update={"schema": v1.schema + ", x map<string,int>"})), "INVALID_METADATA"),
        (alter("key", 3, v1.model_copy(update={"primary_key": ("v",)})), "UNSUPPORTED_ALTER"),
        (
            alter("policy", 3, v1.model_copy(update={"properties": {"ordo.conflict_policy": "serializable"}})),
            "UNSUPPORTED_ALTER",
        ),
        (alter("same", 3, v1), "INVALID_OPERATION"),
    ]
    for value, reason in hostile:
        decision = raw(value)
        assert (decision.outcome, decision.reason) == (Outcome.REJECTED, reason), (value.txn_id, decision.message)
    assert commit_client.commit(alter("alter-2", 3, v2), timeout=30).id_version == 4

    # Restarted, the arbiter rebuilds the altered schema from its log (or checkpoint): stale writers still fail.
    assert first.terminate(timeout=15) == 0
    arbiter()
    again = commit_client.commit(insert("stale-2", 3, "a"), timeout=30)
    assert again.reason == Reason.SCHEMA_CHANGED and again.conflicting_version == 4
    assert commit_client.commit(insert("w3", 4, "a"), timeout=30).id_version == 5
    check_log(commit_client.decisions(TABLE), len(commit_client.decisions(TABLE)))

    lines: list[str] = []
    assert run_replay(settings, TABLE, verify=True, echo=lines.append) == EXIT_OK, "\n".join(lines)

    # The consumer serves each version with the schema it had; the history shows the ALTERs and the rejections.
    with consumer().catalog() as catalog:
        info = catalog.wait_for_version(TABLE, 5, timeout=60.0)
        assert info.error is None and info.metadata == v2
        expected = {0: v0, 1: v0, 2: v1, 3: v1, 4: v2, 5: v2}
        assert {v: catalog.snapshot(TABLE, v).metadata for v in expected} == expected
        history = {d.txn_id: d for d in catalog.history(TABLE)}
        assert history["alter-1"].operation is Operation.ALTER_TABLE and history["alter-1"].id_version == 2
        assert history["stale"].reason == "SCHEMA_CHANGED"
        assert [c.operation for c in catalog.commits(TABLE, 2, 4)] == [
            Operation.ALTER_TABLE,
            Operation.INSERT_INTO,
            Operation.ALTER_TABLE,
        ]
