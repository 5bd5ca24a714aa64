"""CHECK constraints (since 0.6) through the pure core: ADD_CONSTRAINT and DROP_CONSTRAINT, their matrix row and
column (ALTER's), hostile intents, the ALTER_TABLE that may no longer set one, and every reader of the decisions."""

from __future__ import annotations

import pytest

from ordo.arbiter.checkpoint import dump_state, load_state, states_equal
from ordo.arbiter.core import Reason, evaluate_record, rebuild
from ordo.consumer.arrow import CHANGES, ChangeReader
from ordo.schemas import CommitDecision, CommitIntent, Operation, TableMetadata, decode, encode
from ordo.schemas.decisionlog import LogHead, check
from ordo.schemas.operations import CONSTRAINT_PREFIX, REGISTRY, delta_operation

from .helpers import CLASS_OPERATION, Table, metadata
from .test_write_schema_change import _written_with

BASE = metadata()  # id BIGINT, v STRING, dt STRING; partitioned by dt
KEY = CONSTRAINT_PREFIX + "positive_id"


def with_properties(properties: dict[str, str], base: TableMetadata = BASE, **changes: object) -> TableMetadata:
    fields = {
        "location": base.location,
        "schema": base.schema,
        "primary_key": base.primary_key,
        "partition_columns": base.partition_columns,
        "properties": properties,
    }
    fields.update(changes)
    return TableMetadata(**fields)  # type: ignore[arg-type]


CHECKED = with_properties({KEY: "id > 0"})


def constraint_intent(
    table: Table,
    operation: Operation = Operation.ADD_CONSTRAINT,
    new: TableMetadata | None = CHECKED,
    read_version: int | None = None,
    txn: str = "check",
    **kw: object,
) -> CommitIntent:
    return CommitIntent(
        txn_id=txn,
        table="t",
        operation=operation,
        read_version=table.state.head_version if read_version is None else read_version,
        metadata=new,
        **kw,  # type: ignore[arg-type]
    )


def test_a_constraint_is_added_as_a_metadata_version_and_dropped_again() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    added = table.submit(constraint_intent(table))
    assert added.accepted, added.message
    assert (added.id_version, added.metadata, added.time_version is not None) == (2, CHECKED, True)
    assert table.state.metadata == CHECKED and len(table.state.files) == 1  # metadata only: the files stay
    assert delta_operation(Operation.ADD_CONSTRAINT, {}) == "ADD CONSTRAINT"
    dropped = table.submit(constraint_intent(table, Operation.DROP_CONSTRAINT, BASE, txn="uncheck"))
    assert dropped.accepted, dropped.message
    assert table.state.metadata == BASE and delta_operation(Operation.DROP_CONSTRAINT, {}) == "DROP CONSTRAINT"


