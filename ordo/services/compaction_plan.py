"""What the table service (``ordo compactor``) rewrites, per partition (and per bucket for MINOR) of a table's
head snapshot: a pure function of the snapshot, the table's policy, its heat, the time and the lead (how long
a rewrite started now takes to land, which the service measures):

* MAJOR COMPACT (or CLUSTER when ``ordo.cluster_by`` is set) in a **cold**
  group, one without an INSERT or UPDATE committed in it for
  ``ordo.compaction.cold_seconds``: by the matrix a MAJOR fails when an INSERT
  or UPDATE commits in its partition meanwhile, so it only runs where none is
  expected. It runs when small files pile up (``min_files`` counts the
  small files beyond one per bucket, since a rewrite leaves one file per
  bucket at least), when files that may hold delete
  records or superseded versions pile up (the cheap signal, below), or when
  ``ordo.cluster_by`` is set and the group has unclustered files.
* CLUSTER in a group that only INSERTs write (cluster completes beside an
  INSERT, fails beside an UPDATE) when ``ordo.cluster_by`` is set and at least
  ``ordo.compaction.min_files`` files are unclustered.
* MINOR COMPACT of the small files in a **hot** group once at least
  ``ordo.compaction.min_files`` of them pile up, counting those its writers
  will add before the rewrite lands (the group's arrival rate over the last
  ``RATE_WINDOW`` seconds times the lead): a bucket then holds at most about
  ``min_files`` small files and the last rewrite's output, so a partition at
  most ``min_files x buckets + buckets`` (``Policy.bound``) while the service
  keeps up. MINOR completes beside an INSERT or UPDATE.

The signal for delete records and superseded versions is the operation that
added each live file (the catalog keeps it): files written by UPDATE, DELETE or
MERGE hold upserts of existing keys or delete records, and MINOR COMPACT output
keeps delete records and versions other files supersede. When such files hold at
least ``ordo.compaction.major_ratio`` of the group's records, the group is
dirty. INSERT INTO files that upsert existing keys are not seen by this signal
(they are small files, so MINOR and later MAJOR still reach them).

A writer is never blocked or failed by the service: INSERT INTO and UPDATE
win against every compaction by the matrix. ``ordo.compaction.enabled=false``
turns a table off. ``by_partition`` gathers a table's planned actions into the
batches the service runs: per operation, one Spark job for all of them and a
commit per partition (``producer.rewrites``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ordo.kernel.settings import parse_bool
from ordo.schemas import Operation
from ordo.schemas.operations import REWRITING_OPERATIONS

if TYPE_CHECKING:
    from ordo.consumer.catalog import Catalog
    from ordo.consumer.models import Commit, FileEntry, Snapshot

ENABLED_PROPERTY = "ordo.compaction.enabled"
MIN_FILES_PROPERTY = "ordo.compaction.min_files"
MAJOR_RATIO_PROPERTY = "ordo.compaction.major_ratio"
COLD_SECONDS_PROPERTY = "ordo.compaction.cold_seconds"
SMALL_FILE_BYTES_PROPERTY = "ordo.compaction.small_file_bytes"
CLUSTER_BY_PROPERTY = "ordo.cluster_by"

DEFAULT_MIN_FILES = 8
DEFAULT_MAJOR_RATIO = 0.2
DEFAULT_COLD_SECONDS = 30.0
DEFAULT_SMALL_FILE_BYTES = 32 * 1024 * 1024
HEAT_LOOKBACK = 200  # versions read at start-up to learn which groups are hot
RATE_WINDOW = 60.0  # seconds of file arrivals a group's rate is measured over

MINOR, MAJOR, CLUSTER = "MINOR_COMPACT", "MAJOR_COMPACT", "CLUSTER"
REWRITE_OPERATIONS = REWRITING_OPERATIONS
DIRTY_OPERATIONS = frozenset({"UPDATE", "DELETE", "MERGE", MINOR})
INSERT_OPERATIONS = frozenset({Operation.INSERT_INTO.value})

PartitionValues = tuple[str, ...]
GroupKey = tuple[PartitionValues, int]  # (partition values, bucket); bucket -1: every bucket of the partition


# --------------------------------------------------------------------------- policy and plan (pure)


@dataclass(frozen=True)
class Policy:
    """A table's compaction settings, from its properties (``ordo.compaction.*``, ``ordo.cluster_by``)."""

    enabled: bool = True
    min_files: int = DEFAULT_MIN_FILES
    major_ratio: float = DEFAULT_MAJOR_RATIO
    cold_seconds: float = DEFAULT_COLD_SECONDS
    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES
    cluster_by: tuple[str, ...] = ()

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> Policy:
        """The policy of a table with these properties; ``ValueError`` naming the property when one is bad."""

        def get(key: str, cast: Callable[[str], Any], default: Any) -> Any:
            if key not in properties:
                return default
            try:
                return cast(properties[key])
            except ValueError as exc:
                raise ValueError(f"table property {key}={properties[key]!r}: {exc}") from exc

        policy = cls(
            enabled=get(ENABLED_PROPERTY, parse_bool, True),
            min_files=get(MIN_FILES_PROPERTY, int, DEFAULT_MIN_FILES),
            major_ratio=get(MAJOR_RATIO_PROPERTY, float, DEFAULT_MAJOR_RATIO),
            cold_seconds=get(COLD_SECONDS_PROPERTY, float, DEFAULT_COLD_SECONDS),
            small_file_bytes=get(SMALL_FILE_BYTES_PROPERTY, int, DEFAULT_SMALL_FILE_BYTES),
            cluster_by=tuple(c.strip() for c in properties.get(CLUSTER_BY_PROPERTY, "").split(",") if c.strip()),
        )
        if policy.min_files < 2:
            raise ValueError(f"table property {MIN_FILES_PROPERTY} must be at least 2, not {policy.min_files}")
        if not 0 <= policy.major_ratio <= 1:
            raise ValueError(f"table property {MAJOR_RATIO_PROPERTY} must be in [0, 1], not {policy.major_ratio}")
        return policy

    def bound(self, buckets: int) -> int:
        """Live files a partition of ``buckets`` buckets holds at most while the service keeps up: ``min_files``
        small files per bucket and the last rewrite's output."""
        return self.min_files * buckets + buckets


