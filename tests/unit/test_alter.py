"""ALTER_TABLE through the pure core: accepted additions, the matrix row and column, hostile intents."""

from __future__ import annotations

from pathlib import Path

import pytest

from ordo.arbiter.checkpoint import dump_state, load_state, states_equal
from ordo.arbiter.core import Reason, rebuild
from ordo.arbiter.policy import OpClass, Policy, PolicyError, Resolution, available_policies, load_policy
from ordo.schemas import CommitDecision, CommitIntent, Operation, TableMetadata, decode, encode

from .helpers import CLASS_OPERATION, Table, metadata

BASE = metadata()  # id BIGINT, v STRING, dt STRING; partitioned by dt


def altered(schema: str | None = None, properties: dict[str, str] | None = None, **changes: object) -> TableMetadata:
    """The test table's metadata with ``schema``/``properties`` replaced (default: one column ``note`` added)."""
    fields = {
        "location": BASE.location,
        "schema": BASE.schema + ", `note` string" if schema is None else schema,
        "primary_key": BASE.primary_key,
        "partition_columns": BASE.partition_columns,
        "properties": dict(BASE.properties) if properties is None else properties,
    }
    fields.update(changes)
    return TableMetadata(**fields)  # type: ignore[arg-type]


def alter_intent(table: Table, read_version: int | None = None, txn: str = "alter", **kw: object) -> CommitIntent:
    fields: dict[str, object] = {"metadata": altered()}
    fields.update(kw)
    return CommitIntent(
        txn_id=txn,
        table="t",
        operation=Operation.ALTER_TABLE,
        read_version=table.state.head_version if read_version is None else read_version,
        **fields,  # type: ignore[arg-type]
    )


def test_an_alter_is_accepted_with_the_new_metadata_and_a_time_version() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    decision = table.submit(alter_intent(table))
    assert decision.accepted, decision.message
    assert decision.operation is Operation.ALTER_TABLE
    assert decision.id_version == 2 and decision.time_version is not None
    assert decision.metadata == altered() and table.state.metadata == altered()
    assert decision.added_files == () and decision.removed_files == ()
    assert len(table.state.files) == 1  # metadata only: the live files stay
    # A commit read after the change is accepted as usual.
    assert table.submit(table.intent(Operation.INSERT_INTO, decision.id_version, "a")).accepted


def test_properties_may_be_set_without_adding_columns() -> None:
    table = Table()
    decision = table.submit(alter_intent(table, metadata=altered(BASE.schema, {"owner": "team-b"})))
    assert decision.accepted, decision.message
    assert table.state.metadata is not None and table.state.metadata.properties == {"owner": "team-b"}


@pytest.mark.parametrize("later", list(CLASS_OPERATION.values()), ids=lambda op: op.value)
@pytest.mark.parametrize("same_partition", [True, False], ids=["same-partition", "other-partition"])
def test_a_writer_whose_snapshot_predates_the_change_is_rejected_schema_changed(
    later: Operation, same_partition: bool
) -> None:
    """Row ALTER: every later class fails, whatever partition it writes."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", n=2)
    table.commit(Operation.INSERT_INTO, "b", n=2)
    read = table.state.head_version
    stale = table.intent(later, read, "a" if same_partition else "b")
    alter = table.submit(alter_intent(table, read))
    assert alter.accepted
    rejected = table.submit(stale)
    assert rejected.reason == Reason.SCHEMA_CHANGED
    assert rejected.conflicting_txn_id == "alter" and rejected.conflicting_version == alter.id_version
    assert table.state.head_version == alter.id_version  # a rejection consumes no version


@pytest.mark.parametrize("earlier", list(CLASS_OPERATION.values()), ids=lambda op: op.value)
@pytest.mark.parametrize("partition", ["a", "b"])
def test_an_alter_concurrent_with_any_commit_fails(earlier: Operation, partition: str) -> None:
    """Column ALTER: an ALTER read before any commit of any class, in any partition, fails."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", n=2)
    table.commit(Operation.INSERT_INTO, "b", n=2)
    read = table.state.head_version
    first = table.submit(table.intent(earlier, read, partition))
    assert first.accepted, first.message
    second = table.submit(alter_intent(table, read))
    assert second.reason == Reason.CONFLICT_LATER_FAILS
    assert second.conflicting_txn_id == first.txn_id and second.conflicting_version == first.id_version


