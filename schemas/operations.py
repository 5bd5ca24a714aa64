"""What each operation is and why an intent is refused: the contract's vocabulary, declared once.

``Operation`` is the wire enum (its members in ``Operation.avsc`` order: the
codec writes a member's position). ``TRAITS`` says, per operation, its
conflict-matrix class and what a commit of it may do to files; the arbiter,
the writers and the readers ask it instead of listing operations again.
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


@dataclass(frozen=True, slots=True)
class OperationTraits:
    """What a commit of one operation is and may do; one row of ``TRAITS``."""

    op_class: OpClass | None  # its class in the conflict matrix; None for CREATE_TABLE (nothing is concurrent)
    adds_files: bool  # the intent may add data files
    removes_files: bool  # the commit removes files (named by the intent, or all live in scope for truncates)
    truncates: bool  # the arbiter removes every file live in the scope at the head
    data_change: bool  # logical data changes (the commit gets a time version and shows in the change feed)
    metadata_only: bool  # the intent carries table metadata and no files

    @property
    def rewrites(self) -> bool:
        """Compaction and clustering: the intent names the files it rewrites, data unchanged."""
        return self.removes_files and not self.truncates


def _traits(
    op_class: OpClass | None,
    *,
    adds: bool = False,
    removes: bool = False,
    truncates: bool = False,
    data_change: bool = True,
    metadata_only: bool = False,
) -> OperationTraits:
    return OperationTraits(op_class, adds, removes, truncates, data_change, metadata_only)


TRAITS: Mapping[Operation, OperationTraits] = MappingProxyType(
    {
        Operation.CREATE_TABLE: _traits(None, metadata_only=True),
        Operation.INSERT_INTO: _traits(OpClass.INSERT, adds=True),
        Operation.INSERT_OVERWRITE: _traits(OpClass.OVERWRITE, adds=True, removes=True, truncates=True),
        Operation.TRUNCATE: _traits(OpClass.OVERWRITE, removes=True, truncates=True),
        Operation.UPDATE: _traits(OpClass.UPDATE, adds=True),
        Operation.DELETE: _traits(OpClass.UPDATE, adds=True),
        Operation.MINOR_COMPACT: _traits(OpClass.MINOR_COMPACT, adds=True, removes=True, data_change=False),
        Operation.MAJOR_COMPACT: _traits(OpClass.MAJOR_COMPACT, adds=True, removes=True, data_change=False),
        Operation.CLUSTER: _traits(OpClass.CLUSTER, adds=True, removes=True, data_change=False),
        Operation.ALTER_TABLE: _traits(OpClass.ALTER, metadata_only=True),
    }
)

# Operation -> matrix class, for every operation that has one.
OP_CLASS: Mapping[Operation, OpClass] = MappingProxyType(
    {op: t.op_class for op, t in TRAITS.items() if t.op_class is not None}
)
# Operation names (wire strings) whose commits replace every live file of their scope.
TRUNCATING_OPERATIONS = frozenset(op.value for op, t in TRAITS.items() if t.truncates)
# Operation names (wire strings) of compaction and clustering.
REWRITING_OPERATIONS = frozenset(op.value for op, t in TRAITS.items() if t.rewrites)

# The record columns of every data file (docs/writer.md): the record's kind and its sequence override.
OP_COLUMN = "_ordo_op"
SEQ_COLUMN = "_ordo_seq"
OP_UPSERT = "upsert"
OP_DELETE = "delete"
# Column names a table may not use (compared lower-cased): ordo's record columns and the change feed's.
RESERVED_PREFIX = "_ordo_"
RESERVED_COLUMNS = frozenset({"_change_type", "_commit_version", "_commit_timestamp"})


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


Reason.ALL = tuple(Reason)

__all__ = [
    "OP_CLASS",
    "OP_COLUMN",
    "OP_DELETE",
    "OP_UPSERT",
    "RESERVED_COLUMNS",
    "RESERVED_PREFIX",
    "REWRITING_OPERATIONS",
    "SEQ_COLUMN",
    "TRAITS",
    "TRUNCATING_OPERATIONS",
    "OpClass",
    "Operation",
    "OperationTraits",
    "Reason",
]
