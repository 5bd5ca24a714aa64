"""Versions, validation and every rejection reason of the pure core."""

from __future__ import annotations

import itertools

import pytest

from ordo.arbiter.core import Reason, evaluate_record, new_state
from ordo.schemas import CommitIntent, DataFile, Operation, Outcome, encode

from .helpers import Table, metadata


def test_id_versions_are_contiguous_and_rejections_consume_none() -> None:
    table = Table()
    read = table.state.head_version
    table.submit(table.intent(Operation.INSERT_INTO, read, txn="a"))
    table.submit(table.intent(Operation.INSERT_INTO, read, txn="b"))  # rejected
    table.commit(Operation.INSERT_INTO, txn="c")
    accepted = [d.id_version for d in table.decisions if d.accepted]
    assert accepted == [0, 1, 2]


def test_time_versions_come_from_record_timestamps_made_strictly_monotonic() -> None:
    table = Table()
    table.submit(table.intent(Operation.INSERT_INTO, 0, txn="a"), timestamp=50_000)
    table.submit(table.intent(Operation.INSERT_INTO, 1, txn="b"), timestamp=40_000)  # a skewed clock
    table.submit(table.intent(Operation.INSERT_INTO, 2, txn="c"), timestamp=40_000)
    times = [d.time_version for d in table.decisions if d.accepted]
    assert all(a < b for a, b in itertools.pairwise(times))
    assert [t.timestamp() for t in times[1:]] == [50.0, 50.001, 50.002]


@pytest.mark.parametrize("operation", [Operation.MINOR_COMPACT, Operation.MAJOR_COMPACT, Operation.CLUSTER])
def test_rewrites_get_an_id_version_but_no_time_version(operation: Operation) -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, n=2)
    done = table.commit(operation)
    assert done.id_version == 2 and done.time_version is None
    assert table.state.head_time_ms == 2_000


def reject(table: Table, intent: CommitIntent, reason: str) -> None:
    decision = table.submit(intent)
    assert decision.outcome is Outcome.REJECTED
    assert decision.reason == reason, decision.message
    assert decision.message


def test_unknown_table() -> None:
    state = new_state("t")
    intent = CommitIntent(txn_id="x", table="t", operation=Operation.INSERT_INTO, read_version=0)
    decision = evaluate_record(state, encode(intent), 1, 0)
    assert decision.reason == Reason.UNKNOWN_TABLE


def test_create_of_an_existing_table() -> None:
    table = Table()
    reject(
        table,
        CommitIntent(txn_id="again", table="t", operation=Operation.CREATE_TABLE, read_version=0, metadata=metadata()),
        Reason.TABLE_EXISTS,
    )


def test_create_without_metadata_or_with_unknown_policy() -> None:
    state = new_state("t")
    bare = CommitIntent(txn_id="c", table="t", operation=Operation.CREATE_TABLE, read_version=0)
    assert evaluate_record(state, encode(bare), 1, 0).reason == Reason.INVALID_METADATA
    odd = CommitIntent(
        txn_id="c",
        table="t",
        operation=Operation.CREATE_TABLE,
        read_version=0,
        metadata=metadata(properties={"ordo.conflict_policy": "nonsense"}),
    )
    assert evaluate_record(state, encode(odd), 1, 0).reason == Reason.INVALID_METADATA


def test_intent_for_another_table() -> None:
    table = Table()
    other = CommitIntent(txn_id="x", table="other", operation=Operation.INSERT_INTO, read_version=0)
    reject(table, other, Reason.TABLE_MISMATCH)


def test_read_version_ahead_of_head() -> None:
    table = Table()
    reject(table, table.intent(Operation.INSERT_INTO, 5), Reason.READ_VERSION_AHEAD)