@dataclass
class Heat:
    """When INSERTs and other data changes last committed, per partition and table-wide (epoch seconds).

    Per partition, not per bucket: the matrix's scope is the partition, so an
    INSERT into any bucket of a partition fails a MAJOR COMPACT of another.
    """

    inserts: dict[PartitionValues, float] = field(default_factory=dict)
    updates: dict[PartitionValues, float] = field(default_factory=dict)
    table_insert: float = 0.0
    table_update: float = 0.0
    arrivals: dict[GroupKey, deque[float]] = field(default_factory=dict)  # when writers added files, per group

    def observe(self, commit: Commit, partition_columns: Sequence[str]) -> None:
        """Account one logical commit (its added files' partitions; a table-wide scope heats every partition)."""
        when = commit.timestamp.timestamp()
        insert = commit.operation.value in INSERT_OPERATIONS
        target = self.inserts if insert else self.updates
        for f in commit.added_files:
            group = group_key(f, partition_columns)
            key = group[0]
            target[key] = max(target.get(key, 0.0), when)
            if commit.operation.value not in REWRITE_OPERATIONS:
                arrived = self.arrivals.setdefault(group, deque())
                arrived.append(when)
                while arrived[0] < when - RATE_WINDOW:
                    arrived.popleft()
        for scope in commit.partitions or ():
            key = tuple(str(scope.get(c, "")) for c in partition_columns)
            target[key] = max(target.get(key, 0.0), when)
        if commit.partitions is None and commit.operation.value not in REWRITE_OPERATIONS:
            if insert:
                self.table_insert = max(self.table_insert, when)
            else:
                self.table_update = max(self.table_update, when)

    def last_insert(self, key: PartitionValues) -> float:
        """Newest INSERT INTO touching the partition."""
        return max(self.inserts.get(key, 0.0), self.table_insert)

    def last_update(self, key: PartitionValues) -> float:
        """Newest other data change touching the partition (UPDATE, DELETE, MERGE, OVERWRITE, ...)."""
        return max(self.updates.get(key, 0.0), self.table_update)

    def rate(self, group: GroupKey, now: float) -> float:
        """Files writers added to ``group`` per second over the last ``RATE_WINDOW`` seconds."""
        arrived = self.arrivals.get(group)
        if not arrived:
            return 0.0
        return sum(1 for when in arrived if when > now - RATE_WINDOW) / RATE_WINDOW


@dataclass(frozen=True)
class Action:
    """One planned rewrite of one group: the operation, its inputs and why."""

    operation: str
    partition: Mapping[str, str]
    bucket: int | None  # None: every bucket of the partition
    files: tuple[str, ...]
    input_bytes: int
    reason: str

    @property
    def key(self) -> GroupKey:
        """The group (partition values, bucket; -1 for every bucket)."""
        return (tuple(self.partition.values()), -1 if self.bucket is None else self.bucket)


def group_key(entry: Any, partition_columns: Sequence[str]) -> GroupKey:
    """(partition values in column order, bucket) of a file entry."""
    return (tuple(entry.partition.get(c, "") for c in partition_columns), int(getattr(entry, "bucket", 0)))


def group_files(files: Iterable[FileEntry], partition_columns: Sequence[str]) -> dict[GroupKey, list[FileEntry]]:
    """Live files by (partition, bucket)."""
    groups: dict[GroupKey, list[FileEntry]] = {}
    for f in files:
        groups.setdefault(group_key(f, partition_columns), []).append(f)
    return groups


