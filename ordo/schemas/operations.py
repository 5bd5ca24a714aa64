"""What each operation is and why an intent is refused: the contract's vocabulary, declared once.

``Operation`` is the wire enum (its members in ``Operation.avsc`` order: the
codec writes a member's position). ``REGISTRY`` declares each operation once
(``OperationSpec``): its conflict-matrix class and what a decision of it
shows on the wire (files added and removed, a time version, metadata), the
rejections its rules give, its history name. ``CLASSES`` declares the
matrix's rows and columns (and which of them no policy may choose). What
each part does with an operation is a handler it registers for it
(``schemas.dispatch``, docs/architecture.md "Operations as registered
behaviour"), never a branch over operations.
``Reason`` holds the rejection codes a decision carries (a string on the wire).
``OP_COLUMN``/``SEQ_COLUMN`` and their values are the record columns every data
file carries (docs/writer.md).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar


class Operation(str, enum.Enum):
    """What a transaction does; the conflict matrix is keyed by its class."""

    CREATE_TABLE = "CREATE_TABLE"
    INSERT_INTO = "INSERT_INTO"
    INSERT_OVERWRITE = "INSERT_OVERWRITE"
    TRUNCATE = "TRUNCATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    MINOR_COMPACT = "MINOR_COMPACT"
    MAJOR_COMPACT = "MAJOR_COMPACT"
    CLUSTER = "CLUSTER"
    ALTER_TABLE = "ALTER_TABLE"  # since 0.3: add columns, set properties (metadata only)
    RESTORE = "RESTORE"  # since 0.4: make an earlier version's live files the table's again (no data written)
    ADD_CONSTRAINT = "ADD_CONSTRAINT"  # since 0.6: a CHECK constraint every later write satisfies (metadata only)
    DROP_CONSTRAINT = "DROP_CONSTRAINT"  # since 0.6: remove a CHECK constraint (metadata only)

    @property
    def traits(self) -> OperationTraits:
        """This operation's row of ``TRAITS``."""
        return TRAITS[self]

    @property
    def data_change(self) -> bool:
        """True when a commit of this operation changes logical data (gets a time version)."""
        return TRAITS[self].data_change

    @property
    def rewrites(self) -> bool:
        """True for compaction and clustering: files rewritten, data unchanged."""
        return TRAITS[self].rewrites


class OpClass(enum.IntEnum):
    """The conflict matrix's operation classes. Values index the per-partition bookkeeping arrays."""

    OVERWRITE = 0
    INSERT = 1
    UPDATE = 2
    MINOR_COMPACT = 3
    MAJOR_COMPACT = 4
    CLUSTER = 5
    ALTER = 6  # ALTER_TABLE: fails against, and makes fail, every concurrent commit (arbiter.policy)