@pytest.mark.parametrize(
    "path", ["/abs/file.parquet", "../t2/file.parquet", "dt=a/../../x.parquet", "s3://bucket/x.parquet", "a//b", "./x"]
)
def test_invalid_paths(path: str) -> None:
    table = Table()
    bad = DataFile(path=path, partition={"dt": "a"}, record_count=1, size_bytes=1)
    intent = table.intent(Operation.INSERT_INTO, 0).model_copy(update={"added_files": (bad,)})
    reject(table, intent, Reason.INVALID_PATH)


def test_invalid_removed_path() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO)
    reject(table, table.intent(Operation.MINOR_COMPACT, 1, removed=("../etc/passwd",)), Reason.INVALID_PATH)


def test_partition_spec_must_name_the_partition_columns() -> None:
    table = Table()
    intent = table.intent(Operation.INSERT_INTO, 0).model_copy(update={"partitions": ({"region": "eu"},)})
    reject(table, intent, Reason.INVALID_PARTITION)


def test_added_file_outside_scope() -> None:
    table = Table()
    intent = table.intent(Operation.INSERT_INTO, 0, "a").model_copy(update={"added_files": table.files("y", "b")})
    reject(table, intent, Reason.INVALID_PARTITION)


def test_unpartitioned_table_rejects_partition_specs() -> None:
    table = Table(partitioned=False)
    intent = table.intent(Operation.INSERT_INTO, 0, None).model_copy(update={"partitions": ({"dt": "a"},)})
    reject(table, intent, Reason.INVALID_PARTITION)


def test_removed_file_not_live() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO)
    reject(table, table.intent(Operation.MAJOR_COMPACT, 1, removed=("dt=a/ghost.parquet",)), Reason.FILE_NOT_LIVE)


def test_compaction_without_inputs_and_insert_with_removals_are_invalid() -> None:
    table = Table()
    reject(table, table.intent(Operation.MINOR_COMPACT, 0, removed=()), Reason.INVALID_OPERATION)
    table.commit(Operation.INSERT_INTO, txn="base")
    reject(table, table.intent(Operation.DELETE, 1, removed=("dt=a/base-0.parquet",)), Reason.INVALID_OPERATION)


def test_adding_a_live_path_again_is_invalid() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, txn="same")
    again = table.intent(Operation.INSERT_INTO, 1, txn="other").model_copy(
        update={"added_files": table.files("same", "a")}
    )
    reject(table, again, Reason.INVALID_PATH)


def test_duplicate_txn_id_gets_the_original_answer() -> None:
    table = Table()
    first = table.commit(Operation.INSERT_INTO, txn="once")
    repeat = table.submit(table.intent(Operation.INSERT_INTO, 0, txn="once"))
    assert repeat.outcome is Outcome.ACCEPTED
    assert (repeat.id_version, repeat.time_version) == (first.id_version, first.time_version)
    assert repeat.duplicate_of == first.intent_offset
    assert table.state.head_version == first.id_version  # no new version
    assert table.live("a") == {"dt=a/once-0.parquet"}


def test_duplicate_of_a_rejection_repeats_the_rejection() -> None:
    table = Table()
    table.submit(table.intent(Operation.INSERT_INTO, 0, txn="w1"))
    lost = table.submit(table.intent(Operation.INSERT_INTO, 0, txn="w2"))
    again = table.submit(table.intent(Operation.INSERT_INTO, 1, txn="w2"))
    assert again.reason == lost.reason == Reason.CONFLICT_LATER_FAILS
    assert again.duplicate_of == lost.intent_offset


def test_streaming_batch_already_committed() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, dt="a", app_id="q1", batch_id=7)
    reject(table, table.intent(Operation.INSERT_INTO, 1, "b", app_id="q1", batch_id=7), Reason.BATCH_ALREADY_COMMITTED)
    reject(table, table.intent(Operation.INSERT_INTO, 1, "b", app_id="q1", batch_id=3), Reason.BATCH_ALREADY_COMMITTED)
    assert table.commit(Operation.INSERT_INTO, dt="b", app_id="q1", batch_id=8).accepted
    assert table.commit(Operation.INSERT_INTO, dt="c", app_id="q2", batch_id=0).accepted


