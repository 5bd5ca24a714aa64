"""The operation registry (``schemas.operations.REGISTRY``): one declaration per operation, read by every part."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ordo.arbiter import core
from ordo.arbiter.policy import FIXED_CELLS, PolicyError, Resolution, available_policies, load_policy, matrix_markdown
from ordo.schemas.operations import (
    CLASSES,
    COMMON_REASONS,
    LINEAGE_REASONS,
    MATRIX_FAIL_REASONS,
    OP_CLASS,
    REGISTRY,
    REWRITING_OPERATIONS,
    TRUNCATING_OPERATIONS,
    CatalogEffect,
    ChangeRows,
    Check,
    OpClass,
    Operation,
    Reason,
    Removes,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_operation_is_declared_once_in_wire_order() -> None:
    assert list(REGISTRY) == list(Operation)
    assert all(spec.operation is op for op, spec in REGISTRY.items())
    assert [c.op_class for c in CLASSES] == list(OpClass)


def test_the_docs_matrix_is_the_registry_and_the_policy() -> None:
    text = (DOCS / "conflicts.md").read_text()
    found = re.search(r"<!-- matrix:maxcompute -->\n(.*?)<!-- /matrix -->", text, re.S)
    assert found is not None, "docs/conflicts.md lost its generated matrix block"
    assert found.group(1) == matrix_markdown(load_policy("maxcompute"))


def test_the_docs_table_changes_with_the_registry() -> None:
    table = matrix_markdown(load_policy("maxcompute"))
    assert "| OVERWRITE (INSERT OVERWRITE, TRUNCATE" in table
    assert "| ALTER (ALTER TABLE) | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ |" in table
    serial = matrix_markdown(load_policy("serializable"))
    assert serial != table and "OW" not in serial


@pytest.mark.parametrize("name", available_policies())
def test_a_fixed_class_has_its_cells_in_every_policy(name: str) -> None:
    policy = load_policy(name)
    fixed = [c.op_class for c in CLASSES if c.fixed is not None]
    assert fixed == [OpClass.ALTER]
    for cls in fixed:
        for other in OpClass:
            assert policy.resolve(cls, other) is Resolution.LATER_FAILS
            assert policy.resolve(other, cls) is Resolution.LATER_FAILS
    assert set(FIXED_CELLS) == {(e, la) for e in OpClass for la in OpClass if OpClass.ALTER in (e, la)}


def test_a_policy_may_not_choose_a_fixed_cell(tmp_path: Path) -> None:
    rows = ["earlier,later,outcome"]
    rows += [f"{e.name},{la.name},later_fails" for e in OpClass for la in OpClass if OpClass.ALTER not in (e, la)]
    rows.append("ALTER,INSERT,new_data_written")
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(PolicyError, match="must be later_fails"):
        type(load_policy()).from_csv("bad", path)


def test_the_arbiter_reads_its_sets_off_the_registry() -> None:
    assert core._TRUNCATES == {op for op, s in REGISTRY.items() if s.removes is Removes.SCOPE}
    assert core._REWRITES == {op for op, s in REGISTRY.items() if s.removes is Removes.NAMED}
    assert core._CREATES == {Operation.CREATE_TABLE}
    assert core._ALTERS == {Operation.ALTER_TABLE}
    assert core._WHOLE_PARTITIONS == {Operation.MAJOR_COMPACT, Operation.CLUSTER}
    assert {Operation(v) for v in TRUNCATING_OPERATIONS} == core._TRUNCATES
    assert {Operation(v) for v in REWRITING_OPERATIONS} == core._REWRITES
    assert set(OP_CLASS) == {op for op, s in REGISTRY.items() if s.op_class is not None}


def test_every_reason_is_declared_by_an_operation_or_common_to_all() -> None:
    declared = set(COMMON_REASONS) | {r for s in REGISTRY.values() for r in s.reasons}
    assert declared == set(Reason)
    assert MATRIX_FAIL_REASONS <= declared and LINEAGE_REASONS <= declared
    for spec in REGISTRY.values():
        if Check.MATRIX in spec.checks:
            assert Reason.CONFLICT_LATER_FAILS in spec.reasons, spec.operation
        if Check.REWRITE in spec.checks:
            assert Reason.FILE_OUTSIDE_SCOPE in spec.reasons, spec.operation


def test_effects_agree_with_each_other() -> None:
    for spec in REGISTRY.values():
        assert (spec.op_class is None) == (Check.CREATE in spec.checks)
        assert spec.metadata == (spec.catalog in (CatalogEffect.CREATE, CatalogEffect.METADATA))
        assert (spec.change_rows is ChangeRows.NONE) or spec.data_change
        assert (spec.change_rows is ChangeRows.SCOPE) == spec.truncates
        assert not (spec.metadata and (spec.adds_files or spec.removes_files))
