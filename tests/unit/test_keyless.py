"""Keyless tables in the pure core and the contract: concurrent appends, hostile CREATEs, the wire unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from ordo.arbiter.checkpoint import dump_state, load_state, supported
from ordo.arbiter.core import Reason, decide, new_state
from ordo.schemas import CommitIntent, Operation, Outcome, TableMetadata, decode, encode
from ordo.schemas.operations import ROW_ID_COLUMN

from .helpers import Table

KEYLESS = TableMetadata(
    location="/warehouse/t",
    schema=f"id BIGINT, v STRING, dt STRING, `{ROW_ID_COLUMN}` string NOT NULL",
    primary_key=(ROW_ID_COLUMN,),
    partition_columns=("dt",),
)


def keyless_table() -> Table:
    table = Table()
    table.state = new_state("t")
    table.decisions.clear()
    create = CommitIntent(
        txn_id="create", table="t", operation=Operation.CREATE_TABLE, read_version=0, metadata=KEYLESS
    )
    assert table.submit(create).outcome is Outcome.ACCEPTED
    return table


def concurrent(table: Table, earlier: Operation, later: Operation) -> tuple[Outcome, str | None]:
    """``earlier`` then ``later``, both read at the head before either: the later's outcome and reason."""
    table.commit(Operation.INSERT_INTO)
    read = table.state.head_version
    assert table.submit(table.intent(earlier, read)).outcome is Outcome.ACCEPTED
    decision = table.submit(table.intent(later, read))
    return decision.outcome, decision.reason


def test_metadata_says_keyless_and_hides_the_row_id() -> None:
    assert KEYLESS.keyless and KEYLESS.user_key == ()
    assert KEYLESS.user_schema == "id BIGINT, v STRING, dt STRING"
    keyed = KEYLESS.model_copy(update={"primary_key": ("id",), "schema": "id BIGINT, v STRING, dt STRING"})
    assert not keyed.keyless and keyed.user_key == ("id",) and keyed.user_schema == keyed.schema


def test_the_wire_is_unchanged_a_keyless_create_round_trips() -> None:
    intent = CommitIntent(txn_id="c", table="t", operation=Operation.CREATE_TABLE, read_version=0, metadata=KEYLESS)
    back = decode(encode(intent))
    assert back == intent and back.metadata is not None and back.metadata.keyless


def test_concurrent_appends_never_conflict_on_a_keyless_table() -> None:
    table = keyless_table()
    table.commit(Operation.INSERT_INTO)
    read = table.state.head_version
    first = table.submit(table.intent(Operation.INSERT_INTO, read))
    second = table.submit(table.intent(Operation.INSERT_INTO, read))
    third = table.submit(table.intent(Operation.INSERT_INTO, read, dt="b"))  # another partition, same read version
    assert [d.outcome for d in (first, second, third)] == [Outcome.ACCEPTED] * 3
    assert [d.rebase.value for d in (second, third)] == ["NONE", "NONE"]
    # a key table rejects the same second append
    keyed = Table()
    assert concurrent(keyed, Operation.INSERT_INTO, Operation.INSERT_INTO) == (
        Outcome.REJECTED,
        Reason.CONFLICT_LATER_FAILS,
    )


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        (Operation.UPDATE, Operation.INSERT_INTO),
        (Operation.INSERT_INTO, Operation.UPDATE),
        (Operation.INSERT_OVERWRITE, Operation.INSERT_INTO),
        (Operation.INSERT_INTO, Operation.MAJOR_COMPACT),
    ],
)
def test_the_other_cells_are_the_key_tables(earlier: Operation, later: Operation) -> None:
    assert concurrent(keyless_table(), earlier, later) == concurrent(Table(), earlier, later)
    assert concurrent(keyless_table(), earlier, later)[0] is Outcome.REJECTED


def test_a_checkpointed_keyless_state_keeps_its_matrix() -> None:
    if not supported():
        pytest.skip("checkpoints are not supported on this interpreter")
    table = keyless_table()
    table.commit(Operation.INSERT_INTO)
    table.state = load_state(dump_state(table.state))
    read = table.state.head_version
    table.submit(table.intent(Operation.INSERT_INTO, read))
    assert table.submit(table.intent(Operation.INSERT_INTO, read)).outcome is Outcome.ACCEPTED