def test_half_an_idempotency_pair_is_invalid() -> None:
    table = Table()
    reject(table, table.intent(Operation.INSERT_INTO, 0, app_id="q1"), Reason.INVALID_OPERATION)


def test_truncate_cannot_add_files_and_removes_everything_in_scope() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", n=2)
    table.commit(Operation.INSERT_INTO, "b", n=1)
    bad = table.intent(Operation.TRUNCATE, 2).model_copy(update={"added_files": table.files("t", "a")})
    reject(table, bad, Reason.INVALID_OPERATION)
    done = table.commit(Operation.TRUNCATE, "a")
    assert len(done.removed_files) == 2 and table.live("a") == set() and len(table.live("b")) == 1


@pytest.mark.parametrize(
    "value",
    [b"", b"garbage", b"\xc3\x01" + b"\x00" * 8 + b"body", None],
    ids=["empty", "garbage", "unknown-fingerprint", "tombstone"],
)
def test_undecodable_records_are_rejected_as_malformed(value: bytes | None) -> None:
    table = Table()
    decision = evaluate_record(table.state, value, 5, 99)
    assert decision.reason == Reason.MALFORMED_INTENT and decision.intent_offset == 99 and decision.message


def test_truncated_and_schema_invalid_intents_are_malformed() -> None:
    table = Table()
    data = encode(table.intent(Operation.INSERT_INTO, 0))
    assert evaluate_record(table.state, data[:-3], 5, 1).reason == Reason.MALFORMED_INTENT
    assert evaluate_record(table.state, data + b"\x00", 5, 1).reason == Reason.MALFORMED_INTENT
    assert evaluate_record(table.state, data, 5, 1).accepted  # the untouched record is fine


def test_a_decision_is_never_an_exception_for_absurd_values() -> None:
    """Valid Avro, absurd values: the codec's reader accepts it, the model refuses it, the core rejects it."""
    from io import BytesIO

    import fastavro

    from ordo.schemas.codec import DEFAULT_CODEC

    schema = DEFAULT_CODEC.schema_of(CommitIntent)
    header = encode(Table().intent(Operation.INSERT_INTO, 0))[:10]
    for record in (
        {"txn_id": "", "table": "t", "operation": "INSERT_INTO", "read_version": 0},
        {"txn_id": "x", "table": "t", "operation": "INSERT_INTO", "read_version": -5},
        {"txn_id": "x" * 1_000_000, "table": "t", "operation": "INSERT_INTO", "read_version": 0},
        {"txn_id": "x", "table": "Bad Name", "operation": "INSERT_INTO", "read_version": 0},
    ):
        buffer = BytesIO()
        fastavro.schemaless_writer(buffer, schema, record)
        decision = evaluate_record(Table().state, header + buffer.getvalue(), 5, 1)
        assert decision.reason == Reason.MALFORMED_INTENT, record["txn_id"][:10]
        assert len(decision.txn_id) <= 256


# --------------------------------------------------------------------------- a hostile or buggy writer


def _file(path: str, dt: str | None = "a") -> DataFile:
    return DataFile(path=path, partition={} if dt is None else {"dt": dt}, record_count=1, size_bytes=1)


def test_a_path_live_before_a_truncate_cannot_be_added_again() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, txn="w")
    table.commit(Operation.TRUNCATE, "a")
    assert table.live("a") == set()
    again = table.intent(Operation.INSERT_INTO, 2, txn="other").model_copy(
        update={"added_files": table.files("w", "a")}
    )
    reject(table, again, Reason.PATH_REUSED)


def test_a_write_id_used_by_an_accepted_commit_is_refused_under_any_name() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, txn="w")
    fresh_name = table.intent(Operation.INSERT_INTO, 1, txn="other").model_copy(
        update={"added_files": (_file("dt=a/w-7.parquet"),)}
    )
    reject(table, fresh_name, Reason.PATH_REUSED)
    compaction_output = table.intent(Operation.MINOR_COMPACT, 1, txn="c").model_copy(
        update={"added_files": (_file("dt=a/w-8.parquet"),)}
    )
    reject(table, compaction_output, Reason.PATH_REUSED)