def plan(snapshot: Snapshot, policy: Policy, heat: Heat, now: float, lead: float = 0.0) -> list[Action]:
    """The rewrites worth doing in ``snapshot`` now: per partition, one MAJOR/CLUSTER or a MINOR per bucket.

    MAJOR COMPACT and CLUSTER drop delete records, so they rewrite every live
    file of what they cover; the arbiter checks that per partition, hence they
    cover one bucket only when the partition's live files are all in it.
    ``lead``: seconds a rewrite started now takes to land; a hot bucket's MINOR
    starts once its small files and those expected meanwhile reach ``min_files``.
    """
    if not policy.enabled:
        return []
    columns = tuple(snapshot.metadata.partition_columns)
    by_partition: dict[PartitionValues, dict[int, list[FileEntry]]] = {}
    for (values, bucket), files in group_files(snapshot.files, columns).items():
        by_partition.setdefault(values, {})[bucket] = files
    actions = []
    for values, buckets in sorted(by_partition.items()):
        partition = {c: v for c, v in zip(columns, values, strict=True)}
        everything = [f for _, files in sorted(buckets.items()) for f in files]
        whole_bucket = next(iter(buckets)) if len(buckets) == 1 else None
        insert_hot = now - heat.last_insert(values) < policy.cold_seconds
        update_hot = now - heat.last_update(values) < policy.cold_seconds
        rewrite = _plan_rewrite(everything, policy, insert_hot, update_hot)
        if rewrite is not None:
            operation, reason = rewrite
            paths = tuple(sorted(f.path for f in everything))
            size = sum(f.size_bytes for f in everything)
            actions.append(Action(operation, partition, whole_bucket, paths, size, reason))
            continue
        for bucket, files in sorted(buckets.items()):
            small = [f for f in files if f.size_bytes < policy.small_file_bytes]
            expected = math.floor(heat.rate((values, bucket), now) * lead)
            if len(small) >= max(2, policy.min_files - expected):
                inputs = tuple(sorted(f.path for f in small))
                size = sum(f.size_bytes for f in small)
                reason = f"{len(small)} small files" + (
                    f", {expected} more due within {lead:.0f} s" if expected else ""
                )
                actions.append(Action(MINOR, partition, bucket, inputs, size, reason))
    return actions


def by_partition(actions: Iterable[Action]) -> dict[str, dict[PartitionValues, list[Action]]]:
    """The actions per operation, then per partition (a MINOR per bucket gives a partition several): what one
    Spark job rewrites and, per partition, what one commit publishes."""
    batches: dict[str, dict[PartitionValues, list[Action]]] = {}
    for action in actions:
        batches.setdefault(action.operation, {}).setdefault(action.key[0], []).append(action)
    return batches


def _plan_rewrite(files: list[FileEntry], policy: Policy, insert_hot: bool, update_hot: bool) -> tuple[str, str] | None:
    """MAJOR COMPACT or CLUSTER of a whole partition, with the reason, or None (then MINOR per bucket may run)."""
    small = [f for f in files if f.size_bytes < policy.small_file_bytes]
    unclustered = [f for f in files if f.operation != CLUSTER] if policy.cluster_by else []
    if not insert_hot and not update_hot:  # cold: nothing expected to commit in it, a MAJOR will complete
        rewrite = CLUSTER if policy.cluster_by else MAJOR
        records = sum(f.record_count for f in files) or 1
        dirty = [f for f in files if f.operation in DIRTY_OPERATIONS]
        # MAJOR COMPACT rewrites the partition when a bucket of it holds two files or more and is a no-op
        # otherwise (``Transaction.compact``): a partition of one file per bucket has nothing for it to do.
        buckets = [f.bucket for f in files]
        if rewrite == MAJOR and len(set(buckets)) == len(buckets):
            return None
        if dirty and sum(f.record_count for f in dirty) / records >= policy.major_ratio:
            return rewrite, f"{len(dirty)} files may hold deletes or superseded versions"
        # A rewrite leaves at least one file per bucket: only small files beyond that are worth one (else a
        # table with as many buckets as min_files would rewrite its cold partitions forever).
        extra = len(small) - len({f.bucket for f in small})
        if extra >= policy.min_files - 1:
            return rewrite, f"{len(small)} small files"
        if unclustered:
            return CLUSTER, f"{len(unclustered)} unclustered files"
        return None
    if not update_hot and policy.cluster_by and len(unclustered) >= policy.min_files:
        return CLUSTER, f"{len(unclustered)} unclustered files (INSERT-only writes)"
    return None


def recent_heat(catalog: Catalog, name: str, head: int, lookback: int = HEAT_LOOKBACK) -> Heat:
    """The heat of ``name``'s groups from its last ``lookback`` versions."""
    heat = Heat()
    columns = catalog.table(name).metadata.partition_columns
    for commit in catalog.commits(name, max(0, head - lookback), head):
        heat.observe(commit, columns)
    return heat
