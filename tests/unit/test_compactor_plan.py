"""The table service's planner: which rewrite each (partition, bucket) group gets, by its files and its heat."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ordo.consumer.models import Commit, FileEntry, Snapshot
from ordo.schemas import Operation, Rebase, TableMetadata
from ordo.services.compactor import CLUSTER, MAJOR, MINOR, Heat, Policy, plan, writer_rejections_by_service

NOW = 1_000_000.0
META = TableMetadata(location="/t", schema="id BIGINT, part STRING", primary_key=("id",), partition_columns=("part",))


def entry(n: int, part: str = "a", *, bucket: int = 0, operation: str = "INSERT_INTO", size: int = 1000) -> FileEntry:
    return FileEntry(
        f"f{part}{bucket}-{n}", f"/t/f{n}", {"part": part}, 10, size, None, None, n, True, operation, bucket
    )


def snap(*files: FileEntry) -> Snapshot:
    return Snapshot("t", 99, datetime.now(UTC), META, files)


def commit(operation: Operation, files: tuple[FileEntry, ...], at: float, partitions: object = ()) -> Commit:
    return Commit(
        table="t",
        id_version=1,
        time_version=None,
        timestamp=datetime.fromtimestamp(at, UTC),
        operation=operation,
        data_change=True,
        txn_id="x",
        read_version=0,
        rebase=Rebase.NONE,
        partitions=None if partitions is None else ({"part": "a"},),  # type: ignore[arg-type]
        writer=None,
        app_id=None,
        batch_id=None,
        intent_offset=0,
        log_offset=0,
        added_files=files,
        removed_files=(),
    )


def hot(operation: Operation, *files: FileEntry, ago: float = 1.0) -> Heat:
    heat = Heat()
    heat.observe(commit(operation, files, NOW - ago), ["part"])
    return heat


def test_hot_partition_gets_minor_of_its_small_files_only() -> None:
    files = [entry(i) for i in range(8)] + [entry(100, size=10**9)]
    actions = plan(snap(*files), Policy(), hot(Operation.INSERT_INTO, files[0]), NOW)
    assert [(a.operation, a.partition, len(a.files)) for a in actions] == [(MINOR, {"part": "a"}, 8)]
    assert plan(snap(*files[1:]), Policy(), hot(Operation.INSERT_INTO, files[0]), NOW) == []  # 7 < min_files


def test_update_hot_partition_never_gets_major_or_cluster() -> None:
    files = [entry(i, operation="UPDATE") for i in range(3)]
    policy = Policy(cluster_by=("id",), min_files=2)
    actions = plan(snap(*files), policy, hot(Operation.UPDATE, files[0]), NOW)
    assert [a.operation for a in actions] == [MINOR]


def test_insert_only_hot_partition_clusters_when_cluster_by_is_set() -> None:
    files = [entry(i) for i in range(4)]
    actions = plan(snap(*files), Policy(cluster_by=("id",), min_files=4), hot(Operation.INSERT_INTO, files[0]), NOW)
    assert [a.operation for a in actions] == [CLUSTER]


def test_cold_partition_gets_major_for_dirty_files_or_small_files() -> None:
    dirty = [entry(0, size=10**9), entry(1, operation="DELETE")]
    cold = hot(Operation.DELETE, dirty[1], ago=60.0)
    assert [a.operation for a in plan(snap(*dirty), Policy(), cold, NOW)] == [MAJOR]
    assert plan(snap(*dirty), Policy(major_ratio=0.9), cold, NOW) == []  # 10 of 20 records: below 0.9
    small = [entry(i) for i in range(8)]
    actions = plan(snap(*small), Policy(), Heat(), NOW)
    assert [(a.operation, len(a.files)) for a in actions] == [(MAJOR, 8)]
    # the same partition, hot: MAJOR would lose to the next INSERT, so MINOR
    assert [a.operation for a in plan(snap(*small), Policy(), hot(Operation.INSERT_INTO, small[0]), NOW)] == [MINOR]


def test_groups_are_partition_and_bucket() -> None:
    files = [entry(i, bucket=i % 2) for i in range(16)] + [entry(i, part="b") for i in range(3)]
    actions = plan(snap(*files), Policy(), hot(Operation.INSERT_INTO, files[0], files[1]), NOW)
    assert [(a.partition["part"], a.bucket, len(a.files)) for a in actions] == [("a", 0, 8), ("a", 1, 8)]
    assert all(p.startswith(f"fa{a.bucket}") for a in actions for p in a.files)


def test_a_cold_partition_with_several_buckets_gets_one_major_of_every_bucket() -> None:
    files = [entry(i, bucket=i % 2) for i in range(16)]
    actions = plan(snap(*files), Policy(), Heat(), NOW)
    assert [(a.operation, a.bucket, len(a.files)) for a in actions] == [(MAJOR, None, 16)]
    one_bucket = plan(snap(*[entry(i, bucket=3) for i in range(8)]), Policy(), Heat(), NOW)
    assert [(a.operation, a.bucket) for a in one_bucket] == [(MAJOR, 3)]


def test_a_cold_partition_left_with_one_small_file_per_bucket_is_not_rewritten_again() -> None:
    """A MAJOR leaves one file per bucket: as many buckets as min_files must not mean a MAJOR every round."""
    compacted = [entry(i, bucket=i, operation="MAJOR_COMPACT") for i in range(4)]
    assert plan(snap(*compacted), Policy(min_files=4), Heat(), NOW) == []
    two_in_one = [*compacted, entry(9, bucket=0)]  # one small file beyond one per bucket: not worth a MAJOR
    assert plan(snap(*two_in_one), Policy(min_files=4), Heat(), NOW) == []
    piled = [*compacted, *[entry(10 + i, bucket=i % 2) for i in range(3)]]  # three beyond: min_files - 1
    assert [a.operation for a in plan(snap(*piled), Policy(min_files=4), Heat(), NOW)] == [MAJOR]


def test_no_major_is_planned_where_it_would_be_a_no_op() -> None:
    """MINOR output (it may hold deletes) alone in each bucket: MAJOR COMPACT rewrites nothing there, so no plan."""
    minors = [entry(i, bucket=i, operation=MINOR) for i in range(4)]
    assert plan(snap(*minors), Policy(min_files=4), Heat(), NOW) == []
    stacked = [*minors, entry(9, bucket=2, operation="UPDATE")]  # two files in one bucket: the MAJOR acts
    assert [a.operation for a in plan(snap(*stacked), Policy(min_files=4), Heat(), NOW)] == [MAJOR]


def test_heat_is_per_partition_whatever_the_bucket() -> None:
    files = [entry(i, bucket=0) for i in range(8)] + [entry(100, bucket=1)]
    heat = hot(Operation.INSERT_INTO, files[-1])  # an INSERT into bucket 1 makes bucket 0 hot too
    assert [(a.operation, a.bucket) for a in plan(snap(*files), Policy(), heat, NOW)] == [(MINOR, 0)]


def test_table_wide_update_heats_every_group() -> None:
    files = [entry(i, part=p) for p in "ab" for i in range(8)]
    heat = Heat()
    heat.observe(commit(Operation.UPDATE, (), NOW - 1, partitions=None), ["part"])
    assert {a.operation for a in plan(snap(*files), Policy(), heat, NOW)} == {MINOR}


def test_disabled_table_and_bad_properties() -> None:
    files = [entry(i) for i in range(20)]
    assert plan(snap(*files), Policy.of({"ordo.compaction.enabled": "false"}), Heat(), NOW) == []
    assert Policy.of({"ordo.compaction.min_files": "3", "ordo.cluster_by": "id, v"}) == Policy(
        min_files=3, cluster_by=("id", "v")
    )
    with pytest.raises(ValueError, match=r"ordo\.compaction\.min_files"):
        Policy.of({"ordo.compaction.min_files": "many"})
    with pytest.raises(ValueError, match="at least 2"):
        Policy.of({"ordo.compaction.min_files": "1"})


def test_writer_rejections_by_service_names_only_rewrite_conflicts() -> None:
    class D:
        def __init__(self, txn: str, op: str, accepted: bool, conflicting: str | None = None) -> None:
            self.txn_id, self.operation, self.accepted, self.conflicting_txn_id = (
                txn,
                Operation(op),
                accepted,
                conflicting,
            )

    decisions = [
        D("c", "MINOR_COMPACT", True),
        D("i1", "INSERT_INTO", True),
        D("i2", "INSERT_INTO", False, "i1"),  # a writer lost to a writer: not the service
        D("u", "UPDATE", False, "c"),  # lost to the compaction
        D("m", "MAJOR_COMPACT", False, "i1"),  # the service's own rejection
    ]
    assert [d.txn_id for d in writer_rejections_by_service(decisions)] == ["u"]