def test_metadata_level_retry_republishes_the_files_of_a_rejected_txn() -> None:
    table = Table()
    table.submit(table.intent(Operation.INSERT_INTO, 0, txn="w1"))
    lost = table.submit(table.intent(Operation.INSERT_INTO, 0, txn="w2"))
    assert lost.reason == Reason.CONFLICT_LATER_FAILS
    retry = table.intent(Operation.INSERT_INTO, 1, txn="w3").model_copy(update={"added_files": table.files("w2", "a")})
    assert table.submit(retry).accepted
    assert table.live("a") == {"dt=a/w1-0.parquet", "dt=a/w2-0.parquet"}
    # Once accepted, that write id is spent: a second retry of the same files cannot commit them twice.
    twice = table.intent(Operation.INSERT_INTO, 2, txn="w4").model_copy(
        update={"added_files": (_file("dt=a/w2-1.parquet"),)}
    )
    reject(table, twice, Reason.PATH_REUSED)


def test_every_write_id_of_an_intent_is_checked_and_spent() -> None:
    # Several write ids in one intent are fine (a 0.1 log has such intents), but each must be unused, and each is spent.
    table = Table()
    table.submit(table.intent(Operation.INSERT_INTO, 0, txn="u"))
    mixed = table.intent(Operation.INSERT_INTO, 1, txn="w").model_copy(
        update={"added_files": (_file("dt=a/w-0.parquet"), _file("dt=a/u-7.parquet"))}
    )
    reject(table, mixed, Reason.PATH_REUSED)
    fresh = table.intent(Operation.INSERT_INTO, 1, txn="x").model_copy(
        update={"added_files": (_file("dt=a/x-0.parquet"), _file("dt=a/v-0.parquet"))}
    )
    assert table.submit(fresh).accepted
    again = table.intent(Operation.INSERT_INTO, 2, txn="y").model_copy(
        update={"added_files": (_file("dt=a/v-1.parquet"),)}
    )
    reject(table, again, Reason.PATH_REUSED)


@pytest.mark.parametrize("name", ["data.parquet", "w-0.csv", "w-x.parquet", "-0.parquet", "w-0.parquet.tmp"])
def test_an_added_file_must_be_named_write_id_dash_number(name: str) -> None:
    table = Table()
    intent = table.intent(Operation.INSERT_INTO, 0, txn="w").model_copy(
        update={"added_files": (_file(f"dt=a/{name}"),)}
    )
    reject(table, intent, Reason.INVALID_PATH)


@pytest.mark.parametrize(
    ("path", "dt"),
    [
        ("dt=b/w-0.parquet", "a"),  # labelled a, stored under b
        ("w-0.parquet", "a"),  # no partition directory
        ("dt=a/sub/w-0.parquet", "a"),  # a directory too deep
        ("DT=a/w-0.parquet", "a"),  # column name spelt otherwise
        ("dt=a/b/w-0.parquet", "a/b"),  # the value's '/' must be escaped as %2F
    ],
)
def test_an_added_file_path_must_match_its_partition_values(path: str, dt: str) -> None:
    table = Table()
    intent = table.intent(Operation.INSERT_INTO, 0, dt, txn="w").model_copy(update={"added_files": (_file(path, dt),)})
    reject(table, intent, Reason.PATH_PARTITION_MISMATCH)


def test_escaped_partition_paths_and_unpartitioned_files_are_accepted() -> None:
    table = Table()
    escaped = table.intent(Operation.INSERT_INTO, 0, "a/b=c", txn="w").model_copy(
        update={"added_files": (_file("dt=a%2Fb%3Dc/w-0.parquet", "a/b=c"),)}
    )
    assert table.submit(escaped).accepted
    flat = Table(partitioned=False)
    assert flat.commit(Operation.INSERT_INTO, None, txn="w", n=2).accepted
    nested = flat.intent(Operation.INSERT_INTO, 1, None, txn="v").model_copy(
        update={"added_files": (_file("dt=a/v-0.parquet", None),)}
    )
    reject(flat, nested, Reason.PATH_PARTITION_MISMATCH)


