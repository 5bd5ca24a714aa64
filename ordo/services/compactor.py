"""``ordo compactor``: the table service that compacts and clusters tables while writers keep committing.

It follows the catalog (the consumer's SQLite file or HTTP service) and, each
round, plans per partition (and per bucket for MINOR) of every table's head
snapshot:

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
  ``ordo.compaction.min_files`` of them pile up (MINOR completes beside an
  INSERT or UPDATE).

The signal for delete records and superseded versions is the operation that
added each live file (the catalog keeps it): files written by UPDATE, DELETE or
MERGE hold upserts of existing keys or delete records, and MINOR COMPACT output
keeps delete records and versions other files supersede. When such files hold at
least ``ordo.compaction.major_ratio`` of the group's records, the group is
dirty. INSERT INTO files that upsert existing keys are not seen by this signal
(they are small files, so MINOR and later MAJOR still reach them).

A writer is never blocked or failed by the service: INSERT INTO and UPDATE
win against every compaction by the matrix. The service's own rejected commits
are counted by operation and reason and their group is retried with
exponential backoff. ``ordo.compaction.enabled=false`` turns a table off.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ordo.kernel.settings import Settings, parse_bool
from ordo.schemas import Operation
from ordo.schemas.operations import REWRITING_OPERATIONS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ordo.consumer.catalog import Catalog
    from ordo.consumer.models import Commit, FileEntry, Snapshot

log = logging.getLogger("ordo.compactor")

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
DEFAULT_INTERVAL = 5.0
MAX_BACKOFF = 300.0
HEAT_LOOKBACK = 200  # versions read at start-up to learn which groups are hot

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

    def observe(self, commit: Commit, partition_columns: Sequence[str]) -> None:
        """Account one logical commit (its added files' partitions; a table-wide scope heats every partition)."""
        when = commit.timestamp.timestamp()
        insert = commit.operation.value in INSERT_OPERATIONS
        target = self.inserts if insert else self.updates
        for f in commit.added_files:
            key = group_key(f, partition_columns)[0]
            target[key] = max(target.get(key, 0.0), when)
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


def plan(snapshot: Snapshot, policy: Policy, heat: Heat, now: float) -> list[Action]:
    """The rewrites worth doing in ``snapshot`` now: per partition, one MAJOR/CLUSTER or a MINOR per bucket.

    MAJOR COMPACT and CLUSTER drop delete records, so they rewrite every live
    file of what they cover; the arbiter checks that per partition, hence they
    cover one bucket only when the partition's live files are all in it.
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
            if len(small) >= policy.min_files:
                inputs = tuple(sorted(f.path for f in small))
                size = sum(f.size_bytes for f in small)
                actions.append(Action(MINOR, partition, bucket, inputs, size, f"{len(small)} small files"))
    return actions


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


# --------------------------------------------------------------------------- what `ordo tables` and HTTP show


def table_layout(catalog: Catalog, name: str, now: float | None = None) -> dict[str, Any]:
    """Files per partition, the last live compaction and the pending work of ``name`` (computed from the catalog)."""
    info = catalog.table(name)
    snapshot = catalog.snapshot(name)
    columns = tuple(snapshot.metadata.partition_columns)
    per_partition: dict[tuple[str, ...], int] = {}
    for f in snapshot.files:
        values = tuple(f.partition.get(c, "") for c in columns)
        per_partition[values] = per_partition.get(values, 0) + 1
    last = max((f.added_version for f in snapshot.files if f.operation in REWRITE_OPERATIONS), default=None)
    last_compaction = None
    if last is not None:
        commit = catalog.commits(name, last, last, include_rewrites=True)
        if commit:
            last_compaction = {
                "operation": commit[0].operation.value,
                "id_version": last,
                "timestamp": commit[0].timestamp.isoformat(),
            }
    try:
        policy = Policy.of(info.metadata.properties)
        pending = [
            {"operation": a.operation, "partition": dict(a.partition), "bucket": a.bucket, "reason": a.reason}
            for a in plan(
                snapshot, policy, recent_heat(catalog, name, info.head_version), time.time() if now is None else now
            )
        ]
        problem = None
    except ValueError as exc:
        policy, pending, problem = Policy(enabled=False), [], str(exc)
    return {
        "table": name,
        "version": snapshot.id_version,
        "files": len(snapshot.files),
        "partitions": len(per_partition),
        "max_files_per_partition": max(per_partition.values(), default=0),
        "files_per_partition": {"/".join(k) or "-": v for k, v in sorted(per_partition.items())},
        "last_compaction": last_compaction,
        "compaction_enabled": policy.enabled,
        "pending": pending,
        "policy_error": problem,
    }


def recent_heat(catalog: Catalog, name: str, head: int, lookback: int = HEAT_LOOKBACK) -> Heat:
    """The heat of ``name``'s groups from its last ``lookback`` versions."""
    heat = Heat()
    columns = catalog.table(name).metadata.partition_columns
    for commit in catalog.commits(name, max(0, head - lookback), head):
        heat.observe(commit, columns)
    return heat


# --------------------------------------------------------------------------- the service


class Metrics:
    """The service's Prometheus counters (own registry; served on ``--metrics-port``)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        from ordo.kernel.observe import Health, register_build_info

        self.registry = CollectorRegistry()
        register_build_info(self.registry, "compactor")
        self.health = Health("compactor", stall_after=600.0)  # a round may rewrite for minutes
        self.rounds = Counter("ordo_compactor_rounds", "Planning rounds run", registry=self.registry)
        self.committed = Counter(
            "ordo_compactor_commits",
            "Compactions and clusterings the arbiter accepted",
            ["table", "operation"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "ordo_compactor_rejections",
            "Compactions and clusterings the arbiter rejected, by reason",
            ["table", "operation", "reason"],
            registry=self.registry,
        )
        self.failed = Counter(
            "ordo_compactor_errors",
            "Rewrites that failed before a decision",
            ["table", "operation"],
            registry=self.registry,
        )
        self.bytes_rewritten = Counter(
            "ordo_compactor_rewritten_bytes",
            "Bytes of input files replaced by accepted rewrites",
            ["table", "operation"],
            registry=self.registry,
        )
        self.pending = Gauge(
            "ordo_compactor_pending", "Rewrites planned but not yet done", ["table"], registry=self.registry
        )

    def samples(self) -> dict[str, float]:
        """Every non-zero sample as ``name{labels}: value`` (for logs and test messages)."""
        out = {}
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.value and not sample.name.endswith("_created"):
                    labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                    out[f"{sample.name}{{{labels}}}"] = sample.value
        return out

    def value(self, counter: Any, **labels: str) -> float:
        """Current value of one labelled counter (0 when never incremented)."""
        name = counter._name + "_total"
        got = self.registry.get_sample_value(name, labels)
        return 0.0 if got is None else got


@dataclass
class _TableState:
    cursor: int
    heat: Heat
    failures: dict[GroupKey, int] = field(default_factory=dict)
    retry_at: dict[GroupKey, float] = field(default_factory=dict)


class Compactor:
    """Plans and commits rewrites for the followed tables, one round at a time (``round()``; ``run()`` loops)."""

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        *,
        tables: Sequence[str] = (),
        interval: float = DEFAULT_INTERVAL,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from ordo.consumer.catalog import Catalog

        self.spark = spark
        self.settings = settings
        self.only = tuple(tables)
        self.interval = interval
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.catalog = Catalog(settings.catalog)
        self._state: dict[str, _TableState] = {}
        self._handles: dict[str, Any] = {}
        self.rounds = 0

    def _follow(self, name: str, head: int, columns: Sequence[str]) -> _TableState:
        state = self._state.get(name)
        if state is None:
            state = self._state[name] = _TableState(head + 1, recent_heat(self.catalog, name, head))
            return state
        if head >= state.cursor:
            for commit in self.catalog.commits(name, state.cursor, head):
                state.heat.observe(commit, columns)
            state.cursor = head + 1
        return state

    def _table(self, name: str) -> Any:
        from ordo.producer.table import DeltaTable

        handle = self._handles.get(name)
        if handle is None:
            handle = self._handles[name] = DeltaTable.open(self.spark, name, settings=self.settings)
        return handle

    def round(self) -> int:
        """One pass over every followed table; the number of rewrites committed."""
        self.rounds += 1
        self.metrics.rounds.inc()
        self.metrics.health.beat()
        done = 0
        for info in self.catalog.tables():
            if (self.only and info.name not in self.only) or info.error is not None:
                continue
            try:
                policy = Policy.of(info.metadata.properties)
            except ValueError as exc:
                log.warning("table %s: %s; not compacting it", info.name, exc)
                continue
            state = self._follow(info.name, info.head_version, info.metadata.partition_columns)
            if not policy.enabled:
                continue
            now = self.clock()
            actions = [
                a
                for a in plan(self.catalog.snapshot(info.name), policy, state.heat, now)
                if state.retry_at.get(a.key, 0.0) <= now
            ]
            self.metrics.pending.labels(info.name).set(len(actions))
            for action in actions:
                done += self._apply(info.name, policy, state, action)
        return done

    def _apply(self, name: str, policy: Policy, state: _TableState, action: Action) -> int:
        from ordo.kernel.errors import CommitConflictError

        table = self._table(name)
        started = time.perf_counter()
        try:
            txn = table.begin()
            if action.operation == CLUSTER:
                txn.cluster(policy.cluster_by, action.partition or None, bucket=action.bucket)
            elif action.operation == MAJOR:
                txn.compact("major", action.partition or None, bucket=action.bucket)
            else:
                txn.compact("minor", action.partition or None, bucket=action.bucket, files=action.files)
            result = txn.commit()
        except CommitConflictError as exc:
            reason = exc.reason or "UNKNOWN"
            self.metrics.rejected.labels(name, action.operation, reason).inc()
            delay = self._backoff(state, action.key)
            log.info(
                "%s %s %s bucket %s rejected (%s, conflicting %s); retrying in %.0f s",
                name,
                action.operation,
                action.partition,
                action.bucket,
                reason,
                exc.conflicting_txn_id,
                delay,
            )
            return 0
        except Exception as exc:  # a bad rewrite must not stop the service
            self.metrics.failed.labels(name, action.operation).inc()
            delay = self._backoff(state, action.key)
            log.warning("%s %s %s failed: %s; retrying in %.0f s", name, action.operation, action.partition, exc, delay)
            return 0
        state.failures.pop(action.key, None)
        state.retry_at.pop(action.key, None)
        if result is None:
            return 0
        rewritten = action.input_bytes
        self.metrics.committed.labels(name, action.operation).inc()
        self.metrics.bytes_rewritten.labels(name, action.operation).inc(rewritten)
        log.info(
            "%s v%d %s %s bucket %s: %d -> %d files (%s) in %.1f s",
            name,
            result.id_version,
            action.operation,
            action.partition or "(table)",
            action.bucket,
            len(result.removed_files),
            len(result.added_files),
            action.reason,
            time.perf_counter() - started,
        )
        return 1

    def _backoff(self, state: _TableState, key: GroupKey) -> float:
        failures = state.failures.get(key, 0) + 1
        state.failures[key] = failures
        delay = min(MAX_BACKOFF, self.interval * 2 ** (failures - 1))
        state.retry_at[key] = self.clock() + delay
        return delay

    def run(self, stop: threading.Event, rounds: int | None = None) -> None:
        """Run rounds every ``interval`` seconds until ``stop`` is set (or ``rounds`` ran)."""
        from ordo.consumer.errors import CatalogUnavailableError

        while not stop.is_set():
            try:
                self.round()
            except CatalogUnavailableError as exc:
                log.info("waiting for the catalog: %s", exc)
            if rounds is not None and self.rounds >= rounds:
                return
            stop.wait(self.interval)

    def close(self) -> None:
        """Release the catalog connection."""
        self.catalog.close()


def spark_session(master: str | None) -> SparkSession:
    """The service's Spark session: local (``local[N]``, the default ``local[2]``) or any master."""
    import re

    from ordo.spark import local_spark_session, register

    match = re.fullmatch(r"local\[(\d+)\]", master or "local[2]")
    if match:
        return local_spark_session("ordo-compactor", cores=int(match.group(1)))
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master(str(master)).appName("ordo-compactor").getOrCreate()
    register(spark)
    return spark


READY_LINE = "compactor ready"


def run_compactor(
    settings: Settings,
    *,
    master: str | None = None,
    tables: Sequence[str] = (),
    interval: float = DEFAULT_INTERVAL,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> int:
    """Run the service until SIGINT/SIGTERM; returns the exit code."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    metrics = Metrics()
    server = None
    if metrics_port is not None:
        from ordo.kernel.observe import ObservabilityServer

        server = ObservabilityServer(metrics.registry, metrics.health, metrics_host, metrics_port).start()
        log.info("compactor metrics at %s/metrics (and /healthz, /readyz)", server.url)
    spark = spark_session(master)
    compactor = Compactor(spark, settings, tables=tables, interval=interval, metrics=metrics)
    metrics.health.ready = True
    log.info("%s: catalog %s, every %g s, tables %s", READY_LINE, settings.catalog, interval, list(tables) or "all")
    try:
        compactor.run(stop)
    finally:
        compactor.close()
        from ordo.producer.table import close_connections

        close_connections()
        spark.stop()
        if server is not None:
            server.close()
    return 0


__all__ = [
    "Action",
    "Compactor",
    "Heat",
    "Metrics",
    "Policy",
    "plan",
    "run_compactor",
    "spark_session",
    "table_layout",
    "writer_rejections_by_service",
]


def writer_rejections_by_service(decisions: Iterable[Any]) -> list[Any]:
    """The rejected writer decisions (not rewrites) whose conflicting transaction was a compaction or clustering."""
    decisions = list(decisions)
    rewrites = {d.txn_id for d in decisions if d.operation is not None and d.operation.value in REWRITE_OPERATIONS}
    return [
        d
        for d in decisions
        if not d.accepted
        and d.operation is not None
        and d.operation.value not in REWRITE_OPERATIONS
        and d.conflicting_txn_id in rewrites
    ]
