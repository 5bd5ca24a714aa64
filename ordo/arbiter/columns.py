"""What a change of a table's columns may do: the rules CREATE_TABLE, ALTER_TABLE and schema-changing writes share.

Older files hold no value for a column added after them (readers give NULL),
so an added column is nullable, of an atomic type, with a new name; kept
columns stay as they are, in order. A keyless table's hidden row id column is
its whole key. Each function raises ``arbiter.rules.Reject``.
"""

from __future__ import annotations

import re

from ordo.arbiter.rules import Reject
from ordo.schemas import Reason, TableMetadata
from ordo.schemas.models import MAX_ID_LENGTH, DdlColumn, parse_ddl
from ordo.schemas.operations import RESERVED_COLUMNS, RESERVED_PREFIX, ROW_ID_COLUMN


def check_keyless(metadata: TableMetadata) -> None:
    """A keyless table's metadata: the row id column is the whole key, one STRING NOT NULL column of the schema.

    Its files are not read here (the arbiter reads no data file); readers refuse a file without the column.
    """
    if len(metadata.primary_key) != 1:
        raise Reject(
            Reason.INVALID_METADATA, f"{ROW_ID_COLUMN} is a keyless table's whole key; it cannot be part of a key"
        )
    try:
        columns = parse_ddl(metadata.schema)
    except ValueError as exc:
        raise Reject(Reason.INVALID_METADATA, f"CREATE_TABLE schema: {exc}") from None
    found = [c for c in columns if c.name.lower() == ROW_ID_COLUMN]
    if len(found) != 1 or found[0].name != ROW_ID_COLUMN or found[0].type != "string" or found[0].nullable:
        raise Reject(
            Reason.INVALID_METADATA,
            f"a keyless table's schema has exactly one `{ROW_ID_COLUMN}` string NOT NULL column (its row ids)",
        )
    if ROW_ID_COLUMN in metadata.partition_columns or len(columns) < 2:
        raise Reject(Reason.INVALID_METADATA, f"a keyless table needs data columns besides {ROW_ID_COLUMN}")


# Column types an ALTER_TABLE may add: Spark's atomic types (their DDL names, lower case) and decimal(p,s).
_ADDABLE_TYPES = frozenset(
    {
        "boolean",
        "tinyint",
        "byte",
        "smallint",
        "short",
        "int",
        "integer",
        "bigint",
        "long",
        "float",
        "real",
        "double",
        "string",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "timestamp_ltz",
    }
)


_DECIMAL = re.compile(r"dec(?:imal)?|numeric|dec(?:imal)?\((\d{1,2}),\s*(\d{1,2})\)|numeric\((\d{1,2}),\s*(\d{1,2})\)")


def _addable_type(type_text: str) -> bool:
    if type_text in _ADDABLE_TYPES:
        return True
    match = _DECIMAL.fullmatch(type_text)
    if match is None:
        return False
    digits = [int(g) for g in match.groups() if g is not None]
    return not digits or (1 <= digits[0] <= 38 and 0 <= digits[1] <= digits[0])


def check_added_columns(old_columns: tuple[DdlColumn, ...], new_columns: tuple[DdlColumn, ...]) -> None:
    """The columns after ``old_columns``: new names, not reserved, nullable, of an atomic type."""
    names = {c.name.lower() for c in old_columns}
    for column in new_columns[len(old_columns) :]:
        name = column.name
        if not name or len(name) > MAX_ID_LENGTH or not name.isprintable():
            raise Reject(Reason.INVALID_METADATA, f"added column name {name[:200]!r} is empty, too long or unprintable")
        lowered = name.lower()
        if lowered in names:
            raise Reject(Reason.INVALID_METADATA, f"added column {name[:200]!r} repeats a column name")
        if lowered.startswith(RESERVED_PREFIX) or lowered in RESERVED_COLUMNS:
            raise Reject(Reason.INVALID_METADATA, f"added column {name[:200]!r} uses a name reserved by ordo")
        if not _addable_type(column.type):
            raise Reject(
                Reason.INVALID_METADATA,
                f"added column {name[:200]!r} has type {column.type[:200]!r}; an added column has an atomic type "
                "(boolean, tinyint, smallint, int, bigint, float, double, decimal(p,s), string, binary, date, timestamp)",
            )
        if not column.nullable:
            raise Reject(
                Reason.INVALID_METADATA,
                f"added column {name[:200]!r} is NOT NULL; an added column must be nullable (older files hold no value)",
            )
        names.add(lowered)


def check_appended(
    old_columns: tuple[DdlColumn, ...], new_columns: tuple[DdlColumn, ...], schema: str, rule: str
) -> None:
    """The new columns keep every old one as it is, in order, then add valid ones (ALTER_TABLE, mergeSchema)."""
    for i, column in enumerate(old_columns):
        if i >= len(new_columns) or new_columns[i] != column:
            found = f"{new_columns[i].name} {new_columns[i].type}" if i < len(new_columns) else "nothing"
            raise Reject(
                Reason.UNSUPPORTED_ALTER,
                f"column {i + 1} is {column.name[:200]!r} {column.type[:200]} but {schema} has {found[:400]}: {rule}",
            )
    check_added_columns(old_columns, new_columns)


def check_replaced_schema(
    old: TableMetadata, new: TableMetadata, old_columns: tuple[DdlColumn, ...], new_columns: tuple[DdlColumn, ...]
) -> None:
    """A whole-table overwrite's new schema: names unique, printable, not reserved; key and partition columns kept."""
    seen: set[str] = set()
    for column in new_columns:
        name = column.name
        lowered = name.lower()
        if not name or len(name) > MAX_ID_LENGTH or not name.isprintable():
            raise Reject(Reason.INVALID_METADATA, f"column name {name[:200]!r} is empty, too long or unprintable")
        if lowered in seen:
            raise Reject(Reason.INVALID_METADATA, f"column {name[:200]!r} repeats a column name")
        if name != ROW_ID_COLUMN and (lowered.startswith(RESERVED_PREFIX) or lowered in RESERVED_COLUMNS):
            raise Reject(Reason.INVALID_METADATA, f"column {name[:200]!r} uses a name reserved by ordo")
        seen.add(lowered)
    before = {c.name: c for c in old_columns}
    after = {c.name: c for c in new_columns}
    for name in dict.fromkeys((*old.primary_key, *old.partition_columns)):
        if after.get(name) != before.get(name):
            raise Reject(
                Reason.UNSUPPORTED_ALTER,
                f"key or partition column {name[:200]!r} must keep its name, type and nullability "
                "(files are bucketed and placed by them): create a new table to change them",
            )
    if old.keyless:
        check_keyless(new)
    if len(new_columns) <= len(old.primary_key) + len(old.partition_columns) - len(
        set(old.primary_key) & set(old.partition_columns)
    ):
        raise Reject(Reason.INVALID_METADATA, "the new schema has no data column besides the key and partitions")


__all__ = ["check_added_columns", "check_appended", "check_keyless", "check_replaced_schema"]