@pytest.mark.parametrize(
    ("properties", "bucket", "accepted"),
    [
        ({"ordo.buckets": "4"}, 3, True),
        ({"ordo.buckets": "4"}, 4, False),  # one past the last bucket
        ({"ordo.buckets": "4"}, 65_535, False),
        (None, 0, True),  # a table without buckets (written before they existed): one bucket
        (None, 1, False),
        ({"ordo.buckets": "many"}, 1, False),  # an unreadable count means one bucket, as readers take it
    ],
)
def test_an_added_file_must_lie_in_one_of_the_tables_buckets(
    properties: dict[str, str] | None, bucket: int, accepted: bool
) -> None:
    table = Table(properties=properties)
    added = DataFile(path="dt=a/w-0.parquet", partition={"dt": "a"}, record_count=1, size_bytes=1, bucket=bucket)
    intent = table.intent(Operation.INSERT_INTO, 0, txn="w").model_copy(update={"added_files": (added,)})
    if accepted:
        assert table.submit(intent).accepted
    else:
        reject(table, intent, Reason.INVALID_BUCKET)
        assert f"bucket {bucket}" in table.decisions[-1].message


@pytest.mark.parametrize("operation", [Operation.MINOR_COMPACT, Operation.MAJOR_COMPACT, Operation.CLUSTER])
def test_a_rewrite_cannot_remove_files_outside_its_partitions(operation: Operation) -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", n=2)
    table.commit(Operation.INSERT_INTO, "b", n=2)
    removed = tuple(sorted(table.live("a") | table.live("b")))
    reject(table, table.intent(operation, 2, "a", removed=removed), Reason.FILE_OUTSIDE_SCOPE)
    assert len(table.live("b")) == 2


def test_a_major_cannot_dodge_the_insert_conflict_by_declaring_another_partition() -> None:
    """INSERT then MAJOR in one partition fails the MAJOR; claiming another partition must not get around it."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    table.commit(Operation.INSERT_INTO, "b", n=2)
    read = table.state.head_version
    old_b = tuple(sorted(table.live("b")))
    table.commit(Operation.INSERT_INTO, "b", txn="new")  # concurrent with the MAJOR below
    sneaky = table.intent(Operation.MAJOR_COMPACT, read, "a", removed=tuple(sorted(table.live("a"))) + old_b)
    reject(table, sneaky, Reason.FILE_OUTSIDE_SCOPE)
    honest_b = table.intent(Operation.MAJOR_COMPACT, read, "b", removed=old_b)
    reject(table, honest_b, Reason.CONFLICT_LATER_FAILS)


def test_a_rewrite_cannot_put_its_output_in_a_partition_it_did_not_read() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", n=2)
    moved = table.intent(Operation.MINOR_COMPACT, 1, None, txn="m").model_copy(
        update={"added_files": table.files("m", "b")}
    )
    reject(table, moved, Reason.FILE_OUTSIDE_SCOPE)


@pytest.mark.parametrize("operation", [Operation.MAJOR_COMPACT, Operation.CLUSTER])
def test_a_major_or_cluster_that_skips_a_file_would_resurrect_deleted_keys(operation: Operation) -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", txn="base")
    table.commit(Operation.DELETE, "a", txn="del")
    only_the_deletes = table.intent(operation, 2, "a", removed=("dt=a/del-0.parquet",))
    reject(table, only_the_deletes, Reason.INCOMPLETE_REWRITE)
    assert table.live("a") == {"dt=a/base-0.parquet", "dt=a/del-0.parquet"}
    # A MINOR keeps delete records: rewriting some files only is fine.
    assert table.commit(Operation.MINOR_COMPACT, "a", removed=("dt=a/del-0.parquet",)).accepted


def test_a_whole_table_major_need_not_touch_every_partition() -> None:
    """Completeness is per partition touched: a partition it leaves alone keeps its files intact."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", n=2)
    table.commit(Operation.INSERT_INTO, "b")
    major = table.intent(Operation.MAJOR_COMPACT, 2, None, txn="maj", removed=tuple(sorted(table.live("a"))))
    done = table.submit(major.model_copy(update={"added_files": table.files("maj", "a")}))
    assert done.accepted, done.message
    assert table.live("a") == {"dt=a/maj-0.parquet"} and len(table.live("b")) == 1