@pytest.mark.parametrize(
    ("schema", "key", "partitions"),
    [
        ("id BIGINT, v STRING", (ROW_ID_COLUMN,), ()),  # no row id column
        (f"id BIGINT, `{ROW_ID_COLUMN}` bigint NOT NULL", (ROW_ID_COLUMN,), ()),  # not a string
        (f"id BIGINT, `{ROW_ID_COLUMN}` string", (ROW_ID_COLUMN,), ()),  # nullable
        (f"id BIGINT, `{ROW_ID_COLUMN}` string NOT NULL", ("id", ROW_ID_COLUMN), ()),  # part of a key
        (f"`{ROW_ID_COLUMN}` string NOT NULL", (ROW_ID_COLUMN,), ()),  # no data column
        (f"id BIGINT, `{ROW_ID_COLUMN}` string NOT NULL", (ROW_ID_COLUMN,), (ROW_ID_COLUMN,)),  # partitioned by it
        (
            f"id BIGINT, `{ROW_ID_COLUMN}` string NOT NULL, `{ROW_ID_COLUMN.upper()}` string NOT NULL",
            (ROW_ID_COLUMN,),
            (),
        ),  # twice
        ("id BIGINT, v <<< STRING", (ROW_ID_COLUMN,), ()),  # unreadable schema
    ],
)
def test_hostile_keyless_creates_are_refused(schema: str, key: tuple[str, ...], partitions: tuple[str, ...]) -> None:
    metadata = TableMetadata(location="/w/t", schema=schema, primary_key=key, partition_columns=partitions)
    intent = CommitIntent(txn_id="c", table="t", operation=Operation.CREATE_TABLE, read_version=0, metadata=metadata)
    decision, state = decide(new_state("t"), intent, 1_000, 0)
    assert decision.outcome is Outcome.REJECTED and decision.reason == Reason.INVALID_METADATA, decision.message
    assert state.metadata is None


def test_readers_refuse_a_keyless_tables_file_without_row_ids(tmp_path: Path) -> None:
    """Trust no input: a file of a keyless table without the row id column (or with a null one) is not merged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ordo.consumer.arrow import FileRef, TableShape, live_rows
    from ordo.consumer.errors import DataFileError

    shape = TableShape.of(KEYLESS)
    good = {
        "id": [1, 1],
        "v": ["a", "a"],
        "dt": ["d", "d"],
        ROW_ID_COLUMN: ["w:1:0", "w:1:1"],
        "_ordo_op": ["upsert"] * 2,
    }
    pq.write_table(pa.table(good), tmp_path / "good.parquet")
    rows = live_rows([FileRef(str(tmp_path / "good.parquet"), 1, {"dt": "d"})], shape)
    assert sorted(rows.drop_columns([ROW_ID_COLUMN]).to_pylist(), key=str) == [{"id": 1, "v": "a", "dt": "d"}] * 2
    for name, bad in {
        "none.parquet": {k: v for k, v in good.items() if k != ROW_ID_COLUMN},
        "null.parquet": {**good, ROW_ID_COLUMN: ["w:1:0", None]},
    }.items():
        pq.write_table(pa.table(bad), tmp_path / name)
        with pytest.raises(DataFileError, match="lacks row ids"):
            live_rows([FileRef(str(tmp_path / name), 1, {"dt": "d"})], shape)


def test_the_pyarrow_writer_gives_every_row_a_new_row_id(tmp_path: Path) -> None:
    """``producer.arrow.write_rows`` (the data source's tasks): duplicates kept, each with its own row id."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ordo.producer.arrow import check_unique, write_rows
    from ordo.producer.data import Layout

    layout = Layout.of("t", KEYLESS.model_copy(update={"location": str(tmp_path)}))
    rows = pa.table({"id": [1, 1, 2], "v": ["a", "a", "b"], "dt": ["d", "d", "e"]})
    files = write_rows(rows, layout, "txn", 100)
    again = write_rows(rows, layout, "txn", 200)  # another task of the same write
    check_unique(layout, [*files, *again])
    read = pa.concat_tables([pq.read_table(tmp_path / f.path) for f in [*files, *again]])
    ids = read.column(ROW_ID_COLUMN).to_pylist()
    assert len(set(ids)) == 6 and all(i.startswith("txn:") for i in ids)
    assert sorted(zip(read.column("id").to_pylist(), read.column("v").to_pylist(), strict=True)) == sorted(
        [(1, "a"), (1, "a"), (2, "b")] * 2
    )


def test_change_topic_records_of_duplicate_rows_are_told_apart_by_row_id() -> None:
    """The change topic keys a keyless table's records by row id; the row images hold the user's columns only."""
    import json

    import pyarrow as pa

    from ordo.consumer.changetopic import commit_changes

    rows = pa.table(
        {
            "id": [1, 1, 1],
            "v": ["a", "a", "b"],
            "dt": ["d", "d", "d"],
            ROW_ID_COLUMN: ["w:1:0", "w:1:1", "w:1:1"],
            "_change_type": ["insert", "update_preimage", "update_postimage"],
        }
    )
    changes = commit_changes(rows, KEYLESS, "UPDATE")
    assert sorted((c.op, json.loads(c.key)[ROW_ID_COLUMN]) for c in changes) == [("c", "w:1:0"), ("u", "w:1:1")]
    for change in changes:
        for image in (change.before, change.after):
            assert image is None or set(image) == {"id", "v", "dt"}