class Reason(enum.StrEnum):
    """Stable rejection reason codes a decision carries (a plain string on the wire)."""

    ALL: ClassVar[tuple[Reason, ...]]

    MALFORMED_INTENT = "MALFORMED_INTENT"
    TABLE_MISMATCH = "TABLE_MISMATCH"
    UNKNOWN_TABLE = "UNKNOWN_TABLE"
    TABLE_EXISTS = "TABLE_EXISTS"
    INVALID_METADATA = "INVALID_METADATA"
    READ_VERSION_AHEAD = "READ_VERSION_AHEAD"
    INVALID_PARTITION = "INVALID_PARTITION"
    INVALID_PATH = "INVALID_PATH"
    INVALID_OPERATION = "INVALID_OPERATION"
    FILE_NOT_LIVE = "FILE_NOT_LIVE"
    CONFLICT_LATER_FAILS = "CONFLICT_LATER_FAILS"
    CONFLICT_COMPACTION_LINEAGE = "CONFLICT_COMPACTION_LINEAGE"
    BATCH_ALREADY_COMMITTED = "BATCH_ALREADY_COMMITTED"
    FILE_OUTSIDE_SCOPE = "FILE_OUTSIDE_SCOPE"
    PATH_REUSED = "PATH_REUSED"
    INCOMPLETE_REWRITE = "INCOMPLETE_REWRITE"
    PATH_PARTITION_MISMATCH = "PATH_PARTITION_MISMATCH"
    SCHEMA_CHANGED = "SCHEMA_CHANGED"  # the intent's read version predates an accepted ALTER_TABLE
    UNSUPPORTED_ALTER = "UNSUPPORTED_ALTER"  # an ALTER_TABLE that drops, renames, retypes or unsets
    INVALID_BUCKET = "INVALID_BUCKET"  # an added file's bucket is not below the table's ordo.buckets
    # RESTORE (since 0.4): no restore version, or one below 0 or above the read version
    INVALID_RESTORE_VERSION = "INVALID_RESTORE_VERSION"
    # RESTORE: a re-added file was not live at the restore version (or is live now, or in another partition),
    # or a file live at that version is neither live nor re-added
    NOT_LIVE_AT_VERSION = "NOT_LIVE_AT_VERSION"
    # RESTORE: a file it needs was removed longer ago than the table's ordo.retention_hours: vacuum may have deleted it
    FILE_VACUUMED = "FILE_VACUUMED"
    # (since 0.5) an operation metric the operation cannot claim, a negative count, or rows beyond what it wrote
    INVALID_METRICS = "INVALID_METRICS"
    # (since 0.6) an ADD_CONSTRAINT or DROP_CONSTRAINT whose metadata is not the table's with exactly that constraint
    # added (a valid name not in use, an expression) or dropped (one it has), or an ALTER_TABLE that sets a constraint
    INVALID_CONSTRAINT = "INVALID_CONSTRAINT"


Reason.ALL = tuple(Reason)
# A later_fails cell's rejections: a matrix conflict, or a snapshot older than a schema change (ALTER's row).
MATRIX_FAIL_REASONS = frozenset({Reason.CONFLICT_LATER_FAILS, Reason.SCHEMA_CHANGED})
# A rewrite refused by the lineage rule (docs/conflicts.md, compaction_completes), not by a matrix cell.
LINEAGE_REASONS = frozenset({Reason.CONFLICT_COMPACTION_LINEAGE, Reason.FILE_NOT_LIVE})
# Rejections any intent may get, whatever its operation (docs/architecture.md "Pure core").
COMMON_REASONS = (
    Reason.MALFORMED_INTENT,
    Reason.TABLE_MISMATCH,
    Reason.UNKNOWN_TABLE,
    Reason.READ_VERSION_AHEAD,
    Reason.SCHEMA_CHANGED,
    Reason.INVALID_METRICS,
)


class Removes(enum.Enum):
    """Which files a commit of an operation removes (the arbiter computes them; the intent may not choose freely)."""

    NOTHING = "nothing"  # merge-on-read writes and metadata: the intent names no removed file
    SCOPE = "scope"  # every file live in the intent's scope at the head (INSERT OVERWRITE, TRUNCATE)
    NAMED = "named"  # the inputs the intent names, rebased through compaction lineage (compaction, clustering)
    RESTORE = "restore"  # every file live at the head that was not live at the restore version (RESTORE)


@dataclass(frozen=True, slots=True)
class ClassSpec:
    """One row and column of the conflict matrix: what the docs call it, and whether a policy may choose its cells."""

    op_class: OpClass
    title: str  # the column header of the docs' matrix
    fixed: str | None = None  # a resolution (``arbiter.policy.Resolution`` value) every cell of its row and column has


