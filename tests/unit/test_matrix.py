"""Every matrix cell, by name and by table, through the pure core.

The reference vectors are ``tests/unit/conflict_matrix.csv`` (MaxCompute's 25 cells);
the CLUSTER cells are docs/conflicts.md's rules, checked by name below and as a
table against ``ordo/arbiter/policies/maxcompute.csv``.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ordo.arbiter.core import Reason
from ordo.arbiter.policy import OpClass, Resolution, available_policies, load_policy
from ordo.schemas import Outcome, Rebase

from .helpers import CLASS_OPERATION, Table

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO.parent / "shared" / "reference" / "conflict_matrix.csv"
REFERENCE_COPY = Path(__file__).parent / "conflict_matrix.csv"


def reference_rows() -> list[tuple[str, str, str]]:
    path = REFERENCE if REFERENCE.exists() else REFERENCE_COPY
    with path.open(newline="") as handle:
        return [(r["earlier"], r["later"], r["outcome"]) for r in csv.DictReader(handle)]


def test_reference_copy_matches_the_source() -> None:
    """tests/unit/conflict_matrix.csv is a verbatim copy for clones without shared/ beside them."""
    if REFERENCE.exists():
        assert REFERENCE.read_text() == REFERENCE_COPY.read_text()
    assert len(reference_rows()) == 25


@pytest.mark.parametrize(("earlier", "later", "outcome"), reference_rows())
def test_maxcompute_policy_matches_reference(earlier: str, later: str, outcome: str) -> None:
    assert load_policy("maxcompute").resolve(OpClass[earlier], OpClass[later]) is Resolution(outcome)


CLUSTER_RULES = [
    # CLUSTER follows the MAJOR_COMPACT row and column ...
    ("CLUSTER", "OVERWRITE", "later_overwrites"),
    ("CLUSTER", "UPDATE", "new_data_written"),
    ("CLUSTER", "MINOR_COMPACT", "later_fails"),
    ("CLUSTER", "MAJOR_COMPACT", "later_fails"),
    ("CLUSTER", "CLUSTER", "later_fails"),
    ("OVERWRITE", "CLUSTER", "later_fails"),
    ("UPDATE", "CLUSTER", "later_fails"),
    ("MINOR_COMPACT", "CLUSTER", "compaction_completes"),
    ("MAJOR_COMPACT", "CLUSTER", "later_fails"),
    # ... except that CLUSTER and INSERT never conflict, in either order.
    ("CLUSTER", "INSERT", "new_data_written"),
    ("INSERT", "CLUSTER", "compaction_completes"),
]


@pytest.mark.parametrize(("earlier", "later", "outcome"), CLUSTER_RULES)
def test_cluster_rules(earlier: str, later: str, outcome: str) -> None:
    assert load_policy("maxcompute").resolve(OpClass[earlier], OpClass[later]) is Resolution(outcome)


def test_cluster_mirrors_major_compact_except_with_insert() -> None:
    policy = load_policy("maxcompute")
    for other in OpClass:
        if other in (OpClass.INSERT, OpClass.CLUSTER):
            continue
        assert policy.resolve(OpClass.CLUSTER, other) is policy.resolve(OpClass.MAJOR_COMPACT, other)
        assert policy.resolve(other, OpClass.CLUSTER) is policy.resolve(other, OpClass.MAJOR_COMPACT)


def test_every_policy_file_is_complete() -> None:
    assert {"maxcompute", "serializable"} <= set(available_policies())
    for name in available_policies():
        policy = load_policy(name)
        assert len(policy.cells) == len(OpClass) == 7 and all(len(row) == 7 for row in policy.cells)


ALL_CELLS = reference_rows() + CLUSTER_RULES
REBASE = {
    "later_overwrites": Rebase.LATER_OVERWRITES,
    "compaction_completes": Rebase.COMPACTION_COMPLETES,
    "new_data_written": Rebase.NEW_DATA_WRITTEN,
}


def run_cell(earlier: OpClass, later: OpClass, *, same_partition: bool = True, policy: str | None = None):
    """Two transactions read at the same version; the earlier commits first. Returns (table, d1, d2)."""
    props = {"ordo.conflict_policy": policy} if policy else None
    table = Table(properties=props)
    table.commit(CLASS_OPERATION[OpClass.INSERT], "a", n=2)
    table.commit(CLASS_OPERATION[OpClass.INSERT], "b", n=2)
    read = table.state.head_version
    first = table.intent(CLASS_OPERATION[earlier], read, "a")
    second = table.intent(CLASS_OPERATION[later], read, "a" if same_partition else "b")
    return table, table.submit(first), table.submit(second)


@pytest.mark.parametrize(("earlier", "later", "outcome"), ALL_CELLS)
def test_cell_by_table(earlier: str, later: str, outcome: str) -> None:
    table, first, second = run_cell(OpClass[earlier], OpClass[later])
    assert first.outcome is Outcome.ACCEPTED
    if outcome == "later_fails":
        assert second.outcome is Outcome.REJECTED
        assert second.reason == Reason.CONFLICT_LATER_FAILS
        assert second.conflicting_txn_id == first.txn_id
        assert second.conflicting_version == first.id_version
        assert second.id_version is None
        assert table.state.head_version == first.id_version  # a rejection consumes no version
    else:
        assert second.outcome is Outcome.ACCEPTED, second.message
        assert second.rebase is REBASE[outcome]
        assert second.id_version == first.id_version + 1


@pytest.mark.parametrize(("earlier", "later", "outcome"), ALL_CELLS)
def test_cell_in_different_partitions_never_conflicts(earlier: str, later: str, outcome: str) -> None:
    _, first, second = run_cell(OpClass[earlier], OpClass[later], same_partition=False)
    assert first.accepted and second.accepted
    assert second.rebase is Rebase.NONE


@pytest.mark.parametrize(("earlier", "later", "outcome"), ALL_CELLS)
def test_cell_under_serializable_policy_always_fails(earlier: str, later: str, outcome: str) -> None:
    _, first, second = run_cell(OpClass[earlier], OpClass[later], policy="serializable")
    assert first.accepted
    assert second.reason == Reason.CONFLICT_LATER_FAILS


# --- named cells: what each rebase kind does to the file set -------------------------------


def test_insert_then_insert_later_fails() -> None:
    table = Table()
    read = table.state.head_version
    assert table.submit(table.intent(CLASS_OPERATION[OpClass.INSERT], read, txn="w1")).accepted
    loser = table.submit(table.intent(CLASS_OPERATION[OpClass.INSERT], read, txn="w2"))
    assert loser.reason == Reason.CONFLICT_LATER_FAILS and loser.conflicting_txn_id == "w1"
    assert table.live("a") == {"dt=a/w1-0.parquet"}


def test_insert_then_overwrite_later_overwrites_removes_the_earlier_files() -> None:
    table = Table()
    table.commit(CLASS_OPERATION[OpClass.INSERT], txn="base")
    read = table.state.head_version
    table.submit(table.intent(CLASS_OPERATION[OpClass.INSERT], read, txn="ins"))
    over = table.submit(table.intent(CLASS_OPERATION[OpClass.OVERWRITE], read, txn="ow"))
    assert over.rebase is Rebase.LATER_OVERWRITES
    assert set(over.removed_files) == {"dt=a/base-0.parquet", "dt=a/ins-0.parquet"}
    assert table.live("a") == {"dt=a/ow-0.parquet"}


def test_insert_then_minor_compaction_completes_and_keeps_the_new_files() -> None:
    table = Table()
    table.commit(CLASS_OPERATION[OpClass.INSERT], txn="base", n=3)
    read = table.state.head_version
    compact = table.intent(CLASS_OPERATION[OpClass.MINOR_COMPACT], read, txn="minor")
    table.submit(table.intent(CLASS_OPERATION[OpClass.INSERT], read, txn="ins"))
    done = table.submit(compact)
    assert done.rebase is Rebase.COMPACTION_COMPLETES
    assert set(done.removed_files) == {f"dt=a/base-{i}.parquet" for i in range(3)}
    assert table.live("a") == {"dt=a/minor-0.parquet", "dt=a/ins-0.parquet"}
    assert done.time_version is None  # compaction gets no time version


def test_minor_then_insert_new_data_written() -> None:
    table = Table()
    table.commit(CLASS_OPERATION[OpClass.INSERT], txn="base", n=2)
    read = table.state.head_version
    table.submit(table.intent(CLASS_OPERATION[OpClass.MINOR_COMPACT], read, txn="minor"))
    ins = table.submit(table.intent(CLASS_OPERATION[OpClass.INSERT], read, txn="ins"))
    assert ins.rebase is Rebase.NEW_DATA_WRITTEN
    assert table.live("a") == {"dt=a/minor-0.parquet", "dt=a/ins-0.parquet"}


def test_major_over_minor_replaces_the_minor_output_via_lineage() -> None:
    table = Table()
    table.commit(CLASS_OPERATION[OpClass.INSERT], txn="base", n=3)
    read = table.state.head_version
    major = table.intent(CLASS_OPERATION[OpClass.MAJOR_COMPACT], read, txn="major")  # reads all 3 files
    minor = table.intent(
        CLASS_OPERATION[OpClass.MINOR_COMPACT],
        read,
        txn="minor",
        removed=("dt=a/base-0.parquet", "dt=a/base-1.parquet"),
    )
    assert table.submit(minor).accepted
    done = table.submit(major)
    assert done.rebase is Rebase.COMPACTION_COMPLETES
    assert set(done.removed_files) == {"dt=a/minor-0.parquet", "dt=a/base-2.parquet"}
    assert table.live("a") == {"dt=a/major-0.parquet"}


def test_compaction_over_compaction_with_foreign_inputs_is_rejected() -> None:
    """The earlier compaction consumed a file the later one never read: replacing its output would lose data."""
    table = Table()
    table.commit(CLASS_OPERATION[OpClass.INSERT], txn="base", n=2)
    read = table.state.head_version
    major = table.intent(CLASS_OPERATION[OpClass.MAJOR_COMPACT], read, txn="major", removed=("dt=a/base-0.parquet",))
    minor = table.intent(
        CLASS_OPERATION[OpClass.MINOR_COMPACT],
        read,
        txn="minor",
        removed=("dt=a/base-0.parquet", "dt=a/base-1.parquet"),
    )
    assert table.submit(minor).accepted
    rejected = table.submit(major)
    assert rejected.reason == Reason.CONFLICT_COMPACTION_LINEAGE
    assert rejected.conflicting_txn_id == "minor"


def test_overwrite_then_overwrite_later_wins() -> None:
    table = Table()
    table.commit(CLASS_OPERATION[OpClass.INSERT], txn="base")
    read = table.state.head_version
    table.submit(table.intent(CLASS_OPERATION[OpClass.OVERWRITE], read, txn="o1"))
    o2 = table.submit(table.intent(CLASS_OPERATION[OpClass.OVERWRITE], read, txn="o2"))
    assert o2.rebase is Rebase.LATER_OVERWRITES and o2.removed_files == ("dt=a/o1-0.parquet",)
    assert table.live("a") == {"dt=a/o2-0.parquet"}


# --- scopes ------------------------------------------------------------------------------


def test_whole_table_operation_conflicts_with_any_partition() -> None:
    table = Table()
    read = table.state.head_version
    table.submit(table.intent(CLASS_OPERATION[OpClass.INSERT], read, "b", txn="ins_b"))
    whole = table.submit(table.intent(CLASS_OPERATION[OpClass.UPDATE], read, None, txn="upd_all", n=0))
    assert whole.reason == Reason.CONFLICT_LATER_FAILS and whole.conflicting_txn_id == "ins_b"


def test_partition_operation_conflicts_with_an_earlier_whole_table_one() -> None:
    table = Table()
    table.commit(CLASS_OPERATION[OpClass.INSERT], "a")
    read = table.state.head_version
    table.submit(table.intent(CLASS_OPERATION[OpClass.OVERWRITE], read, None, txn="truncate_all", n=0))
    late = table.submit(table.intent(CLASS_OPERATION[OpClass.INSERT], read, "z", txn="ins_z"))
    assert late.reason == Reason.CONFLICT_LATER_FAILS and late.conflicting_txn_id == "truncate_all"


def test_unpartitioned_table_is_one_scope() -> None:
    table = Table(partitioned=False)
    read = table.state.head_version
    assert table.submit(table.intent(CLASS_OPERATION[OpClass.INSERT], read, None, txn="a")).accepted
    assert table.submit(table.intent(CLASS_OPERATION[OpClass.INSERT], read, None, txn="b")).reason == (
        Reason.CONFLICT_LATER_FAILS
    )


def test_non_concurrent_transactions_always_succeed() -> None:
    table = Table()
    for cls in CLASS_OPERATION:  # the data classes (ALTER: tests/unit/test_alter.py)
        table.commit(CLASS_OPERATION[cls], "a")
    assert table.state.head_version == 6
