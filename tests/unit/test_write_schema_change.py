"""Writes that change the schema with their data (since 0.5: mergeSchema, overwriteSchema) through the pure core.

The intent carries the table's metadata after the write next to its files;
the arbiter takes it as hostile input: an INSERT INTO or a partial INSERT
OVERWRITE may only append nullable atomic columns, a whole-table INSERT
OVERWRITE may replace the schema but keeps key and partition columns; nothing
else of the metadata changes. An accepted one makes older snapshots stale
(SCHEMA_CHANGED), and a rebuild from the log and a checkpoint give the same state.
"""

from __future__ import annotations

import pytest

from ordo.arbiter.checkpoint import dump_state, load_state, states_equal
from ordo.arbiter.core import Reason, rebuild
from ordo.schemas import CommitIntent, Operation, TableMetadata, encode

from .helpers import Table, metadata

BASE = metadata()  # id BIGINT, v STRING, dt STRING; partitioned by dt


def meta(schema: str, **changes: object) -> TableMetadata:
    fields: dict[str, object] = {
        "location": BASE.location,
        "schema": schema,
        "primary_key": BASE.primary_key,
        "partition_columns": BASE.partition_columns,
        "properties": dict(BASE.properties),
    }
    fields.update(changes)
    return TableMetadata(**fields)  # type: ignore[arg-type]


ADDED = meta(BASE.schema + ", `note` string")


def write(
    table: Table, operation: Operation, new: TableMetadata | None, dt: str | None = "a", **kw: object
) -> CommitIntent:
    """An intent of ``operation`` carrying ``new``; ``dt`` None: a whole-table write (its files in partition a)."""
    read = kw.pop("read_version", table.state.head_version)
    intent = table.intent(operation, read, dt or "a", metadata=new, **kw)  # type: ignore[arg-type]
    return intent if dt is not None else intent.model_copy(update={"partitions": None})


@pytest.mark.parametrize("operation", [Operation.INSERT_INTO, Operation.INSERT_OVERWRITE])
def test_a_write_adding_columns_commits_its_files_and_the_metadata_in_one_version(operation: Operation) -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    decision = table.submit(write(table, operation, ADDED))
    assert decision.accepted, decision.message
    assert decision.operation is operation and decision.id_version == 2 and decision.time_version is not None
    assert decision.metadata == ADDED and table.state.metadata == ADDED
    assert decision.added_files, "the files and the metadata are one commit"
    # the one fold of a log (schemas.decisionlog.check, in the rebuild) takes the new metadata from the write
    assert rebuild("t", [encode(d) for d in table.decisions]).metadata == ADDED


def test_a_snapshot_older_than_the_schema_change_is_stale() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    read = table.state.head_version
    stale = table.intent(Operation.UPDATE, read, "b", txn="stale")
    merged = table.submit(write(table, Operation.INSERT_INTO, ADDED, txn="merge"))
    assert merged.accepted, merged.message
    rejected = table.submit(stale)
    assert rejected.reason == Reason.SCHEMA_CHANGED
    assert rejected.conflicting_txn_id == "merge" and rejected.conflicting_version == merged.id_version
    # and a second writer that merged the same column from the old snapshot is stale too (nothing half-applied)
    again = table.submit(write(table, Operation.INSERT_INTO, ADDED, txn="merge-2", read_version=read))
    assert again.reason == Reason.SCHEMA_CHANGED
    assert table.submit(write(table, Operation.INSERT_INTO, None, txn="after")).accepted


def test_a_whole_table_overwrite_may_replace_the_schema() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    table.commit(Operation.INSERT_INTO, "b")
    new = meta("id BIGINT, amount DOUBLE, dt STRING, tags array<string>")  # v dropped, columns retyped and added
    decision = table.submit(write(table, Operation.INSERT_OVERWRITE, new, None))
    assert decision.accepted, decision.message
    assert table.state.metadata == new and len(decision.removed_files) == 2
    assert set(table.state.files) == {f.path for f in decision.added_files}


