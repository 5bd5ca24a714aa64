"""The data-file layout every writer follows and the arbiter checks.

A data file lives at ``<partition path>/<write id>-<n>.parquet`` relative to
the table location:

* the partition path is ``col=value/...`` over the table's partition columns,
  names and values escaped the way Hive and Spark do (``%XX``); empty for an
  unpartitioned table (the file then sits at the top of the location);
* the write id is the txn id of the transaction that wrote the bytes: the
  intent's own txn id, or, for the metadata-level retry of INSERT INTO, the id
  of the rejected txn that wrote them (our writers use one write id per
  intent; the arbiter does not require it). The arbiter refuses a write id
  that an accepted commit already used, so a path that was ever live can
  never be added again (but by a RESTORE, to a version it was live at);
* ``n`` numbers the files of one write (decimal digits).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

# Hive's escapePathName set (Spark ExternalCatalogUtils), plus NUL.
_ESCAPE = frozenset([chr(c) for c in range(0x00, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))
_NEEDS_ESCAPE = re.compile("[" + re.escape("".join(sorted(_ESCAPE))) + "]").search
_SUFFIX = ".parquet"
FILE_NAME_PATTERN = "<write id>-<n>.parquet"


def escape_partition_value(value: str) -> str:
    """Escape a partition value for a path segment the way Hive and Spark do (``%XX``)."""
    if _NEEDS_ESCAPE(value) is None:
        return value
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPE else ch for ch in value)


def partition_path(columns: Sequence[str], partition: Mapping[str, str]) -> str:
    """``dt=2024-01-01/region=eu`` for a partition spec; empty for an unpartitioned table."""
    return "/".join([f"{escape_partition_value(c)}={escape_partition_value(partition[c])}" for c in columns])


def data_file_name(write_id: str, n: int) -> str:
    """The file name of the ``n``-th file of write ``write_id`` (``<write id>-<n>.parquet``)."""
    return f"{write_id}-{n}.parquet"


def data_file_path(columns: Sequence[str], partition: Mapping[str, str], write_id: str, n: int) -> str:
    """The relative path of the ``n``-th file of write ``write_id`` (``<partition path>/<write id>-<n>.parquet``)."""
    prefix = partition_path(columns, partition)
    name = data_file_name(write_id, n)
    return f"{prefix}/{name}" if prefix else name


def split_data_file_path(path: str) -> tuple[str, str] | None:
    """``(directory, write id)`` of a path that follows the layout, or None when its name does not.

    The write id is everything before the name's last '-' (txn ids may contain
    '-'); ``n`` is one or more ASCII digits; the directory is empty at the top.
    """
    slash = path.rfind("/")
    dash = path.rfind("-")
    if dash <= slash + 1 or not path.endswith(_SUFFIX):
        return None
    n = path[dash + 1 : -len(_SUFFIX)]
    if not (n.isdigit() and n.isascii()):
        return None
    return path[:slash] if slash >= 0 else "", path[slash + 1 : dash]


def write_id_of(path: str) -> str | None:
    """The write id a data file's name embeds, or None when the name does not follow the layout."""
    slash = path.rfind("/")
    dash = path.rfind("-")
    if dash <= slash + 1 or not path.endswith(_SUFFIX):
        return None
    n = path[dash + 1 : -len(_SUFFIX)]
    return path[slash + 1 : dash] if n.isdigit() and n.isascii() else None


__all__ = [
    "FILE_NAME_PATTERN",
    "data_file_name",
    "data_file_path",
    "escape_partition_value",
    "partition_path",
    "split_data_file_path",
    "write_id_of",
]