def test_two_concurrent_alters_the_second_fails_schema_changed() -> None:
    table = Table()
    read = table.state.head_version
    assert table.submit(alter_intent(table, read, "alter-1")).accepted
    second = table.submit(alter_intent(table, read, "alter-2", metadata=altered(BASE.schema + ", `other` int")))
    assert second.reason == Reason.SCHEMA_CHANGED and second.conflicting_txn_id == "alter-1"


@pytest.mark.parametrize("name", available_policies())
def test_every_policy_fails_every_cell_of_the_alter_row_and_column(name: str) -> None:
    policy = load_policy(name)
    for other in OpClass:
        assert policy.resolve(OpClass.ALTER, other) is Resolution.LATER_FAILS
        assert policy.resolve(other, OpClass.ALTER) is Resolution.LATER_FAILS


def test_a_policy_cannot_relax_an_alter_cell(tmp_path: Path) -> None:
    source = (Path(__file__).resolve().parents[2] / "ordo" / "arbiter" / "policies" / "maxcompute.csv").read_text()
    path = tmp_path / "lax.csv"
    path.write_text(source.rstrip("\n") + "\nALTER,INSERT,new_data_written\n")
    with pytest.raises(PolicyError, match="must be later_fails"):
        Policy.from_csv("lax", path)
    path.write_text(source.rstrip("\n") + "\nALTER,INSERT,later_fails\n")
    assert Policy.from_csv("strict", path).resolve(OpClass.ALTER, OpClass.INSERT) is Resolution.LATER_FAILS


HOSTILE = [
    ("no metadata", {"metadata": None}, Reason.INVALID_METADATA),
    ("drops a column", {"metadata": altered("id BIGINT, dt STRING")}, Reason.UNSUPPORTED_ALTER),
    ("renames a column", {"metadata": altered("id BIGINT, value STRING, dt STRING")}, Reason.UNSUPPORTED_ALTER),
    ("retypes a column", {"metadata": altered("id BIGINT, v BIGINT, dt STRING")}, Reason.UNSUPPORTED_ALTER),
    ("reorders columns", {"metadata": altered("id BIGINT, dt STRING, v STRING")}, Reason.UNSUPPORTED_ALTER),
    (
        "adds in the middle",
        {"metadata": altered("id BIGINT, note STRING, v STRING, dt STRING")},
        Reason.UNSUPPORTED_ALTER,
    ),
    ("repeats a name", {"metadata": altered(BASE.schema + ", V string")}, Reason.INVALID_METADATA),
    ("adds a name twice", {"metadata": altered(BASE.schema + ", n int, N int")}, Reason.INVALID_METADATA),
    ("a reserved name", {"metadata": altered(BASE.schema + ", _ordo_op string")}, Reason.INVALID_METADATA),
    ("a change-feed name", {"metadata": altered(BASE.schema + ", _change_type string")}, Reason.INVALID_METADATA),
    ("an unknown type", {"metadata": altered(BASE.schema + ", n varchr(3)")}, Reason.INVALID_METADATA),
    ("a nested type", {"metadata": altered(BASE.schema + ", n array<int>")}, Reason.INVALID_METADATA),
    ("a decimal too wide", {"metadata": altered(BASE.schema + ", n decimal(39,2)")}, Reason.INVALID_METADATA),
    (
        "a decimal scale above precision",
        {"metadata": altered(BASE.schema + ", n decimal(5,6)")},
        Reason.INVALID_METADATA,
    ),
    ("NOT NULL", {"metadata": altered(BASE.schema + ", n int NOT NULL")}, Reason.INVALID_METADATA),
    ("an unreadable schema", {"metadata": altered(BASE.schema + ", `n int")}, Reason.INVALID_METADATA),
    ("a trailing comma", {"metadata": altered(BASE.schema + ",")}, Reason.INVALID_METADATA),
    ("moves the location", {"metadata": altered(location="/elsewhere")}, Reason.UNSUPPORTED_ALTER),
    ("changes the key", {"metadata": altered(primary_key=("v",))}, Reason.UNSUPPORTED_ALTER),
    ("changes the partitioning", {"metadata": altered(partition_columns=())}, Reason.UNSUPPORTED_ALTER),
    (
        "changes the policy",
        {"metadata": altered(properties={"ordo.conflict_policy": "serializable"})},
        Reason.UNSUPPORTED_ALTER,
    ),
    ("changes nothing", {"metadata": BASE}, Reason.INVALID_OPERATION),
    ("names partitions", {"partitions": ({"dt": "a"},)}, Reason.INVALID_PARTITION),
    ("removes files", {"removed_files": ("dt=a/x-0.parquet",)}, Reason.INVALID_OPERATION),
]


