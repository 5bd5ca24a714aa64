"""Versions, validation and every rejection reason of the pure core."""

from __future__ import annotations

import itertools

import pytest

from arbiter.core import Reason, evaluate_record, new_state
from schemas import CommitIntent, DataFile, Operation, Outcome, encode

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

    from schemas.codec import DEFAULT_CODEC

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
