"""ALTER_TABLE: metadata only, the table's metadata after the change; its class fails against every concurrent commit."""

from __future__ import annotations

from ordo.arbiter.columns import check_appended
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
)
from ordo.arbiter.state import TableState
from ordo.schemas import CommitDecision, CommitIntent, Operation, Reason, TableMetadata
from ordo.schemas.models import parse_ddl


@CHECKS.register(Operation.ALTER_TABLE)
def alter_table(attempt: Attempt) -> None:
    """The new metadata (``check_alter``), for the whole table, with no file, against the matrix (ALTER's row
    and column fail every concurrent commit)."""
    admit(attempt, may_carry_metadata=True)
    attempt.metadata = check_alter(attempt.state, attempt.intent)
    in_scope(attempt)
    no_restore_version(attempt)
    added_files(attempt)
    adds_no_files(attempt)
    removes_no_files(attempt)
    streaming_batch(attempt)
    matrix(attempt)


def check_alter(state: TableState, intent: CommitIntent) -> TableMetadata:
    """Validate an ALTER_TABLE: its metadata is the table's after the change; only additions are supported.

    The schema must keep every column as it is, in order, and may append
    nullable columns of an atomic type with new names (older files hold no
    value for them: they read as NULL). Properties may be set, not unset, and
    ``ordo.*`` properties (policy, buckets) are fixed at creation. Location,
    primary key and partition columns cannot change.
    """
    old = state.metadata
    new = intent.metadata
    assert old is not None
    if new is None:
        raise Reject(Reason.INVALID_METADATA, "ALTER_TABLE needs metadata: the table's metadata after the change")
    if intent.partitions is not None:
        raise Reject(Reason.INVALID_PARTITION, "ALTER_TABLE applies to the whole table (partitions must be null)")
    for what, before, after in (
        ("location", old.location, new.location),
        ("primary key", old.primary_key, new.primary_key),
        ("partition columns", old.partition_columns, new.partition_columns),
    ):
        if before != after:
            raise Reject(Reason.UNSUPPORTED_ALTER, f"ALTER_TABLE cannot change the {what} ({before!r} -> {after!r})")
    try:
        old_columns = parse_ddl(old.schema)
    except ValueError as exc:
        raise Reject(Reason.UNSUPPORTED_ALTER, f"the table's schema cannot be altered: {exc}") from None
    try:
        new_columns = parse_ddl(new.schema)
    except ValueError as exc:
        raise Reject(Reason.INVALID_METADATA, f"ALTER_TABLE schema: {exc}") from None
    check_appended(
        old_columns,
        new_columns,
        "the new schema",
        "dropping, renaming, reordering or retyping columns is not supported (ALTER_TABLE only adds columns)",
    )
    for key in old.properties:
        if key not in new.properties:
            raise Reject(Reason.UNSUPPORTED_ALTER, f"unsetting property {key[:200]!r} is not supported")
    for key, value in new.properties.items():
        if key.lower().startswith("ordo.") and old.properties.get(key) != value:
            raise Reject(
                Reason.UNSUPPORTED_ALTER, f"property {key[:200]!r} is fixed when the table is created (it shapes files)"
            )
    if len(new_columns) == len(old_columns) and dict(new.properties) == dict(old.properties):
        raise Reject(Reason.INVALID_OPERATION, "ALTER_TABLE changes nothing (no column added, no property set)")
    return new


@FOLD.register(Operation.ALTER_TABLE)
def fold_metadata_change(state: TableState, decision: CommitDecision, version: int) -> None:
    """The metadata holds from this version on; the decision is its class's newest commit (``SCHEMA_CHANGED`` for
    every intent that read an older version)."""
    assert decision.metadata is not None
    state.metadata = decision.metadata
    fold_files(state, decision, version, None)
    fold_class(state, decision, version, schema_changed=False)