@pytest.mark.parametrize(("case", "fields", "reason"), HOSTILE, ids=[c for c, _, _ in HOSTILE])
def test_a_hostile_alter_is_rejected_with_a_reason_and_changes_nothing(
    case: str, fields: dict[str, object], reason: str
) -> None:
    table = Table(properties={"owner": "a"} if case == "unsets" else None)
    table.commit(Operation.INSERT_INTO, "a")
    before = (table.state.head_version, table.state.metadata, set(table.state.files))
    decision = table.submit(alter_intent(table, **fields))
    assert decision.reason == reason, decision.message
    assert decision.message
    assert (table.state.head_version, table.state.metadata, set(table.state.files)) == before


def test_unsetting_a_property_is_not_supported() -> None:
    table = Table(properties={"owner": "a", "team": "x"})
    decision = table.submit(alter_intent(table, metadata=altered(BASE.schema, {"owner": "a"})))
    assert decision.reason == Reason.UNSUPPORTED_ALTER and "team" in (decision.message or "")


def test_an_alter_that_adds_files_is_rejected() -> None:
    table = Table()
    files = table.files("alter", "a")
    decision = table.submit(alter_intent(table, added_files=files))
    assert decision.reason == Reason.INVALID_OPERATION and "cannot add files" in (decision.message or "")


@pytest.mark.parametrize("operation", [Operation.UPDATE, Operation.DELETE, Operation.TRUNCATE, Operation.MAJOR_COMPACT])
def test_metadata_on_a_data_operation_is_still_refused(operation: Operation) -> None:
    """Only INSERT INTO and INSERT OVERWRITE may change the schema with their data (since 0.5; their checks are in
    tests/unit/test_write_schema_change.py)."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    decision = table.submit(table.intent(operation, 1, "a", metadata=altered()))
    assert decision.reason == Reason.INVALID_OPERATION
    assert decision.message == "metadata may only be given with CREATE_TABLE"


def test_the_decisions_rebuild_and_checkpoint_the_altered_state() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    read = table.state.head_version
    assert table.submit(alter_intent(table)).accepted
    assert table.submit(table.intent(Operation.UPDATE, read, "a")).reason == Reason.SCHEMA_CHANGED
    table.commit(Operation.INSERT_INTO, "b")
    rebuilt = rebuild("t", [encode(d) for d in table.decisions])
    assert rebuilt.metadata == altered() and rebuilt.head_version == table.state.head_version
    assert states_equal(load_state(dump_state(table.state)), table.state)
    # The rebuilt state keeps rejecting the stale writer.
    table.state = rebuilt
    assert table.submit(table.intent(Operation.UPDATE, read, "a", txn="late")).reason == Reason.SCHEMA_CHANGED


def test_an_alter_record_round_trips_through_the_codec() -> None:
    table = Table()
    intent = alter_intent(table)
    assert decode(encode(intent)) == intent
    decision = table.submit(intent)
    back = decode(encode(decision))
    assert isinstance(back, CommitDecision) and back == decision
    assert back.operation is Operation.ALTER_TABLE and back.metadata == altered()