@dataclass(frozen=True, slots=True)
class OperationSpec:
    """What the contract says of one operation, declared once (``REGISTRY``; docs/architecture.md, "The operation
    registry").

    These are facts a decision of the operation shows on the wire, which
    every reader and the log's auditors agree on: its matrix class, whether
    it adds and removes files, changes data (a time version) and carries
    metadata, its history name. What each part *does* with the operation is
    not declared here: it is a handler the part registers for it
    (``schemas.dispatch.OperationTable``): the arbiter's rules, the folds, the
    catalog writer, the change-row reader.
    """

    operation: Operation
    op_class: OpClass | None  # its class in the conflict matrix; None for CREATE_TABLE (nothing is concurrent)
    adds_files: bool  # the intent may add data files
    removes: Removes  # which files the commit removes
    data_change: bool  # logical data changes (the commit gets a time version and shows in the change feed)
    metadata: bool  # the intent and decision carry the table's metadata and no files
    reasons: tuple[Reason, ...]  # the rejections only this operation's rules give (besides every intent's)
    since: str = "0.1"  # the release whose wire schema first carries it
    delta_name: str = ""  # what Delta Lake's DESCRIBE HISTORY calls such a commit (``DeltaTable.history``)
    # the Delta operationMetrics a writer may claim (since 0.5): row counts no reader can derive from the files
    metrics: tuple[str, ...] = ()
    # The operation whose handlers readers of decisions use where this one registers none of its own (the folds,
    # the catalog, the change feed; never the arbiter's rules): ADD_CONSTRAINT is read as an ALTER_TABLE.
    extends: Operation | None = None

    @property
    def removes_files(self) -> bool:
        """The commit may remove files (named by the intent, or computed by the arbiter)."""
        return self.removes is not Removes.NOTHING

    @property
    def truncates(self) -> bool:
        """The arbiter removes every file live in the scope at the head."""
        return self.removes is Removes.SCOPE

    @property
    def rewrites(self) -> bool:
        """Compaction and clustering: the intent names the files it rewrites, data unchanged."""
        return self.removes is Removes.NAMED

    @property
    def metadata_only(self) -> bool:
        """The intent carries table metadata and no files (CREATE_TABLE, ALTER_TABLE)."""
        return self.metadata

    @property
    def label(self) -> str:
        """The operation as the docs write it (``INSERT OVERWRITE``)."""
        return self.operation.value.replace("_", " ")


OperationTraits = OperationSpec  # the name before the registry (issue 22)

_WRITE_REASONS = (
    Reason.INVALID_PARTITION,
    Reason.INVALID_PATH,
    Reason.PATH_PARTITION_MISMATCH,
    Reason.INVALID_BUCKET,
    Reason.PATH_REUSED,
    Reason.INVALID_OPERATION,
    Reason.BATCH_ALREADY_COMMITTED,
    Reason.CONFLICT_LATER_FAILS,
)
_REWRITE_REASONS = (
    *_WRITE_REASONS,
    Reason.FILE_NOT_LIVE,
    Reason.CONFLICT_COMPACTION_LINEAGE,
    Reason.FILE_OUTSIDE_SCOPE,
    Reason.INCOMPLETE_REWRITE,
)
# A write that may change the schema with its data (mergeSchema, overwriteSchema; since 0.5) may also give these.
_EVOLVING_REASONS = (Reason.INVALID_METADATA, Reason.UNSUPPORTED_ALTER, *_WRITE_REASONS)


def _write(
    operation: Operation,
    op_class: OpClass,
    removes: Removes,
    delta: str,
    metrics: tuple[str, ...] = (),
    evolves: bool = False,
) -> OperationSpec:
    return OperationSpec(
        operation,
        op_class,
        adds_files=operation is not Operation.TRUNCATE,
        removes=removes,
        data_change=True,
        metadata=False,
        reasons=_EVOLVING_REASONS if evolves else _WRITE_REASONS,
        delta_name=delta,
        metrics=metrics,
    )


# Delta's MERGE metrics a writer claims (DeltaTable.merge(...).execute()'s num_inserted/updated/deleted_rows): an
# UPDATE commit that claims them is a MERGE (history shows ``MERGE``); each row counted is one record it wrote.
# The only claims: every other metric history shows is derived from the commit's files (an UPDATE's or DELETE's
# rows are the records it wrote, one per row), never taken from the writer.
MERGE_METRICS = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")


def _rewrite(operation: Operation, op_class: OpClass, reasons: tuple[Reason, ...] = _REWRITE_REASONS) -> OperationSpec:
    return OperationSpec(
        operation,
        op_class,
        adds_files=True,
        removes=Removes.NAMED,
        data_change=False,
        metadata=False,
        reasons=reasons,
        delta_name="OPTIMIZE",
    )


