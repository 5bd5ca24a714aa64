"""The model checks of ``bench/peers_spark.py`` (workloads 1 and 4): pure functions, no Spark."""

from __future__ import annotations

import pytest

from bench.peers_spark import _history_model, fold_changes


def row(key: int, v: str, change: str, version: int) -> dict[str, object]:
    return {"id": key, "v": v, "p": str(key % 4), "_change_type": change, "_commit_version": version}


def test_fold_applies_versions_in_order_and_removals_first() -> None:
    start = {1: ("a", "1"), 2: ("b", "2")}
    feed = [
        row(1, "a2", "update_postimage", 3),  # out of order on purpose: the fold sorts by version
        row(1, "a", "update_preimage", 3),
        row(2, "b", "delete", 2),
        row(5, "e", "insert", 2),
        row(2, "b2", "insert", 4),
    ]
    assert fold_changes(start, feed) == {1: ("a2", "1"), 5: ("e", "1"), 2: ("b2", "2")}
    assert start == {1: ("a", "1"), 2: ("b", "2")}  # the input is left alone


def test_fold_detects_a_missing_change() -> None:
    start = {1: ("a", "1")}
    complete = [row(1, "a", "update_preimage", 2), row(1, "z", "update_postimage", 2)]
    assert fold_changes(start, complete) == {1: ("z", "1")}
    assert fold_changes(start, complete[:1]) != {1: ("z", "1")}  # a lost post-image shows


def test_fold_refuses_an_unknown_change_type() -> None:
    with pytest.raises(ValueError, match="unknown change type"):
        fold_changes({}, [row(1, "a", "upsert", 1)])


def test_history_model_counts() -> None:
    # 150 commits: commit i inserts 10 rows, every 10th (i % 10 == 9) updates 10 instead.
    model = _history_model(150)
    assert model["travel_rows"] == 90 * 10  # 100 commits up to version N-50, 10 of them updates
    assert model["changes"] == {"insert": 900, "update_preimage": 100, "update_postimage": 100}
    assert model["versions"] == 100


def test_iceberg_snapshots_in_version_order() -> None:
    from bench.peers_spark import snapshot_chain

    assert snapshot_chain([(30, 20), (10, None), (20, 10)]) == [10, 20, 30]
    assert snapshot_chain([]) == []
    with pytest.raises(ValueError, match="one line"):
        snapshot_chain([(10, None), (20, 10), (30, 10)])  # a rollback left a branch
    with pytest.raises(ValueError):
        snapshot_chain([(10, 20), (20, 10)])  # a cycle: no head
    with pytest.raises(ValueError, match="not ancestors"):
        snapshot_chain([(20, 10), (10, None), (30, 99), (99, 30)])
    with pytest.raises(ValueError, match="gone"):
        snapshot_chain([(30, 20), (20, 10)])  # 10 expired


def test_iceberg_conflicts_named_without_paths() -> None:
    from bench.peers_spark import _conflict

    text = "org.apache.iceberg.exceptions.ValidationException: Found conflicting files that can contain records "
    assert _conflict("iceberg", RuntimeError(text + 'matching ref(name="p"): [/tmp/a.parquet]')) == (
        "ValidationException: Found conflicting files that can contain records"
    )
    assert _conflict("iceberg", RuntimeError("CommitFailedException: Cannot commit ice.db.t")) == (
        "CommitFailedException: Cannot commit ice"
    )
    assert _conflict("iceberg", RuntimeError("AnalysisException: no such table")) is None
