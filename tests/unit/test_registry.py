"""The operation registry (``schemas.operations.REGISTRY``): one declaration per operation, read by every part."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ordo.arbiter.policy import FIXED_CELLS, PolicyError, Resolution, available_policies, load_policy, matrix_markdown
from ordo.consumer import commits
from ordo.consumer.arrow import CHANGES, ChangeReader, DiffChanges, ScopeChanges
from ordo.schemas import decisionlog
from ordo.schemas.dispatch import TABLES, OperationTable, missing_handlers
from ordo.schemas.operations import (
    CLASSES,
    COMMON_REASONS,
    LINEAGE_REASONS,
    MATRIX_FAIL_REASONS,
    OP_CLASS,
    REGISTRY,
    REWRITING_OPERATIONS,
    TRUNCATING_OPERATIONS,
    OpClass,
    Operation,
    Reason,
    Removes,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


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
    assert "| ALTER (ALTER TABLE, ADD CONSTRAINT, DROP CONSTRAINT) | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ |" in table
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


def test_the_readers_sets_are_read_off_the_registry() -> None:
    assert TRUNCATING_OPERATIONS == {op.value for op, s in REGISTRY.items() if s.removes is Removes.SCOPE}
    assert REWRITING_OPERATIONS == {op.value for op, s in REGISTRY.items() if s.removes is Removes.NAMED}
    assert set(OP_CLASS) == {op for op, s in REGISTRY.items() if s.op_class is not None}


def test_every_reason_is_declared_by_an_operation_or_common_to_all() -> None:
    declared = set(COMMON_REASONS) | {r for s in REGISTRY.values() for r in s.reasons}
    assert declared == set(Reason)
    assert MATRIX_FAIL_REASONS <= declared and LINEAGE_REASONS <= declared
    for spec in REGISTRY.values():
        if spec.op_class is not None:  # its rules end with the matrix
            assert Reason.CONFLICT_LATER_FAILS in spec.reasons, spec.operation
        if spec.rewrites:
            assert Reason.FILE_OUTSIDE_SCOPE in spec.reasons, spec.operation


def test_effects_agree_with_each_other() -> None:
    for op, spec in REGISTRY.items():
        assert (spec.op_class is None) == (op is Operation.CREATE_TABLE)
        assert not (spec.metadata and (spec.adds_files or spec.removes_files))


# --------------------------------------------------------------------------- operations as registered behaviour


def _tables() -> list[OperationTable[object]]:
    """Every table, once the modules that fill them are imported."""
    for module in HANDLER_MODULES:
        importlib.import_module(module)
    return list(TABLES)


HANDLER_MODULES = ("ordo.arbiter.core", "ordo.schemas.decisionlog", "ordo.consumer.commits", "ordo.consumer.arrow")


def test_every_operation_has_a_handler_in_every_table() -> None:
    tables = _tables()
    assert {t.name for t in tables} == {
        "the arbiter's rules",
        "the arbiter's fold",
        "the log's fold",
        "the catalog writer",
        "the change-row reader",
    }
    assert missing_handlers() == []
    rules = next(t for t in tables if t.name == "the arbiter's rules")
    assert not rules.inherits and all(rules.own(op) for op in Operation)  # an operation's rules are its own


def test_the_handlers_agree_with_the_registry() -> None:
    """What each reader does for an operation matches what the contract says its decisions carry."""
    _tables()
    for op, spec in REGISTRY.items():
        reader = CHANGES[op]
        assert isinstance(reader, ScopeChanges) == spec.truncates, op
        assert isinstance(reader, DiffChanges) == (spec.removes is Removes.RESTORE), op
        assert type(reader) is ChangeReader or spec.data_change, op  # change rows only for logical changes
        assert (decisionlog.METADATA_STEP[op] is decisionlog._sets_metadata) == spec.metadata, op
        assert (commits.CATALOG[op] in (commits.first_commit, commits.new_metadata_version)) == spec.metadata, op
        assert (commits.CATALOG[op] is commits.new_data) == (
            spec.data_change and type(reader) is not ChangeReader and not reader.whole_snapshots
        ), op


def test_a_table_refuses_a_second_handler_and_names_what_it_lacks() -> None:
    table: OperationTable[str] = OperationTable("a test table", __name__)
    try:
        table.register(Operation.INSERT_INTO)("first")
        with pytest.raises(ValueError, match="INSERT_INTO already has a handler"):
            table.register(Operation.INSERT_INTO)("second")
        assert table[Operation.INSERT_INTO] == "first"
        with pytest.raises(LookupError, match="a test table has no handler for DELETE"):
            table[Operation.DELETE]
        assert f"a test table ({__name__}): DELETE" in missing_handlers()
    finally:
        TABLES.remove(table)  # type: ignore[arg-type]


_PLANT = """
REGISTRY = MappingProxyType({{
    **REGISTRY,
    Operation.PLANTED: OperationSpec(
        Operation.PLANTED, OpClass.ALTER, adds_files=False, removes=Removes.NOTHING, data_change=True,
        metadata=True, reasons=(), extends={extends},
    ),
}})
"""
_REPORT = (
    "import ordo.arbiter.core, ordo.schemas.decisionlog, ordo.consumer.commits, ordo.consumer.arrow\n"
    "from ordo.schemas.dispatch import missing_handlers\n"
    "print('\\n'.join(missing_handlers()))\n"
)


def _planted_tree(tmp_path: Path, extends: str) -> Path:
    """A copy of the package with one more operation, PLANTED, declared (wire enum, registry) but handled nowhere."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "ordo", tree / "ordo", ignore=shutil.ignore_patterns("__pycache__"))
    operations = tree / "ordo" / "schemas" / "operations.py"
    text = operations.read_text()
    anchor = "\n\n    @property\n    def traits(self)"
    assert text.count(anchor) == 1
    text = text.replace(anchor, '\n    PLANTED = "PLANTED"' + anchor)
    operations.write_text(text + _PLANT.format(extends=extends))
    avsc = tree / "ordo" / "schemas" / "avro" / "Operation.avsc"
    schema = json.loads(avsc.read_text())
    schema["symbols"].append("PLANTED")
    avsc.write_text(json.dumps(schema))
    return tree


@pytest.mark.parametrize(
    ("extends", "lacking"),
    [
        ("None", 5),  # no handler anywhere: every table names it
        ("Operation.ALTER_TABLE", 1),  # read as an ALTER_TABLE: only its own rules are missing
    ],
)
def test_a_planted_operation_without_handlers_is_named_by_every_table_that_lacks_one(
    tmp_path: Path, extends: str, lacking: int
) -> None:
    tree = _planted_tree(tmp_path, extends)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    found = subprocess.run(
        [sys.executable, "-c", _REPORT], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    ).stdout.split("\n")
    named = [line for line in found if line]
    assert len(named) == lacking, named
    assert all(line.endswith(": PLANTED") for line in named), named
    assert any(line.startswith("the arbiter's rules (ordo.arbiter.ops)") for line in named), named
