"""CREATE_TABLE: the first commit of a table's log, its metadata and its conflict policy."""

from __future__ import annotations

from ordo.arbiter.columns import check_keyless
from ordo.arbiter.policy import DEFAULT_POLICY, POLICY_PROPERTY, PolicyError, load_policy, table_policy
from ordo.arbiter.rules import CHECKS, FOLD, Attempt, Reject
from ordo.arbiter.state import TableState, restore_retention_ms
from ordo.schemas import CommitDecision, Operation, Reason
from ordo.schemas.operations import ROW_ID_COLUMN


@CHECKS.register(Operation.CREATE_TABLE)
def create_table(attempt: Attempt) -> None:
    """Once per table (``TABLE_EXISTS``), with metadata naming each partition column once and a known conflict
    policy (``INVALID_METADATA``; a keyless table's row id column is its whole key), and no file
    (``INVALID_OPERATION``). Its decision has no scope and belongs to no stream."""
    state, intent = attempt.state, attempt.intent
    if state.metadata is not None:
        raise Reject(
            Reason.TABLE_EXISTS, f"table {state.table!r} already exists (created at intent offset 0 of its log)"
        )
    metadata = intent.metadata
    if metadata is None:
        raise Reject(Reason.INVALID_METADATA, "CREATE_TABLE needs metadata (location, schema, primary key)")
    if len(set(metadata.partition_columns)) != len(metadata.partition_columns):
        raise Reject(Reason.INVALID_METADATA, "partition columns repeat a name")
    try:
        load_policy(metadata.properties.get(POLICY_PROPERTY, DEFAULT_POLICY))
    except PolicyError as exc:
        raise Reject(Reason.INVALID_METADATA, str(exc)) from None
    if intent.added_files or intent.removed_files:
        raise Reject(Reason.INVALID_OPERATION, "CREATE_TABLE cannot add or remove files")
    if ROW_ID_COLUMN in metadata.primary_key:
        check_keyless(metadata)
    attempt.metadata = metadata
    attempt.partitions = attempt.app_id = attempt.batch_id = None


@FOLD.register(Operation.CREATE_TABLE)
def fold_create(state: TableState, decision: CommitDecision, version: int) -> None:
    """The table exists: its metadata, the matrix it is decided by and how long removed files stay restorable."""
    assert decision.metadata is not None
    state.metadata = decision.metadata
    state.policy = table_policy(decision.metadata)  # keyless: concurrent appends never conflict
    state.retention_ms = restore_retention_ms(decision.metadata)
