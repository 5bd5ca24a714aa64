"""A table's bucket count, as every reader and the arbiter read it (part of the contract).

A bucketed table (property ``ordo.buckets`` = N, 1 < N <= 1024) splits each
partition's rows into N buckets by a stable hash of the primary key's
canonical text (``bucket_of_text``, here so that readers can prune by it;
``producer.buckets`` computes the texts in pyarrow and in Spark); every data
file belongs to one (partition, bucket). A missing or invalid property means one bucket: tables
written before buckets existed. The arbiter never reads rows, so it checks
only that a file's bucket lies in [0, N) (``INVALID_BUCKET``); that the rows
of a file hash to its bucket is the writer's promise (docs/conflicts.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

BUCKETS_PROPERTY = "ordo.buckets"
UNBUCKETED = 1  # tables without the property (written before buckets existed)
MAX_BUCKETS = 1024  # of a table (DataFile.bucket allows more; more than this only makes tiny files)
SEPARATOR = "\u001f"  # between the canonical texts of a key's columns
HEX_DIGITS = 15  # of the md5 digest taken: 60 bits, a signed bigint in Spark


def table_buckets(properties: Mapping[str, str]) -> int:
    """The bucket count of a table from its properties: ``ordo.buckets``, 1 when absent or invalid."""
    try:
        value = int(properties.get(BUCKETS_PROPERTY, UNBUCKETED))
    except (TypeError, ValueError):
        return UNBUCKETED
    return value if 1 <= value <= MAX_BUCKETS else UNBUCKETED


def bucket_of_text(text: str, buckets: int) -> int:
    """The bucket of a key given its canonical text: the first ``HEX_DIGITS`` hex digits of its UTF-8 md5, mod N."""
    digest = hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()
    return int(digest[:HEX_DIGITS], 16) % buckets


__all__ = [
    "BUCKETS_PROPERTY",
    "HEX_DIGITS",
    "MAX_BUCKETS",
    "SEPARATOR",
    "UNBUCKETED",
    "bucket_of_text",
    "table_buckets",
]
