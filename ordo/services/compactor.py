"""``ordo compactor``: the table service that compacts and clusters tables while writers keep committing.

It follows the catalog (the consumer's SQLite file, PostgreSQL or HTTP service)
and rewrites the tables it owns: every table, or its share of a compactor
fleet (``services.compactor_fleet``). What a table needs is planned by
``services.compaction_plan`` (MINOR COMPACT in hot groups, MAJOR COMPACT or
CLUSTER in cold ones) whenever the table is idle and ``interval`` seconds have
passed since its last rewrite.

How it keeps up with many partitions:

* **One Spark job per batch, not per group.** A table's planned actions are
  gathered per operation (``compaction_plan.by_partition``); each operation's
  groups, across all partitions, are rewritten by one Spark job: one read,
  each (partition, bucket) group's output written (``producer.rewrites``).
* **A commit per partition.** The conflict matrix's scope is the partition,
  so each partition's rewrite is its own transaction, all pinned to the plan's
  version and published together: a conflict (an INSERT into a partition
  being MAJOR-compacted) loses that partition's work only, which is backed off
  alone (the interval, doubled per consecutive failure, at most 5 minutes).
* **Tables in parallel.** Up to ``parallel_tables`` tables are rewritten at
  once, each in a worker thread with its own Spark job group; the main loop
  only plans which table goes next (the one waiting longest) and serves the
  fleet's group.

Stopping (SIGTERM, SIGINT) abandons the rewrites in flight: their Spark jobs
are cancelled and their staged files deleted; intents already published are
decided and waited for. Spark's JVM runs in a session of its own
(``spark.session.launch_detached``), so a signal to the whole process group
does not kill it under a running rewrite. A process killed outright (SIGKILL)
leaves files no commit names: ``ordo vacuum --orphans`` removes them.

A writer is never blocked or failed by the service: INSERT INTO and UPDATE win
against every compaction by the matrix. The service's own rejections are
counted by operation and reason.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ordo.kernel.settings import Settings
from ordo.services.compaction_plan import (
    CLUSTER,
    MAJOR,
    MINOR,
    REWRITE_OPERATIONS,
    Action,
    GroupKey,
    Heat,
    PartitionValues,
    Policy,
    by_partition,
    plan,
    recent_heat,
)
from ordo.services.compactor_fleet import Claims
from ordo.services.compactor_metrics import Metrics

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ordo.consumer.catalog import Catalog
    from ordo.consumer.models import Snapshot

log = logging.getLogger("ordo.compactor")

DEFAULT_INTERVAL = 5.0
DEFAULT_PARALLEL_TABLES = 2
MAX_BACKOFF = 300.0
TICK = 0.5  # the main loop's turn: pick tables to rewrite, serve the fleet's group
SHUTDOWN_WAIT = 60.0  # on stop, how long the abandoned rewrites get to end (cancelled jobs, intents in flight)
JOB_GROUP = "ordo-compactor:"  # + table: the Spark job group of a table's rewrites (cancelled to abandon them)
WARM_UP = "(warm-up)"  # the job group of the warm-up (no table has this name: it is not a valid table name)
# The service's Spark settings: a rewrite names its input files, and Spark lists more than 32 paths with a
# job of its own (on a 2-core machine it cost as much as the rewrite); up to this many, the driver lists them.
SPARK_CONF = {"spark.sql.sources.parallelPartitionDiscovery.threshold": "4096"}


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


# --------------------------------------------------------------------------- one table's rewrites


@dataclass
class _TableState:
    """What the service keeps per table between its rewrites (one worker at a time touches it)."""

    cursor: int | None = None  # next version to account in ``heat`` (None: not read yet)
    heat: Heat = field(default_factory=Heat)
    failures: dict[GroupKey, int] = field(default_factory=dict)
    retry_at: dict[GroupKey, float] = field(default_factory=dict)
    rewrite_seconds: float = 0.0  # recent time from plan to commits landed (a moving average)
    next_at: float = 0.0  # not planned again before this (the interval after its last turn)
    problem: str | None = None  # the bad property last logged
    abandon: threading.Event = field(default_factory=threading.Event)


class TableRewriter:
    """Plans one table and runs its batches: per operation one Spark job, one commit per partition."""

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        catalog: Catalog,
        metrics: Metrics,
        claims: Claims,
        *,
        interval: float,
        clock: Callable[[], float],
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.catalog = catalog
        self.metrics = metrics
        self.claims = claims
        self.interval = interval
        self.clock = clock
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()

    def compact(self, name: str, state: _TableState) -> int:
        """Plan ``name`` and run what is due; the number of (partition, bucket) groups committed."""
        if not self.claims.holds(name):  # the fleet moved it since the loop picked it
            return 0
        info = self.catalog.table(name)
        try:
            policy = Policy.of(info.metadata.properties)
        except ValueError as exc:
            if state.problem != str(exc):
                log.warning("table %s: %s; not compacting it", name, exc)
                state.problem = str(exc)
            return 0
        state.problem = None
        self._follow(name, state, info.head_version, info.metadata.partition_columns)
        if not policy.enabled:
            self.metrics.forget(name)
            return 0
        started = time.perf_counter()
        snapshot = self.catalog.snapshot(name)
        self.metrics.observe_layout(name, snapshot)
        now = self.clock()
        lead = self.interval + state.rewrite_seconds
        actions = [a for a in plan(snapshot, policy, state.heat, now, lead) if state.retry_at.get(a.key, 0.0) <= now]
        self.metrics.pending.labels(name).set(len(actions))
        if not actions:
            return 0
        done = 0
        for operation, partitions in by_partition(actions).items():
            if state.abandon.is_set() or not self.claims.holds(name):
                break
            done += self._batch(name, policy, state, snapshot, operation, partitions)
        seconds = time.perf_counter() - started
        state.rewrite_seconds = seconds if not state.rewrite_seconds else (state.rewrite_seconds + seconds) / 2
        return done

    def _follow(self, name: str, state: _TableState, head: int, columns: Sequence[str]) -> None:
        """Account the commits since the last turn in the table's heat (the last 200 versions at first)."""
        if state.cursor is None:
            state.heat = recent_heat(self.catalog, name, head)
        elif head >= state.cursor:
            for commit in self.catalog.commits(name, state.cursor, head):
                state.heat.observe(commit, columns)
        state.cursor = max(head + 1, state.cursor or 0)

    def table(self, name: str) -> Any:
        """The table's handle (opened once)."""
        from ordo.producer.table import DeltaTable

        with self._lock:
            handle = self._handles.get(name)
        if handle is None:  # opened outside the lock: the first open registers the data source (seconds)
            opened = DeltaTable.open(self.spark, name, settings=self.settings)
            with self._lock:
                handle = self._handles.setdefault(name, opened)
        return handle

    def _batch(
        self,
        name: str,
        policy: Policy,
        state: _TableState,
        snapshot: Snapshot,
        operation: str,
        partitions: dict[PartitionValues, list[Action]],
    ) -> int:
        """One Spark job rewriting ``partitions`` by ``operation``, then a commit per partition; groups committed."""
        from ordo.producer.rewrites import PartitionRewrite, commit_each, stage_rewrites
        from ordo.schemas import Operation

        rewrites = [
            PartitionRewrite(
                dict(actions[0].partition),
                tuple(sorted({p for a in actions for p in a.files})) if operation == MINOR else None,
            )
            for actions in partitions.values()
        ]
        log.info(
            "%s %s: rewriting %d file(s) of %d partition(s) in one Spark job",
            name,
            operation,
            sum(len(a.files) for actions in partitions.values() for a in actions),
            len(rewrites),
        )
        started = time.perf_counter()
        try:
            staged = stage_rewrites(
                self.table(name),
                Operation(operation),
                rewrites,
                read_version=snapshot.id_version,
                sort_by=policy.cluster_by if operation == CLUSTER else (),
            )
        except Exception as exc:
            if state.abandon.is_set():
                self._abandoned(name, operation, len(rewrites), "its Spark job was cancelled")
                return 0
            self.metrics.failed.labels(name, operation).inc()
            delay = self._backoff(state, [a.key for actions in partitions.values() for a in actions])
            log.warning(
                "%s %s of %d partition(s) failed: %s; retrying in %.0f s",
                name,
                operation,
                len(rewrites),
                _first_line(exc),
                delay,
            )
            return 0
        if state.abandon.is_set() or not self.claims.holds(name):
            for txn in staged:
                txn.abort()
            self._abandoned(name, operation, len(staged), "staged, not published")
            return 0
        spark_seconds = time.perf_counter() - started
        results = commit_each(staged)
        seconds = time.perf_counter() - started
        self.metrics.batch_seconds.labels(operation).observe(seconds)
        outcomes = list(zip(staged, results, strict=True))
        return self._record(name, state, operation, partitions, snapshot, outcomes, (spark_seconds, seconds))

    def _record(
        self,
        name: str,
        state: _TableState,
        operation: str,
        partitions: dict[PartitionValues, list[Action]],
        snapshot: Snapshot,
        outcomes: list[tuple[Any, Any]],
        seconds: tuple[float, float],
    ) -> int:
        """Count and log each partition's outcome; back off the rejected ones; the groups committed."""
        from ordo.kernel.errors import CommitConflictError

        files = {f.path: f for f in snapshot.files}
        groups = files_in = files_out = 0
        versions: list[int] = []
        rejected: dict[str, int] = {}
        for txn, result in outcomes:
            values = tuple(txn.partitions[0].values()) if txn.partitions else ()
            keys = [a.key for a in partitions.get(values, [])]
            if isinstance(result, CommitConflictError):
                reason = result.reason or "UNKNOWN"
                rejected[reason] = rejected.get(reason, 0) + 1
                self.metrics.rejected.labels(name, operation, reason).inc()
                delay = self._backoff(state, keys)
                log.info(
                    "%s %s of %s rejected (%s, conflicting %s); retrying it in %.0f s",
                    name,
                    operation,
                    dict(txn.partitions[0]) if txn.partitions else "the table",
                    reason,
                    result.conflicting_txn_id,
                    delay,
                )
                continue
            if isinstance(result, BaseException):
                self.metrics.failed.labels(name, operation).inc()
                delay = self._backoff(state, keys)
                log.warning(
                    "%s %s of %s failed: %s; retrying in %.0f s", name, operation, values, _first_line(result), delay
                )
                continue
            for key in keys:
                state.failures.pop(key, None)
                state.retry_at.pop(key, None)
            rewritten = [files[p] for p in txn.removed_files if p in files]
            count = len({f.bucket for f in rewritten})
            groups += count
            files_in += len(txn.removed_files)
            files_out += len(txn.added_files)
            versions.append(result.id_version)
            self.metrics.committed.labels(name, operation).inc()
            self.metrics.groups.labels(name, operation).inc(count)
            self.metrics.bytes_rewritten.labels(name, operation).inc(sum(f.size_bytes for f in rewritten))
        log.info(
            "%s %s: %d partition(s), %d group(s), %d -> %d files committed%s%s in %.1f s (Spark %.1f s)",
            name,
            operation,
            len(versions),
            groups,
            files_in,
            files_out,
            f" (v{min(versions)}..v{max(versions)})" if versions else "",
            f"; rejected {rejected}" if rejected else "",
            seconds[1],
            seconds[0],
        )
        return groups

    def _abandoned(self, name: str, operation: str, partitions: int, how: str) -> None:
        self.metrics.abandoned.labels(name, operation).inc(partitions)
        log.info("%s %s of %d partition(s) abandoned (%s): nothing of it stays", name, operation, partitions, how)

    def _backoff(self, state: _TableState, keys: Iterable[GroupKey]) -> float:
        """Hold ``keys`` back: the interval, doubled per consecutive failure, at most ``MAX_BACKOFF``; the delay."""
        longest = 0.0
        for key in keys:
            failures = state.failures.get(key, 0) + 1
            state.failures[key] = failures
            delay = min(MAX_BACKOFF, self.interval * 2 ** (failures - 1))
            state.retry_at[key] = self.clock() + delay
            longest = max(longest, delay)
        return longest


