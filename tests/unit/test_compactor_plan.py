"""The table service's planner: which rewrite each (partition, bucket) group gets, by its files and its heat."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ordo.consumer.models import Commit, FileEntry, Snapshot
from ordo.schemas import Operation, Rebase, TableMetadata
from ordo.services.compaction_plan import RATE_WINDOW, by_partition
from ordo.services.compactor import CLUSTER, MAJOR, MINOR, Heat, Policy, plan, writer_rejections_by_service
from ordo.services.compactor_metrics import Metrics

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


def streamed(seconds: float, *, every: float = 2.0, buckets: int = 1) -> Heat:
    """The heat of a stream adding a file to each bucket of partition ``a`` every ``every`` seconds."""
    heat = Heat()
    n = 0
    at = NOW - seconds + every
    while at <= NOW:
        heat.observe(commit(Operation.INSERT_INTO, tuple(entry(n + b, bucket=b) for b in range(buckets)), at), ["part"])
        n += buckets
        at += every
    return heat


def test_a_group_rate_counts_the_files_writers_added_over_the_window() -> None:
    heat = streamed(RATE_WINDOW, every=2.0, buckets=2)
    assert heat.rate((("a",), 0), NOW) == pytest.approx(0.5)
    assert heat.rate((("a",), 1), NOW) == pytest.approx(0.5)
    assert heat.rate((("b",), 0), NOW) == 0.0
    assert heat.rate((("a",), 0), NOW + RATE_WINDOW) == 0.0  # the stream stopped a window ago
    rewrite = Heat()  # a compaction's output is not an arrival
    rewrite.observe(commit(Operation.MINOR_COMPACT, (entry(1), entry(2)), NOW - 1), ["part"])
    assert rewrite.rate((("a",), 0), NOW) == 0.0


def test_a_minor_starts_early_enough_to_land_before_its_bucket_passes_min_files() -> None:
    """Files arriving at 0.5/s while a rewrite takes 8 s: 4 more land meanwhile, so 4 small files start it."""
    files = [entry(i) for i in range(4)]
    heat = streamed(RATE_WINDOW)
    assert plan(snap(*files), Policy(), heat, NOW) == []  # without a lead: 4 < min_files
    actions = plan(snap(*files), Policy(), heat, NOW, lead=8.0)
    assert [(a.operation, len(a.files)) for a in actions] == [(MINOR, 4)]
    assert "4 more due within 8 s" in actions[0].reason
    assert plan(snap(*files[:3]), Policy(), heat, NOW, lead=8.0) == []
    # however long the rewrites take, a MINOR merges two files at least
    assert plan(snap(files[0]), Policy(), heat, NOW, lead=600.0) == []
    assert len(plan(snap(*files[:2]), Policy(), heat, NOW, lead=600.0)) == 1
    # a group that got one file this minute waits for min_files: less than one more is due within 30 s
    assert plan(snap(*files), Policy(), hot(Operation.INSERT_INTO, files[0]), NOW, lead=30.0) == []


def test_the_bound_of_a_partition_is_min_files_per_bucket_and_one_output_each() -> None:
    assert Policy().bound(4) == 36
    assert Policy(min_files=2).bound(1) == 3


def test_actions_gather_per_operation_then_partition() -> None:
    """What one Spark job rewrites (an operation) and what one commit publishes (a partition)."""
    files = [entry(i, part=p, bucket=i % 2) for p in "ab" for i in range(16)] + [entry(i, part="c") for i in range(8)]
    heat = hot(Operation.INSERT_INTO, files[0], files[16])  # a and b hot, c cold
    batches = by_partition(plan(snap(*files), Policy(), heat, NOW))
    assert sorted(batches) == [MAJOR, MINOR]
    assert {k: [(a.bucket, len(a.files)) for a in v] for k, v in batches[MINOR].items()} == {
        ("a",): [(0, 8), (1, 8)],
        ("b",): [(0, 8), (1, 8)],
    }
    assert {k: len(v) for k, v in batches[MAJOR].items()} == {("c",): 1}


def test_layout_gauges_show_live_files_per_partition_and_the_backlog() -> None:
    metrics = Metrics()
    files = [entry(i, part="a", bucket=i % 4) for i in range(10)] + [entry(i, part="b", bucket=0) for i in range(3)]
    metrics.observe_layout("t", snap(*files))
    assert metrics.value(metrics.live_files, table="t", partition="part=a") == 10
    assert metrics.value(metrics.live_files, table="t", partition="part=b") == 3
    assert metrics.value(metrics.backlog, table="t") == (10 - 4) + (3 - 1)  # beyond one file per group
    metrics.observe_layout("t", snap(*files[:4]))  # b compacted away, a down to one file per bucket
    assert metrics.value(metrics.backlog, table="t") == 0
    assert metrics.registry.get_sample_value("ordo_compactor_live_files", {"table": "t", "partition": "part=b"}) is None
    metrics.forget("t")
    assert metrics.registry.get_sample_value("ordo_compactor_backlog_files", {"table": "t"}) is None