def _metadata_change(
    operation: Operation, reasons: tuple[Reason, ...], since: str, delta: str, constraint: bool = False
) -> OperationSpec:
    """A change of the table's metadata alone, carried whole by the intent and the decision. Class ALTER: it fails
    against every concurrent commit, and every commit that read an older version fails after it
    (``SCHEMA_CHANGED``). A CHECK constraint added or dropped (since 0.6) is the table's metadata with one
    ``delta.constraints.<name>`` property more or less, read as an ALTER_TABLE by every reader of decisions."""
    return OperationSpec(
        operation,
        OpClass.ALTER,
        adds_files=False,
        removes=Removes.NOTHING,
        data_change=True,
        metadata=True,
        reasons=(
            *reasons,
            Reason.INVALID_METADATA,
            Reason.INVALID_PARTITION,
            Reason.INVALID_OPERATION,
            Reason.CONFLICT_LATER_FAILS,
        ),
        since=since,
        delta_name=delta,
        extends=Operation.ALTER_TABLE if constraint else None,
    )


# The matrix's rows and columns, in ``OpClass`` order. ALTER's cells are not a policy's choice (docs/conflicts.md).
CLASSES: tuple[ClassSpec, ...] = (
    ClassSpec(OpClass.OVERWRITE, "OVERWRITE"),
    ClassSpec(OpClass.INSERT, "INSERT"),
    ClassSpec(OpClass.UPDATE, "UPDATE"),
    ClassSpec(OpClass.MINOR_COMPACT, "MINOR"),
    ClassSpec(OpClass.MAJOR_COMPACT, "MAJOR"),
    ClassSpec(OpClass.CLUSTER, "CLUSTER"),
    ClassSpec(OpClass.ALTER, "ALTER", fixed="later_fails"),
)

# The operation registry: one declaration per operation, in ``Operation`` order.
REGISTRY: Mapping[Operation, OperationSpec] = MappingProxyType(
    {
        spec.operation: spec
        for spec in (
            OperationSpec(
                Operation.CREATE_TABLE,
                None,
                adds_files=False,
                removes=Removes.NOTHING,
                data_change=True,
                metadata=True,
                reasons=(Reason.TABLE_EXISTS, Reason.INVALID_METADATA, Reason.INVALID_OPERATION),
                delta_name="CREATE TABLE",
            ),
            _write(Operation.INSERT_INTO, OpClass.INSERT, Removes.NOTHING, "WRITE", evolves=True),
            _write(Operation.INSERT_OVERWRITE, OpClass.OVERWRITE, Removes.SCOPE, "WRITE", evolves=True),
            _write(Operation.TRUNCATE, OpClass.OVERWRITE, Removes.SCOPE, "TRUNCATE"),
            _write(Operation.UPDATE, OpClass.UPDATE, Removes.NOTHING, "UPDATE", MERGE_METRICS),  # MERGE too
            _write(Operation.DELETE, OpClass.UPDATE, Removes.NOTHING, "DELETE"),
            _rewrite(Operation.MINOR_COMPACT, OpClass.MINOR_COMPACT, _REWRITE_REASONS[:-1]),
            _rewrite(Operation.MAJOR_COMPACT, OpClass.MAJOR_COMPACT),
            _rewrite(Operation.CLUSTER, OpClass.CLUSTER),
            _metadata_change(
                Operation.ALTER_TABLE, (Reason.UNSUPPORTED_ALTER, Reason.INVALID_CONSTRAINT), "0.3", "ALTER TABLE"
            ),
            # A whole-table overwrite made of files the table already had: class OVERWRITE (docs/conflicts.md).
            OperationSpec(
                Operation.RESTORE,
                OpClass.OVERWRITE,
                adds_files=True,
                removes=Removes.RESTORE,
                data_change=True,
                metadata=False,
                reasons=(
                    Reason.INVALID_RESTORE_VERSION,
                    Reason.NOT_LIVE_AT_VERSION,
                    Reason.FILE_VACUUMED,
                    Reason.INVALID_PARTITION,
                    Reason.INVALID_BUCKET,
                    Reason.INVALID_OPERATION,
                    Reason.BATCH_ALREADY_COMMITTED,
                    Reason.CONFLICT_LATER_FAILS,
                ),
                since="0.4",
                delta_name="RESTORE",
            ),
            # Delta's CHECK constraints: read as an ALTER_TABLE by every reader of decisions (docs/conflicts.md).
            _metadata_change(Operation.ADD_CONSTRAINT, (Reason.INVALID_CONSTRAINT,), "0.6", "ADD CONSTRAINT", True),
            _metadata_change(Operation.DROP_CONSTRAINT, (Reason.INVALID_CONSTRAINT,), "0.6", "DROP CONSTRAINT", True),
        )
    }
)
# schemas.signing.prev_hash_of reads a decision's link from its tail: a metrics map must not end like one
assert all(len(name.encode()) != 32 for spec in REGISTRY.values() for name in spec.metrics), "a 32-byte metric name"
TRAITS = REGISTRY  # the name before the registry: every "is this operation ..." question is asked here