def _first_line(exc: BaseException) -> str:
    """An exception as one line (a Spark error's first line, not its JVM stack)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


# --------------------------------------------------------------------------- the service


class Compactor:
    """Schedules the owned tables onto at most ``parallel_tables`` workers (``run()`` loops; ``round()`` is one
    synchronous pass over every table)."""

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        *,
        tables: Sequence[str] = (),
        interval: float = DEFAULT_INTERVAL,
        parallel_tables: int = DEFAULT_PARALLEL_TABLES,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        claims: Claims | None = None,
    ) -> None:
        from ordo.consumer.catalog import Catalog

        if parallel_tables < 1:
            raise ValueError(f"parallel_tables must be at least 1, not {parallel_tables}")
        self.spark = spark
        self.settings = settings
        self.only = tuple(tables)
        self.interval = interval
        self.parallel_tables = parallel_tables
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.claims = claims or Claims(settings, None)
        self.catalog = Catalog(settings.catalog)
        self.rewriter = TableRewriter(
            spark, settings, self.catalog, self.metrics, self.claims, interval=interval, clock=clock
        )
        self.rounds = 0
        self.groups = 0  # groups committed since start
        self._state: dict[str, _TableState] = {}
        self._busy: dict[str, Future[int]] = {}
        self._stop_by: float | None = None  # the end of the shutdown's wait, set by its first call
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(parallel_tables, thread_name_prefix="ordo-compactor")

    # ------------------------------------------------------------------ scheduling

    def _owned(self) -> list[str]:
        """The tables to compact: followed (``--tables``), readable and held (fleet)."""
        return [
            info.name
            for info in self.catalog.tables()
            if (not self.only or info.name in self.only) and info.error is None and self.claims.holds(info.name)
        ]

    def tick(self, *, due_only: bool = True, among: set[str] | None = None) -> None:
        """One turn of the loop: serve the group, then start the tables that are due (of ``among`` when given),
        longest waiting first."""
        self.rounds += 1
        self.metrics.rounds.inc()
        self.metrics.health.beat()
        changes = self.claims.poll()
        for name in changes.revoked | changes.lost:
            self._state.pop(name, None)
            self.metrics.forget(name)
        owned = self._owned()
        self.metrics.tables.set(len(owned))
        now = self.clock()
        with self._lock:
            idle = [n for n in owned if n not in self._busy and (among is None or n in among)]
            free = self.parallel_tables - len(self._busy)
        states = {n: self._state.setdefault(n, _TableState()) for n in idle}
        due = sorted((s.next_at, n) for n, s in states.items() if not due_only or s.next_at <= now)
        for _, name in due[: max(0, free)]:
            self._start(name, states[name])

    def _start(self, name: str, state: _TableState) -> None:
        state.abandon.clear()
        with self._lock:
            future = self._pool.submit(self._work, name, state)
            self._busy[name] = future
            self.metrics.busy.set(len(self._busy))
        future.add_done_callback(lambda f: self._finished(name, state, f))

    def _work(self, name: str, state: _TableState) -> int:
        """A worker's turn on one table (its Spark jobs in the table's job group, so they can be cancelled)."""
        from ordo.consumer.errors import CatalogUnavailableError

        self.spark.sparkContext.setJobGroup(JOB_GROUP + name, f"ordo compactor: {name}", interruptOnCancel=True)
        try:
            return self.rewriter.compact(name, state)
        except CatalogUnavailableError as exc:
            log.info("table %s: waiting for the catalog: %s", name, exc)
        except Exception as exc:  # a table's trouble must not stop the service
            if not state.abandon.is_set():
                log.warning("table %s: %s", name, _first_line(exc), exc_info=log.isEnabledFor(logging.DEBUG))
        return 0

    def _finished(self, name: str, state: _TableState, future: Future[int]) -> None:
        state.next_at = self.clock() + self.interval
        with self._lock:
            self._busy.pop(name, None)
            self.metrics.busy.set(len(self._busy))
            if not future.cancelled() and future.exception() is None:
                self.groups += future.result()

    def warm_up(self) -> Future[None]:
        """Warm Spark up in a worker (``producer.rewrites.warm_up``) while no table needs it yet."""

        def run() -> None:
            from ordo.producer.rewrites import warm_up

            self.spark.sparkContext.setJobGroup(JOB_GROUP + WARM_UP, "ordo compactor: warm-up", interruptOnCancel=True)
            started = time.perf_counter()
            try:
                warm_up(self.spark)
            except Exception as exc:  # only a head start: the service works without it
                log.info("Spark warm-up failed: %s", _first_line(exc))
                return
            log.info("Spark warmed up in %.1f s", time.perf_counter() - started)

        return self._pool.submit(run)

    def round(self) -> int:
        """Plan and rewrite every owned table once (``parallel_tables`` at a time); the groups committed."""
        before = self.groups
        pending = set(self._owned())
        while pending:
            self.tick(due_only=False, among=pending)
            with self._lock:
                running = {n: f for n, f in self._busy.items() if n in pending}
            if not running:
                break
            wait_futures(running.values())
            pending -= set(running)
        return self.groups - before

    def run(self, stop: threading.Event) -> None:
        """Turn the loop until ``stop`` is set, then abandon the rewrites in flight (``shutdown``)."""
        from ordo.consumer.errors import CatalogUnavailableError

        try:
            while not stop.is_set():
                try:
                    self.tick()
                except CatalogUnavailableError as exc:
                    log.info("waiting for the catalog: %s", exc)
                stop.wait(min(TICK, self.interval))
        finally:
            self.shutdown()

    # ------------------------------------------------------------------ stopping

    def _abandon(self, names: Iterable[str]) -> list[Future[int]]:
        """Abandon the rewrites in flight of ``names``: flag them, cancel their Spark jobs; their futures."""
        with self._lock:
            running = {n: self._busy[n] for n in names if n in self._busy}
        for name in running:
            state = self._state.get(name)
            if state is not None:
                state.abandon.set()
            try:
                self.spark.sparkContext.cancelJobGroup(JOB_GROUP + name)
            except Exception as exc:  # Spark already stopping: its jobs end with it
                log.debug("cancelling the Spark jobs of %s: %s", name, exc)
        return list(running.values())

    def release(self, tables: set[str], wait: float | None = None) -> None:
        """The fleet's group takes ``tables`` away: abandon their rewrites and wait for them (bounded)."""
        from ordo.services.compactor_fleet import RELEASE_WAIT_S

        futures = self._abandon(tables)
        if futures:
            _, late = wait_futures(futures, timeout=RELEASE_WAIT_S if wait is None else wait)
            if late:
                log.warning("table(s) %s: a rewrite still runs after the release wait", ", ".join(sorted(tables)))

    def shutdown(self, wait: float = SHUTDOWN_WAIT) -> None:
        """Abandon every rewrite in flight and wait for the workers (intents already published get decided).

        ``wait`` bounds the whole stop: a second call (the service's loop ends with one, its command with
        another) waits only what is left of the first call's ``wait``."""
        first = self._stop_by is None
        stop_by = self._stop_by = time.monotonic() + wait if self._stop_by is None else self._stop_by
        with self._lock:
            names = list(self._busy)
        try:
            self.spark.sparkContext.cancelJobGroup(JOB_GROUP + WARM_UP)
        except Exception as exc:  # Spark already stopping
            log.debug("cancelling the warm-up: %s", exc)
        futures = self._abandon(names)
        if futures:
            if first:
                log.info("stopping: abandoning the rewrites of %s", ", ".join(sorted(names)))
            _, late = wait_futures(futures, timeout=max(0.0, stop_by - time.monotonic()))
            if late and not first:
                log.warning(
                    "stopping with the rewrites of %s still running after the shutdown wait", ", ".join(sorted(names))
                )
        self._pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Release the catalog connection."""
        self.catalog.close()


def spark_session(master: str | None) -> SparkSession:
    """The service's Spark session: local (``local[N]``, the default ``local[2]``) or any master (the driver runs
    here; the executors' Python and S3A come from Spark's settings: docs/operations.md, "Production"); its JVM in a
    session of its own (``spark.session.launch_detached``). The ``format("ordo")`` source is registered by the
    first table the service opens, not before it is ready."""
    import re

    from ordo.kernel.streams import child_output
    from ordo.spark import local_spark_session
    from ordo.spark.session import launch_detached, object_store_settings, use_session_object_store

    match = re.fullmatch(r"local\[(\d+)\]", master or "local[2]")
    if match:
        return local_spark_session(
            "ordo-compactor", cores=int(match.group(1)), config=SPARK_CONF, detached=True, source=False
        )
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(str(master)).appName("ordo-compactor")
    for key, value in object_store_settings(SPARK_CONF).items():
        builder = builder.config(key, value)
    with child_output():  # the JVM's lines: records of ordo.jvm under --log-format json
        launch_detached(builder._options)  # type: ignore[attr-defined]
        spark = builder.getOrCreate()
    use_session_object_store(spark)
    return spark


def py4j_in_one_line(record: logging.LogRecord) -> bool:
    """A root-logger filter: Py4J logs its connection retries (``Exception while sending command.``, at INFO) on
    the root logger with a traceback; the service keeps the line, without the traceback. When Spark's JVM is
    stopped under the service (a supervisor that signals every process of the service), this is all it says."""
    if record.module in ("java_gateway", "clientserver"):
        record.exc_info, record.exc_text = None, None
    return True


def stop_spark(spark: SparkSession) -> None:
    """Stop Spark without a traceback: a JVM that is gone already (killed on its own) is logged in one line."""
    try:
        spark.stop()
    except Exception as exc:
        log.info("Spark had stopped already: %s", _first_line(exc))


READY_LINE = "compactor ready"


def run_compactor(
    settings: Settings,
    *,
    master: str | None = None,
    tables: Sequence[str] = (),
    interval: float = DEFAULT_INTERVAL,
    parallel_tables: int = DEFAULT_PARALLEL_TABLES,
    group: str | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> int:
    """Run the service until SIGINT/SIGTERM; returns the exit code."""
    started = time.monotonic()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    logging.getLogger().addFilter(py4j_in_one_line)
    metrics = Metrics()
    server = None
    if metrics_port is not None:
        from ordo.kernel.observe import ObservabilityServer

        server = ObservabilityServer(metrics.registry, metrics.health, metrics_host, metrics_port).start()
        log.info("compactor metrics at %s/metrics (and /healthz, /readyz)", server.url)
    claims = Claims(settings, group)
    spark = compactor = None
    try:
        claims.join()  # the group's first assignment comes while Spark starts
        spark_started = time.monotonic()
        spark = spark_session(master)
        spark_seconds = time.monotonic() - spark_started
        compactor = Compactor(
            spark,
            settings,
            tables=tables,
            interval=interval,
            parallel_tables=parallel_tables,
            metrics=metrics,
            claims=claims,
        )
        claims.on_release(compactor.release)
        compactor.warm_up()
        claims.wait_assigned(_tables_exist(compactor), stop)
        metrics.health.ready = True
        log.info(
            "%s in %.1f s (Spark %.1f s): catalog %s, every %g s, %d table(s) at once, %s, tables %s",
            READY_LINE,
            time.monotonic() - started,
            spark_seconds,
            settings.catalog,
            interval,
            parallel_tables,
            claims.describe(),
            list(tables) or "all",
        )
        compactor.run(stop)
    finally:
        if compactor is not None:
            compactor.shutdown()
        claims.close()
        if compactor is not None:
            compactor.close()
        from ordo.producer.table import close_connections

        close_connections()
        if spark is not None:
            stop_spark(spark)
        if server is not None:
            server.close()
    log.info("compactor stopped")
    return 0


def _tables_exist(compactor: Compactor) -> bool:
    from ordo.consumer.errors import CatalogUnavailableError

    try:
        return bool(compactor.catalog.tables())
    except CatalogUnavailableError:
        return False


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


__all__ = [
    "CLUSTER",
    "MAJOR",
    "MINOR",
    "Action",
    "Compactor",
    "Heat",
    "Metrics",
    "Policy",
    "TableRewriter",
    "plan",
    "run_compactor",
    "spark_session",
    "table_layout",
    "writer_rejections_by_service",
]
