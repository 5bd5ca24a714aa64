"""One commit path (issue 28): ``producer.commit`` is the only code that builds a ``CommitIntent``, publishes one
through a ``CommitClient`` or decides on a conflict retry; every writer goes through it.

The checks read the code (like tests/unit/test_layers.py), so a second path fails here the day it is written;
each check is shown to fail on a planted copy of the tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ordo.producer.commit import Change, check_retries
from ordo.producer.data import InvalidOperationError
from ordo.schemas import CommitIntent, DataFile, Operation, TableMetadata, decode, encode

ROOT = Path(__file__).resolve().parents[2]
THE_PATH = "ordo/producer/commit.py"
CLIENT = "ordo/producer/client.py"  # the transport: its own resubmits (the policy's first level)
WIRE = "ordo/schemas"  # the contract itself: defines and decodes intents


def product_files() -> list[tuple[str, ast.Module]]:
    """Every module of ``ordo`` but the wire contract's, parsed."""
    found = []
    for path in sorted((ROOT / "ordo").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if not relative.startswith(WIRE + "/"):
            found.append((relative, ast.parse(path.read_text(), relative)))
    return found


def _called(node: ast.Call) -> str:
    return ast.unparse(node.func)


def intents_built() -> list[str]:
    """Where a ``CommitIntent`` is built (its constructor, ``model_construct``) outside the one path; the
    arbiter's ``model_validate`` of what it read is reading, not building."""
    found = []
    for relative, tree in product_files():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and relative != THE_PATH:
                name = _called(node)
                if name.split(".")[-1] == "CommitIntent" or name.endswith("CommitIntent.model_construct"):
                    found.append(f"{relative}:{node.lineno} {name}(...)")
    return found


def intents_published() -> list[str]:
    """Where a commit client is asked to commit or submit outside the one path (and the client itself)."""
    found = []
    for relative, tree in product_files():
        if relative in (THE_PATH, CLIENT):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = ast.unparse(node.func.value)
                if node.func.attr in ("commit", "submit") and receiver.split(".")[-1].lower().endswith("client"):
                    found.append(f"{relative}:{node.lineno} {_called(node)}(...)")
    return found


def retry_decisions() -> list[str]:
    """Where a writer branches on ``CONFLICT_LATER_FAILS`` (a retry loop of its own) outside the one path."""
    found = []
    for relative, tree in product_files():
        if relative == THE_PATH or not relative.startswith(("ordo/producer/", "ordo/spark/", "ordo/services/")):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and "CONFLICT_LATER_FAILS" in ast.unparse(node):
                found.append(f"{relative}:{node.lineno} {ast.unparse(node)}")
    return found


def test_only_the_commit_path_builds_an_intent() -> None:
    assert intents_built() == []


def test_only_the_commit_path_publishes_an_intent() -> None:
    assert intents_published() == []


def test_only_the_commit_path_decides_a_conflict_retry() -> None:
    assert retry_decisions() == []


@pytest.mark.parametrize(
    ("source", "check"),
    [
        ("from ordo.schemas import CommitIntent\nx = CommitIntent(txn_id='t')\n", intents_built),
        ("import ordo.schemas\nx = ordo.schemas.CommitIntent.model_construct(txn_id='t')\n", intents_built),
        ("def f(conn, i):\n    return conn.client.commit(i, timeout=1)\n", intents_published),
        ("def f(client, i):\n    return client.submit(i)\n", intents_published),
        ("def f(d, R):\n    return d.reason == R.CONFLICT_LATER_FAILS\n", retry_decisions),
    ],
)
def test_the_checks_can_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, check: object) -> None:
    """A second path planted in a copy of the tree is named (and the one path is not)."""
    (tmp_path / "ordo" / "producer").mkdir(parents=True)
    (tmp_path / THE_PATH).write_text((ROOT / THE_PATH).read_text())
    (tmp_path / "ordo" / "producer" / "planted.py").write_text(source)
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert callable(check)
    assert [problem.split(":")[0] for problem in check()] == ["ordo/producer/planted.py"]


def _change() -> Change:
    metadata = TableMetadata(location="/w/t", schema="`id` bigint, `dt` string", primary_key=("id",))
    files = (DataFile(path="dt=a/t1-0.parquet", partition={"dt": "a"}, record_count=3, size_bytes=10, bucket=1),)
    return Change(
        "t",
        Operation.INSERT_INTO,
        partitions=({"dt": "a"},),
        added_files=files,
        metadata=metadata,
        app_id="app",
        batch_id=7,
        writer="w",
        operation_metrics={"numOutputRows": 3},
    )


def test_an_attempt_changes_only_the_txn_id_and_read_version() -> None:
    """A conflict retry republishes the same change: every field but the two the attempt owns is the same."""
    change = _change()
    first, retry = change.intent("t1", 4), change.intent("t2", 9)
    assert (first.txn_id, first.read_version, retry.txn_id, retry.read_version) == ("t1", 4, "t2", 9)
    same = first.model_dump(exclude={"txn_id", "read_version"})
    assert same == retry.model_dump(exclude={"txn_id", "read_version"})
    assert same["added_files"] and same["metadata"] and same["operation_metrics"] == {"numOutputRows": 3}


def test_a_change_names_every_field_of_the_intent() -> None:
    """A field added to ``CommitIntent`` must be added to ``Change`` too (or no writer could set it)."""
    assert set(CommitIntent.model_fields) - {"txn_id", "read_version"} == set(Change.__dataclass_fields__)


def test_an_intent_of_the_path_round_trips_the_wire() -> None:
    intent = _change().intent("t1", 4)
    assert decode(encode(intent)) == intent


@pytest.mark.parametrize("operation", [op for op in Operation if op is not Operation.INSERT_INTO])
def test_conflict_retries_only_for_insert_into(operation: Operation) -> None:
    check_retries(Operation.INSERT_INTO, 5)
    check_retries(operation, 0)
    with pytest.raises(InvalidOperationError, match="only safe for INSERT INTO"):
        check_retries(operation, 1)