@pytest.mark.parametrize("later", list(CLASS_OPERATION.values()), ids=lambda op: op.value)
def test_a_write_whose_snapshot_predates_a_constraint_is_rejected_schema_changed(later: Operation) -> None:
    """Row ALTER: its writer checked rows against the constraints of its snapshot, not this one."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", n=2)
    read = table.state.head_version
    stale = table.intent(later, read, "a")
    assert table.submit(constraint_intent(table, read_version=read)).accepted
    rejected = table.submit(stale)
    assert (rejected.reason, rejected.conflicting_txn_id) == (Reason.SCHEMA_CHANGED, "check")


@pytest.mark.parametrize("earlier", list(CLASS_OPERATION.values()), ids=lambda op: op.value)
@pytest.mark.parametrize("operation", [Operation.ADD_CONSTRAINT, Operation.DROP_CONSTRAINT])
def test_a_constraint_change_concurrent_with_any_commit_fails(earlier: Operation, operation: Operation) -> None:
    """Column ALTER: an ADD_CONSTRAINT checked the rows of its read version, and none committed since."""
    table = Table(properties={KEY: "id > 0"} if operation is Operation.DROP_CONSTRAINT else None)
    table.commit(Operation.INSERT_INTO, "b", n=2)
    read = table.state.head_version
    table.commit(earlier, "b")
    new = BASE if operation is Operation.DROP_CONSTRAINT else CHECKED
    rejected = table.submit(constraint_intent(table, operation, new, read_version=read))
    assert rejected.reason == Reason.CONFLICT_LATER_FAILS, rejected.message


HOSTILE = {
    "no metadata": (None, {}, Reason.INVALID_METADATA),
    "a partition": (CHECKED, {"partitions": ({"dt": "a"},)}, Reason.INVALID_PARTITION),
    "a schema change too": (
        with_properties({KEY: "id > 0"}, schema=BASE.schema + ", `n` string"),
        {},
        Reason.INVALID_CONSTRAINT,
    ),
    "another property too": (with_properties({KEY: "id > 0", "owner": "b"}), {}, Reason.INVALID_CONSTRAINT),
    "no constraint": (with_properties({"owner": "b"}), {}, Reason.INVALID_CONSTRAINT),
    "nothing changed": (BASE, {}, Reason.INVALID_CONSTRAINT),
    "an upper-case name": (with_properties({CONSTRAINT_PREFIX + "Positive": "id > 0"}), {}, Reason.INVALID_CONSTRAINT),
    "a dotted name": (with_properties({CONSTRAINT_PREFIX + "a.b": "id > 0"}), {}, Reason.INVALID_CONSTRAINT),
    "a blank expression": (with_properties({KEY: "  "}), {}, Reason.INVALID_CONSTRAINT),
    "an unprintable expression": (with_properties({KEY: "id > 0\x00"}), {}, Reason.INVALID_CONSTRAINT),
    "a file": (CHECKED, {"added_files": Table().files("f", "a")}, Reason.INVALID_OPERATION),
    "a restore version": (CHECKED, {"restore_version": 0}, Reason.INVALID_OPERATION),
}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_a_hostile_add_constraint_is_rejected_with_a_reason_and_changes_nothing(case: str) -> None:
    new, extra, reason = HOSTILE[case]
    table = Table()
    rejected = table.submit(constraint_intent(table, new=new, **extra))
    assert rejected.reason == reason, rejected.message
    assert table.state.metadata == BASE and table.state.head_version == 0


def test_a_constraint_in_use_cannot_be_added_again_nor_a_missing_one_dropped() -> None:
    table = Table()
    assert table.submit(constraint_intent(table)).accepted
    again = table.submit(constraint_intent(table, new=with_properties({KEY: "id > 1"}), txn="again"))
    assert (again.reason, again.message) == (
        Reason.INVALID_CONSTRAINT,
        "constraint 'positive_id' exists already: drop it first",
    )
    other = with_properties({KEY: "id > 0", CONSTRAINT_PREFIX + "other": "v IS NOT NULL"})
    missing = table.submit(constraint_intent(table, Operation.DROP_CONSTRAINT, other, txn="drop-missing"))
    assert missing.reason == Reason.INVALID_CONSTRAINT and "has no constraint 'other'" in (missing.message or "")
    assert table.state.metadata == CHECKED


def test_an_alter_table_may_not_set_a_constraint_but_one_of_an_older_writer_still_may() -> None:
    """Since 0.6 a constraint comes from ADD_CONSTRAINT (whose writer checks the rows); a 0.5 writer's ALTER_TABLE is
    decided by 0.5's rules, so a replay of an older log re-derives what was logged."""
    sneaked = CommitIntent(txn_id="alter", table="t", operation=Operation.ALTER_TABLE, read_version=0, metadata=CHECKED)
    table = Table()
    current = evaluate_record(table.state, encode(sneaked), 5_000, 1)
    assert current.reason == Reason.INVALID_CONSTRAINT, current.message
    older = evaluate_record(table.state, _written_with("0.5", sneaked), 5_000, 1)
    assert older.accepted, older.message


def test_readers_fold_a_constraint_as_an_alter_table() -> None:
    """The folds, the catalog and the change feed register nothing for it: they use ALTER_TABLE's handlers."""
    assert REGISTRY[Operation.ADD_CONSTRAINT].extends is Operation.ALTER_TABLE
    assert type(CHANGES[Operation.ADD_CONSTRAINT]) is ChangeReader  # no change rows
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    decision = table.submit(constraint_intent(table))
    data = [encode(d) for d in table.decisions]
    rebuilt = rebuild("t", data)
    assert states_equal(rebuilt, table.state) and rebuilt.metadata == CHECKED
    assert states_equal(load_state(dump_state(rebuilt)), table.state)
    head = LogHead("t")
    for offset, value in enumerate(data):
        head = check(head, value, offset).head
    assert head.metadata == CHECKED and head.version == decision.id_version
    back = decode(encode(decision))
    assert isinstance(back, CommitDecision) and back == decision


def test_an_add_constraint_without_metadata_breaks_the_log() -> None:
    """The log's fold holds it to ALTER_TABLE's invariant (NO_METADATA), inherited."""
    table = Table()
    good = table.submit(constraint_intent(table))
    forged = good.model_copy(update={"metadata": None})
    head = check(LogHead("t"), encode(table.decisions[0]), 0).head
    with pytest.raises(Exception, match="no_metadata: ADD_CONSTRAINT at version 1 carries no metadata"):
        check(head, encode(forged), 1)
