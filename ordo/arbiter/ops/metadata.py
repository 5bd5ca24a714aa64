"""The metadata changes: ALTER_TABLE, ADD_CONSTRAINT and DROP_CONSTRAINT (since 0.6).

Each carries the table's metadata after the change and no file; its class,
ALTER, fails against every concurrent commit, and every commit that read an
older version fails after it (``SCHEMA_CHANGED``). What differs is which
change its metadata may make: ALTER_TABLE appends nullable columns and sets
properties; ADD_CONSTRAINT adds one CHECK constraint (the property
``delta.constraints.<name>``, whose rows its writer checked at its read
version, the version the matrix pins it to) and DROP_CONSTRAINT removes one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

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
from ordo.schemas import CommitDecision, Operation, Reason, TableMetadata
from ordo.schemas.models import parse_ddl
from ordo.schemas.operations import CONSTRAINT_PREFIX

# The release whose rules keep constraints to ADD/DROP_CONSTRAINT: an older ALTER_TABLE is decided as it was.
CONSTRAINTS_SINCE = (0, 6)
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,127}")


@CHECKS.register(Operation.ALTER_TABLE)
def alter_table(attempt: Attempt) -> None:
    """The new metadata (``check_alter``), for the whole table, with no file, against the matrix (ALTER's row
    and column fail every concurrent commit)."""
    metadata_change(attempt, check_alter)


@CHECKS.register(Operation.ADD_CONSTRAINT)
def add_constraint(attempt: Attempt) -> None:
    """The table's metadata with one CHECK constraint more (``constraint_added``), as a metadata change."""
    metadata_change(attempt, constraint_added)


@CHECKS.register(Operation.DROP_CONSTRAINT)
def drop_constraint(attempt: Attempt) -> None:
    """The table's metadata with one of its CHECK constraints less (``constraint_dropped``), as a metadata change."""
    metadata_change(attempt, constraint_dropped)


def metadata_change(attempt: Attempt, new_metadata: Callable[[Attempt], TableMetadata]) -> None:
    """The rules of a change of metadata only: the new metadata, no partition, no file, no restore version,
    the matrix."""
    admit(attempt, may_carry_metadata=True)
    attempt.metadata = new_metadata(attempt)
    in_scope(attempt)
    no_restore_version(attempt)
    added_files(attempt)
    adds_no_files(attempt)
    removes_no_files(attempt)
    streaming_batch(attempt)
    matrix(attempt)


def check_alter(attempt: Attempt) -> TableMetadata:
    """Validate an ALTER_TABLE: its metadata is the table's after the change; only additions are supported.

    The schema must keep every column as it is, in order, and may append
    nullable columns of an atomic type with new names (older files hold no
    value for them: they read as NULL). Properties may be set, not unset, and
    ``ordo.*`` properties (policy, buckets) are fixed at creation; since 0.6 a
    constraint (``delta.constraints.*``) is set by ADD_CONSTRAINT only, whose
    writer checks the table's rows. Location, primary key and partition columns
    cannot change.
    """
    intent = attempt.intent
    old = attempt.state.metadata
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
    if not attempt.older_than(CONSTRAINTS_SINCE):
        for key, value in new.properties.items():
            if key.lower().startswith(CONSTRAINT_PREFIX) and old.properties.get(key) != value:
                raise Reject(
                    Reason.INVALID_CONSTRAINT,
                    f"ALTER_TABLE cannot set {key[:200]!r}: a constraint is added by ADD_CONSTRAINT, whose writer "
                    "checks the table's rows against it",
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


def constraint_added(attempt: Attempt) -> TableMetadata:
    """ADD_CONSTRAINT's metadata: the table's, for the whole table, with one property more,
    ``delta.constraints.<name>`` (a lower-case name of letters, digits and ``_`` not in use), whose value is the
    constraint's expression (not blank, printable). That the
    expression is valid SQL and true for every row of the table at the intent's read version is its writer's
    to check: the arbiter reads no data."""
    old, new, key = _one_constraint_changed(attempt, "ADD_CONSTRAINT", "with the constraint")
    name = key[len(CONSTRAINT_PREFIX) :]
    if key in old.properties:
        raise Reject(Reason.INVALID_CONSTRAINT, f"constraint {name[:200]!r} exists already: drop it first")
    if _NAME.fullmatch(name) is None:
        raise Reject(
            Reason.INVALID_CONSTRAINT,
            f"constraint name {name[:200]!r} is not a lower-case name of letters, digits and '_' (at most 128)",
        )
    expression = new.properties[key]
    if not expression.strip():  # at most MAX_PATH_LENGTH characters, as every property value (schemas.models)
        raise Reject(Reason.INVALID_CONSTRAINT, f"constraint {name!r} has an empty expression")
    if not all(c.isprintable() or c in "\t\n" for c in expression):
        raise Reject(Reason.INVALID_CONSTRAINT, f"constraint {name!r} has an unprintable expression")
    return new


def constraint_dropped(attempt: Attempt) -> TableMetadata:
    """DROP_CONSTRAINT's metadata: the table's, for the whole table, without one of its constraints."""
    old, new, key = _one_constraint_changed(attempt, "DROP_CONSTRAINT", "without the constraint")
    if key not in old.properties or key in new.properties:
        name = key[len(CONSTRAINT_PREFIX) :]
        raise Reject(Reason.INVALID_CONSTRAINT, f"the table has no constraint {name[:200]!r} to drop")
    return new


def _one_constraint_changed(attempt: Attempt, operation: str, what: str) -> tuple[TableMetadata, TableMetadata, str]:
    """The table's metadata, the intent's, and the one property the intent changes, a constraint's; else refused."""
    intent = attempt.intent
    old, new = attempt.state.metadata, intent.metadata
    assert old is not None
    if new is None:
        raise Reject(Reason.INVALID_METADATA, f"{operation} needs metadata: the table's metadata {what}")
    if intent.partitions is not None:
        raise Reject(Reason.INVALID_PARTITION, f"{operation} applies to the whole table (partitions must be null)")
    for part, before, after in (
        ("location", old.location, new.location),
        ("schema", old.schema, new.schema),
        ("primary key", old.primary_key, new.primary_key),
        ("partition columns", old.partition_columns, new.partition_columns),
    ):
        if before != after:
            raise Reject(Reason.INVALID_CONSTRAINT, f"{operation} cannot change the {part} (ALTER_TABLE does)")
    changed = sorted(k for k in {*old.properties, *new.properties} if old.properties.get(k) != new.properties.get(k))
    if len(changed) != 1 or not changed[0].startswith(CONSTRAINT_PREFIX):
        shown = [k[:200] for k in changed[:4]]
        raise Reject(
            Reason.INVALID_CONSTRAINT,
            f"{operation} changes exactly one property, {CONSTRAINT_PREFIX}<name>; this one changes {shown}",
        )
    return old, new, changed[0]