def test_a_cluster_may_leave_files_committed_after_its_read_version() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", n=2)
    read = table.state.head_version
    inputs = tuple(sorted(table.live("a")))
    table.commit(Operation.INSERT_INTO, "a", txn="late")  # INSERT then CLUSTER: compaction completes
    done = table.submit(table.intent(Operation.CLUSTER, read, "a", removed=inputs, txn="cl"))
    assert done.accepted, done.message
    assert table.live("a") == {"dt=a/late-0.parquet", "dt=a/cl-0.parquet"}


def test_a_major_must_rewrite_what_a_concurrent_minor_made_of_files_it_read() -> None:
    """The output of a MINOR committed after the MAJOR's read version holds data the MAJOR read."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", txn="f1")
    table.commit(Operation.INSERT_INTO, "a", txn="f2")
    table.commit(Operation.DELETE, "a", txn="f3")
    read = table.state.head_version
    table.commit(Operation.MINOR_COMPACT, "a", txn="m", removed=("dt=a/f1-0.parquet", "dt=a/f2-0.parquet"))
    partial = table.intent(Operation.MAJOR_COMPACT, read, "a", removed=("dt=a/f3-0.parquet",))
    reject(table, partial, Reason.INCOMPLETE_REWRITE)
    full = table.intent(
        Operation.MAJOR_COMPACT, read, "a", txn="maj", removed=tuple(f"dt=a/f{i}-0.parquet" for i in (1, 2, 3))
    )
    done = table.submit(full)
    assert done.accepted, done.message
    assert set(done.removed_files) == {"dt=a/m-0.parquet", "dt=a/f3-0.parquet"}
    assert table.live("a") == {"dt=a/maj-0.parquet"}


def test_new_reason_codes_are_listed() -> None:
    for code in (
        "FILE_OUTSIDE_SCOPE",
        "PATH_REUSED",
        "INCOMPLETE_REWRITE",
        "PATH_PARTITION_MISMATCH",
        "INVALID_BUCKET",
    ):
        assert getattr(Reason, code) == code and code in Reason.ALL


def test_an_incomplete_rewrite_names_the_same_file_whatever_the_string_hashing() -> None:
    """The partition's live files are a set: a message naming "the first" file left must not depend on
    PYTHONHASHSEED, or replaying the intents log would not reproduce the decisions log byte for byte."""
    import json
    import subprocess
    import sys

    probe = (
        "import json\n"
        "from tests.unit.helpers import Table\n"
        "from ordo.schemas import Operation\n"
        "table = Table()\n"
        "for i in range(12):\n"
        "    table.commit(Operation.INSERT_INTO, 'a', txn=f'w{i:02d}')\n"
        "read = table.state.head_version\n"
        "done = table.submit(table.intent(Operation.MAJOR_COMPACT, read, 'a', removed=('dt=a/w05-0.parquet',)))\n"
        "print(json.dumps([done.reason, done.message]))\n"
    )
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    answers = set()
    for seed in ("1", "2", "3", "4"):
        done = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=root,
            env={**__import__("os").environ, "PYTHONHASHSEED": seed},
        )
        assert done.returncode == 0, done.stderr
        answers.add(done.stdout.strip())
    assert len(answers) == 1, answers
    reason, message = json.loads(answers.pop())
    assert reason == Reason.INCOMPLETE_REWRITE and "dt=a/w00-0.parquet" in message
