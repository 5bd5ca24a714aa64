"""The writes: INSERT INTO, INSERT OVERWRITE and TRUNCATE, UPDATE and DELETE (MERGE is an UPDATE).

INSERT INTO, UPDATE and DELETE are merge-on-read: they add files of upsert and
delete records and remove none. INSERT OVERWRITE and TRUNCATE replace their
scope: the arbiter removes every file live in it at the head. INSERT INTO and
INSERT OVERWRITE may carry the table's metadata after a schema change made
with their data (since 0.5: ``mergeSchema``, ``overwriteSchema``).
"""

from __future__ import annotations

from ordo.arbiter.columns import check_appended, check_replaced_schema
from ordo.arbiter.rules import (
    CHECKS,
    FOLD,
    Attempt,
    Reject,
    added_files,
    adds_no_files,
    admit,
    fold_class,
    fold_files,
    in_scope,
    matrix,
    no_restore_version,
    removes_no_files,
    streaming_batch,
    takes_metadata,
)
from ordo.arbiter.state import TableState
from ordo.schemas import CommitDecision, CommitIntent, Operation, Reason, TableMetadata
from ordo.schemas.models import parse_ddl

# The release whose writes may first carry metadata: an older writer's was refused, and stays refused on replay.
SCHEMA_WRITES_SINCE = (0, 5)


@CHECKS.register(Operation.INSERT_INTO)
def insert_into(attempt: Attempt) -> None:
    """Merge-on-read upserts in their scope; may add nullable columns with its data (``mergeSchema``)."""
    admit(attempt, may_carry_metadata=not attempt.older_than(SCHEMA_WRITES_SINCE))
    in_scope(attempt)
    if attempt.intent.metadata is not None:
        attempt.metadata = check_schema_change(attempt.state, attempt.intent, replaces=False)
    no_restore_version(attempt)
    added_files(attempt)
    removes_no_files(attempt)
    streaming_batch(attempt)
    matrix(attempt)


@CHECKS.register(Operation.INSERT_OVERWRITE)
def insert_overwrite(attempt: Attempt) -> None:
    """Replaces its scope; may change the schema with its data (``mergeSchema``, or ``overwriteSchema`` when it
    replaces the whole table)."""
    admit(attempt, may_carry_metadata=not attempt.older_than(SCHEMA_WRITES_SINCE))
    in_scope(attempt)
    if attempt.intent.metadata is not None:
        attempt.metadata = check_schema_change(attempt.state, attempt.intent, replaces=attempt.scope is None)
    no_restore_version(attempt)
    added_files(attempt)
    streaming_batch(attempt)
    matrix(attempt)
    removes_scope(attempt)


@CHECKS.register(Operation.TRUNCATE)
def truncate(attempt: Attempt) -> None:
    """Empties its scope: no file of its own."""
    admit(attempt, may_carry_metadata=False)
    in_scope(attempt)
    no_restore_version(attempt)
    added_files(attempt)
    adds_no_files(attempt)
    streaming_batch(attempt)
    matrix(attempt)
    removes_scope(attempt)


@CHECKS.register(Operation.UPDATE, Operation.DELETE)
def update(attempt: Attempt) -> None:
    """Merge-on-read upserts (new values, a MERGE's inserts) and delete records in their scope."""
    admit(attempt, may_carry_metadata=False)
    in_scope(attempt)
    no_restore_version(attempt)
    added_files(attempt)
    removes_no_files(attempt)
    streaming_batch(attempt)
    matrix(attempt)


def removes_scope(attempt: Attempt) -> None:
    """An overwrite removes every file live in its scope at the head, whatever the intent named."""
    state, scope = attempt.state, attempt.scope
    if scope is None:
        attempt.removed = tuple(sorted(state.files))
        return
    found: list[str] = []
    for key in scope:
        part = state.partitions.get(key)
        if part is not None:
            found.extend(part.live)
    attempt.removed = tuple(sorted(found))


def check_schema_change(state: TableState, intent: CommitIntent, *, replaces: bool) -> TableMetadata:
    """Validate the metadata a write carries (since 0.5): the table's after the write, applied with its files.

    INSERT INTO, or an INSERT OVERWRITE of some partitions (``mergeSchema``):
    the schema keeps every column as it is, in order, and appends nullable
    columns of an atomic type with new names (files written before hold no
    value for them: they read as NULL). An INSERT OVERWRITE of the whole table
    (``overwriteSchema``) removes every live file, so its schema may drop,
    reorder and retype columns, but the primary key and partition columns keep
    their names, types and nullability (the files' layout: buckets and
    partition paths). Location, primary key, partition columns and properties
    do not change with a write (ALTER_TABLE sets properties). The metadata must
    change the schema. ``replaces``: the write removes every live file.
    """
    old = state.metadata
    new = intent.metadata
    assert old is not None and new is not None
    for what, before, after in (
        ("location", old.location, new.location),
        ("primary key", old.primary_key, new.primary_key),
        ("partition columns", old.partition_columns, new.partition_columns),
    ):
        if before != after:
            raise Reject(
                Reason.UNSUPPORTED_ALTER,
                f"a write's metadata cannot change the {what} ({str(before)[:200]!r} -> {str(after)[:200]!r})",
            )
    if dict(new.properties) != dict(old.properties):
        raise Reject(Reason.UNSUPPORTED_ALTER, "a write's metadata cannot change properties (ALTER_TABLE sets them)")
    try:
        old_columns = parse_ddl(old.schema)
    except ValueError as exc:
        raise Reject(Reason.UNSUPPORTED_ALTER, f"the table's schema cannot be changed: {exc}") from None
    try:
        new_columns = parse_ddl(new.schema)
    except ValueError as exc:
        raise Reject(Reason.INVALID_METADATA, f"the write's schema: {exc}") from None
    if new_columns == old_columns:
        raise Reject(Reason.INVALID_OPERATION, "the write carries metadata that does not change the schema")
    if replaces:  # overwriteSchema: every live file is removed
        check_replaced_schema(old, new, old_columns, new_columns)
    else:
        check_appended(
            old_columns,
            new_columns,
            "the write's schema",
            "a write that keeps files (INSERT INTO, a partial INSERT OVERWRITE) only adds columns; a new schema "
            "needs an INSERT OVERWRITE of the whole table",
        )
    return new


@FOLD.register(
    Operation.INSERT_INTO,
    Operation.INSERT_OVERWRITE,
    Operation.TRUNCATE,
    Operation.UPDATE,
    Operation.DELETE,
)
def fold_write(state: TableState, decision: CommitDecision, version: int) -> None:
    """New data: the metadata it carries (a schema change), its files, its class's newest commit in its scope."""
    schema_changed = takes_metadata(state, decision)
    fold_files(state, decision, version, None)
    fold_class(state, decision, version, schema_changed)