# Operation -> matrix class, for every operation that has one.
OP_CLASS: Mapping[Operation, OpClass] = MappingProxyType(
    {op: t.op_class for op, t in REGISTRY.items() if t.op_class is not None}
)
# Operation names (wire strings) whose commits replace every live file of their scope.
TRUNCATING_OPERATIONS = frozenset(op.value for op, t in REGISTRY.items() if t.truncates)
# Operation names (wire strings) of compaction and clustering.
REWRITING_OPERATIONS = frozenset(op.value for op, t in REGISTRY.items() if t.rewrites)

# The record columns of every data file (docs/writer.md): the record's kind and its sequence override.
OP_COLUMN = "_ordo_op"
SEQ_COLUMN = "_ordo_seq"
OP_UPSERT = "upsert"
OP_DELETE = "delete"
# A CHECK constraint (since 0.6) is the table property ``delta.constraints.<name>`` (Delta's key; a lower-case
# name) whose value is its SQL boolean expression: writers refuse a row for which it is not true.
CONSTRAINT_PREFIX = "delta.constraints."
# Column names a table may not use (compared lower-cased): ordo's record columns and the change feed's.
RESERVED_PREFIX = "_ordo_"
RESERVED_COLUMNS = frozenset({"_change_type", "_commit_version", "_commit_timestamp"})
# A keyless (append-only, Delta's default) table's hidden key: a STRING NOT NULL column every writer fills with a
# new unique value per inserted row and keeps on rewritten ones. A table is keyless when its primary key is exactly
# this column (docs/log-format.md, "Keyless tables"); readers hide it, users may not name it.
ROW_ID_COLUMN = "_ordo_row_id"
ROW_ID_KEY = (ROW_ID_COLUMN,)
ROW_ID_DDL = f"`{ROW_ID_COLUMN}` string NOT NULL"


def delta_operation(operation: Operation, metrics: Mapping[str, int]) -> str:
    """What Delta's DESCRIBE HISTORY calls a commit of ``operation`` with these operation metrics: ``MERGE`` for an
    UPDATE that claims MERGE's metrics (``MERGE_METRICS``), else the registry's ``delta_name``."""
    if operation is Operation.UPDATE and MERGE_METRICS[0] in metrics:
        return "MERGE"
    return REGISTRY[operation].delta_name or operation.value


def is_keyless(primary_key: tuple[str, ...] | list[str]) -> bool:
    """True for a keyless table's primary key (the hidden row id column alone)."""
    return tuple(primary_key) == ROW_ID_KEY


__all__ = [
    "CLASSES",
    "COMMON_REASONS",
    "CONSTRAINT_PREFIX",
    "LINEAGE_REASONS",
    "MATRIX_FAIL_REASONS",
    "MERGE_METRICS",
    "OP_CLASS",
    "OP_COLUMN",
    "OP_DELETE",
    "OP_UPSERT",
    "REGISTRY",
    "RESERVED_COLUMNS",
    "RESERVED_PREFIX",
    "REWRITING_OPERATIONS",
    "ROW_ID_COLUMN",
    "ROW_ID_DDL",
    "ROW_ID_KEY",
    "SEQ_COLUMN",
    "TRAITS",
    "TRUNCATING_OPERATIONS",
    "ClassSpec",
    "OpClass",
    "Operation",
    "OperationSpec",
    "OperationTraits",
    "Reason",
    "Removes",
    "delta_operation",
    "is_keyless",
]
