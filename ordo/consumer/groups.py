"""The groups a snapshot read may be narrowed to: a partition and one bucket of it (or every bucket).

Shared by the catalog (``Catalog.snapshot(groups=...)``), its HTTP server (``GET /tables/{t}/snapshot?groups=``)
and its HTTP client, which is why it is a module of its own: the client and the catalog import it, not each other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

Group = tuple[Mapping[str, str], int | None]  # a partition, and one bucket of it (None: every bucket)


def check_groups(groups: Sequence[Any]) -> list[tuple[dict[str, str], int | None]]:
    """``groups`` as ``[(partition dict, bucket or None), ...]``; ``ValueError`` naming what is malformed."""
    if isinstance(groups, str | bytes | Mapping):
        raise ValueError("groups must be a list of (partition, bucket) pairs")
    found = []
    for group in groups:
        try:
            partition, bucket = group
        except (TypeError, ValueError):
            raise ValueError(f"group {group!r} is not a (partition, bucket) pair") from None
        if not isinstance(partition, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in partition.items()
        ):
            raise ValueError(f"group {group!r}: the partition must map column names to strings")
        if bucket is not None and (isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 0):
            raise ValueError(f"group {group!r}: the bucket must be an int >= 0 or None")
        found.append((dict(partition), bucket))
    return found


def groups_to_json(groups: Sequence[Group]) -> str:
    """The ``groups`` query parameter of ``GET /tables/{t}/snapshot``."""
    return json.dumps([{"partition": dict(p), "bucket": b} for p, b in groups], separators=(",", ":"))


def groups_from_json(text: str) -> list[tuple[dict[str, str], int | None]]:
    """Inverse of ``groups_to_json``; ``ValueError`` when malformed."""
    try:
        data = json.loads(text)
        pairs = [(g["partition"], g.get("bucket")) for g in data]
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ValueError('groups must be JSON: [{"partition": {...}, "bucket": n or null}, ...]') from None
    return check_groups(pairs)