@pytest.mark.parametrize(
    ("operation", "dt", "new", "reason", "message"),
    [
        (
            Operation.INSERT_INTO,
            "a",
            meta("id BIGINT, dt STRING, v STRING, x INT"),
            Reason.UNSUPPORTED_ALTER,
            "only adds",
        ),
        (Operation.INSERT_OVERWRITE, "a", meta("id BIGINT, dt STRING"), Reason.UNSUPPORTED_ALTER, "only adds"),
        (Operation.INSERT_INTO, "a", meta(BASE.schema + ", x INT NOT NULL"), Reason.INVALID_METADATA, "nullable"),
        (Operation.INSERT_INTO, "a", meta(BASE.schema + ", x map<string,int>"), Reason.INVALID_METADATA, "atomic"),
        (Operation.INSERT_INTO, "a", meta(BASE.schema + ", V STRING"), Reason.INVALID_METADATA, "repeats"),
        (Operation.INSERT_INTO, "a", meta(BASE.schema + ", _ordo_x INT"), Reason.INVALID_METADATA, "reserved"),
        (Operation.INSERT_INTO, "a", meta(BASE.schema), Reason.INVALID_OPERATION, "does not change"),
        (
            Operation.INSERT_INTO,
            "a",
            meta(BASE.schema + ", x INT", location="/x"),
            Reason.UNSUPPORTED_ALTER,
            "location",
        ),
        (
            Operation.INSERT_INTO,
            "a",
            meta(BASE.schema + ", x INT", properties={"o": "1"}),
            Reason.UNSUPPORTED_ALTER,
            "properties",
        ),
        (
            Operation.INSERT_INTO,
            "a",
            meta(BASE.schema + ", x INT", primary_key=("v",)),
            Reason.UNSUPPORTED_ALTER,
            "primary key",
        ),
        (
            Operation.INSERT_OVERWRITE,
            None,
            meta("id INT, v STRING, dt STRING"),
            Reason.UNSUPPORTED_ALTER,
            "'id' must keep",
        ),
        (
            Operation.INSERT_OVERWRITE,
            None,
            meta("id BIGINT, v STRING, dt DATE"),
            Reason.UNSUPPORTED_ALTER,
            "'dt' must keep",
        ),
        (Operation.INSERT_OVERWRITE, None, meta("id BIGINT, dt STRING"), Reason.INVALID_METADATA, "no data column"),
        (
            Operation.INSERT_OVERWRITE,
            None,
            meta("id BIGINT, dt STRING, _change_type INT"),
            Reason.INVALID_METADATA,
            "reserved",
        ),
        (
            Operation.INSERT_OVERWRITE,
            None,
            meta("id BIGINT, dt STRING, x INT, X INT"),
            Reason.INVALID_METADATA,
            "repeats",
        ),
        (Operation.UPDATE, "a", ADDED, Reason.INVALID_OPERATION, "metadata may only be given with CREATE_TABLE"),
    ],
)
def test_hostile_schema_changes_are_refused_and_change_nothing(
    operation: Operation, dt: str | None, new: TableMetadata, reason: Reason, message: str
) -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    before = (table.state.head_version, table.state.metadata, dict(table.state.files))
    decision = table.submit(write(table, operation, new, dt))
    assert decision.reason == reason, decision.message
    assert message in (decision.message or "")
    assert (table.state.head_version, table.state.metadata, dict(table.state.files)) == before


def test_a_rebuild_and_a_checkpoint_hold_the_changed_schema_and_its_staleness() -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    table.commit(Operation.INSERT_INTO, "b", metadata=ADDED)
    replaced = meta("id BIGINT, note STRING, dt STRING")
    assert table.submit(write(table, Operation.INSERT_OVERWRITE, replaced, None)).accepted
    rebuilt = rebuild("t", [encode(d) for d in table.decisions])
    assert states_equal(rebuilt, table.state) and rebuilt.metadata == replaced
    restored = load_state(dump_state(table.state))
    assert states_equal(restored, table.state)
    stale = table.intent(Operation.INSERT_INTO, 1, "a")
    assert table.submit(stale).reason == Reason.SCHEMA_CHANGED


def _written_with(release: str, intent: CommitIntent) -> bytes:
    """``intent`` as a writer of ``release`` put it on the wire (that release's schema and fingerprint)."""
    import io

    import fastavro

    from ordo.schemas.codec import MAGIC, _to_record
    from ordo.schemas.history import released_schemas, wire_fingerprint

    (schema,) = [s for event, r, s in released_schemas() if event == "CommitIntent" and r == release]
    parsed = fastavro.parse_schema(schema, named_schemas={})
    record = {k: v for k, v in _to_record(intent).items() if k in {f["name"] for f in schema["fields"]}}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, record)
    return MAGIC + wire_fingerprint(schema, release) + buffer.getvalue()


@pytest.mark.parametrize(("release", "accepted"), [("0.4", False), ("0.5", True)])
def test_a_write_carrying_metadata_is_decided_by_the_rules_of_its_writers_release(release: str, accepted: bool) -> None:
    """Before 0.5 such a write was refused: an older log's record re-derives the refusal it was logged with."""
    from ordo.arbiter.core import evaluate_record

    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    decision = evaluate_record(table.state, _written_with(release, write(table, Operation.INSERT_INTO, ADDED)), 5, 9)
    assert decision.accepted is accepted, decision.message
    if not accepted:
        assert (decision.reason, decision.message) == (
            Reason.INVALID_OPERATION,
            "metadata may only be given with CREATE_TABLE",
        )
