"""``ordo demo``: concurrent Spark writers on one table, the conflicts they cause, and what readers see.

It starts the embedded stack (a 1-node Apache Kafka, or Tansu with ``broker=
"tansu"``; an arbiter, a consumer) in a temporary directory, creates a
partitioned table ``events`` and runs, on a small local Spark session:

1. seed inserts;
2. on partition ``dt=2024-05-01``: a minor and a major compaction and an
   update, staged on the same snapshot and committed one after another, then a
   delete that loses to the update, and its retry;
3. on ``dt=2024-05-02``: a clustering job racing two inserts;
4. on ``dt=2024-05-03``: a Structured Streaming query inserting micro-batches
   while an INSERT OVERWRITE and a late batch load commit, and, at the same
   time in two threads, a compaction and an update of ``dt=2024-05-02``;
5. the table service: ``ordo compactor`` (started by the stack, following
   the table ``clicks`` only) compacts while a streaming query writes it;
   files per partition are shown as it goes;
6. reads: the history, the conflict summary checked against the policy file
   (``ordo/arbiter/policies/maxcompute.csv``), a time-travel read, and the change
   feed between two time versions.

The exit code is 0 when every concurrent pair agreed with the matrix. Steps
1-3 commit in a fixed order, so their matrix cells always occur; what the
streaming query and the threads collide with depends on timing, and whatever
happens is checked the same way.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ordo.cli.commands import fmt_scope, fmt_time, history_table, make_console
from ordo.cli.conflict_report import AGREE, DISAGREE, LINEAGE, MASKED, Report, check_history, from_records
from ordo.kernel.errors import OrdoError

if TYPE_CHECKING:
    from rich.console import Console

    from ordo.producer.table import CommitResult, DeltaTable, Transaction
    from ordo.services.stack import ManagedProcess

TABLE = "events"
SCHEMA = "id BIGINT, kind STRING, amount BIGINT, dt STRING"
D1, D2, D3 = "2024-05-01", "2024-05-02", "2024-05-03"
KINDS = ("click", "view", "buy")
STREAM_BASE = 1_000_000
POLICY_FILE = "ordo/arbiter/policies/maxcompute.csv"
SERVICE_TABLE = "clicks"
SERVICE_PROPERTIES = {"ordo.compaction.min_files": "4", "ordo.compaction.cold_seconds": "5"}
SERVICE_STREAM_SECONDS = 20.0


def _rows(first: int, count: int, dt: str, amount: int = 0) -> list[tuple[int, str, int, str]]:
    return [(i, KINDS[i % 3], (i * 7 + amount) % 100, dt) for i in range(first, first + count)]


@dataclass
class Narrator:
    """Prints each step with its outcome and duration; a spinner while Spark works (on a terminal)."""

    console: Console
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    spinning: bool = False

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:5.1f}s"

    def say(self, text: str) -> None:
        with self.lock:
            self.console.print(f"[dim]{self.elapsed()}[/dim]  {text}")

    def heading(self, text: str) -> None:
        with self.lock:
            self.console.print()
            self.console.rule(f"[bold]{text}", align="left")

    @contextlib.contextmanager
    def working(self, text: str) -> Iterator[None]:
        """A spinner with ``text`` while the block runs (on a terminal; one at a time, threads share it)."""
        with self.lock:
            mine = self.console.is_terminal and not self.spinning
            if mine:
                self.spinning = True
        if not mine:
            yield
            return
        try:
            with self.console.status(f"{text} ...", spinner="dots"):
                yield
        finally:
            self.spinning = False


def describe(result: CommitResult | None) -> str:
    """``v5 accepted (compaction_completes)`` for a commit result."""
    if result is None:
        return "nothing to commit"
    rebase = "" if result.rebase.value == "NONE" else f", {result.rebase.value.lower()}"
    retried = f", after {result.attempts - 1} metadata-level retry" if result.attempts > 1 else ""
    return f"[green]v{result.id_version} accepted[/green] (read v{_read(result)}{rebase}{retried})"


def _read(result: CommitResult) -> str:
    decision = result.decision
    return "?" if decision is None or decision.read_version is None else str(decision.read_version)


class Demo:
    """The demo's scenario against a running stack (``settings``) and a Spark session."""

    def __init__(
        self, spark: Any, settings: Any, narrator: Narrator, workdir: Path, compactor: ManagedProcess | None = None
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.compactor = compactor  # the stack's table service, shown at work in the last act
        self.say = narrator.say
        self.narrator = narrator
        self.workdir = workdir
        self.table: DeltaTable | None = None
        self.marks: dict[str, Any] = {}

    def close(self) -> None:
        """Close the demo table's Kafka client and catalog connection (only its own: the settings are unique)."""
        if self.table is not None:
            self.table.client.close()
            self.table.catalog.close()

    # ------------------------------------------------------------------ helpers

    def df(self, rows: list[tuple[int, str, int, str]]) -> Any:
        return self.spark.createDataFrame(rows, SCHEMA)

    def commit(self, label: str, action: Callable[[], CommitResult | None]) -> CommitResult | None:
        """Run a one-transaction operation (stage + commit) and narrate its outcome."""
        from ordo.kernel.errors import CommitConflictError

        started = time.monotonic()
        with self.narrator.working(label):
            try:
                result = action()
            except CommitConflictError as exc:
                self.say(f"{label}: {rejected(exc)} ({time.monotonic() - started:.1f} s)")
                return None
        self.say(f"{label}: {describe(result)} ({time.monotonic() - started:.1f} s)")
        return result

    def stage(self, label: str, txn: Transaction, action: Callable[[Transaction], Any]) -> Transaction:
        started = time.monotonic()
        with self.narrator.working(f"staging {label}"):
            action(txn)
        files = len(txn.added_files)
        removed = f", reads {len(txn.removed_files)} files" if txn.removed_files else ""
        self.say(
            f"staged {label} on v{txn.read_version}: {files} new files{removed} ({time.monotonic() - started:.1f} s)"
        )
        return txn

    # ------------------------------------------------------------------ the story

    def run(self) -> None:
        from ordo.producer.table import DeltaTable

        n = self.narrator
        n.heading("1. a partitioned table and its first data")
        with n.working("creating the table"):
            self.table = DeltaTable.create(
                self.spark,
                TABLE,
                schema=SCHEMA,
                primary_key="id",
                partitioned_by="dt",
                settings=self.settings,
            )
        t = self.table
        self.say(f"created table {TABLE} ({SCHEMA}; primary key id; partitioned by dt) at v0")
        self.commit(
            "INSERT INTO dt=05-01, 05-02", lambda: t.insert_into(self.df(_rows(1, 40, D1) + _rows(101, 40, D2)))
        )
        self.commit(
            "INSERT INTO dt=05-01, 05-02 (new keys and upserts)",
            lambda: t.insert_into(self.df(_rows(41, 20, D1) + _rows(1, 10, D1, 5) + _rows(141, 20, D2))),
        )
        seed = self.commit("INSERT INTO dt=05-03", lambda: t.insert_into(self.df(_rows(201, 30, D3))))
        assert seed is not None
        self.marks["seed"] = seed

        n.heading("2. dt=2024-05-01: compactions and an update staged on one snapshot")
        minor = self.stage("MINOR COMPACT dt=05-01", t.begin(), lambda x: x.compact("minor", {"dt": D1}))
        major = self.stage("MAJOR COMPACT dt=05-01", t.begin(), lambda x: x.compact("major", {"dt": D1}))
        update = self.stage(
            "UPDATE dt=05-01 SET amount = amount + 1000 WHERE kind = 'click'",
            t.begin(),
            lambda x: x.update({"amount": "amount + 1000"}, "kind = 'click'", partition={"dt": D1}),
        )
        self.commit("commit MINOR COMPACT", minor.commit)
        self.commit("commit MAJOR COMPACT (the minor one rewrote its inputs)", major.commit)
        delete = self.stage(
            "DELETE dt=05-01 WHERE amount < 20",
            t.begin(),
            lambda x: x.delete("amount < 20", partition={"dt": D1}),
        )
        first_update = self.commit("commit UPDATE (read before both compactions)", update.commit)
        self.marks["update"] = first_update
        self.commit("commit DELETE (read before the UPDATE committed)", delete.commit)
        self.commit("DELETE again, on the new head", lambda: t.delete("amount < 20", partition={"dt": D1}))

        n.heading("3. dt=2024-05-02: clustering racing inserts")
        cluster = self.stage("CLUSTER BY kind dt=05-02", t.begin(), lambda x: x.cluster("kind", {"dt": D2}))
        self.commit("INSERT INTO dt=05-02 (a batch job)", lambda: t.insert_into(self.df(_rows(161, 10, D2))))
        late = self.stage(
            "INSERT INTO dt=05-02 (another batch job)", t.begin(), lambda x: x.insert_into(self.df(_rows(171, 10, D2)))
        )
        self.commit("commit CLUSTER BY kind", cluster.commit)
        self.commit("commit the second INSERT", late.commit)

        n.heading("4. dt=2024-05-03: a streaming query, an overwrite, a late load; two jobs on dt=05-02 in threads")
        self.streaming_act()

        n.heading("5. the table service: `ordo compactor` compacts a second table while a stream writes it")
        self.service_act()

    def streaming_act(self) -> None:
        from pyspark.sql import functions as F

        from ordo.producer.streaming import foreach_batch_committer

        t = self.table
        assert t is not None
        committed: list[tuple[int, CommitResult | None]] = []

        def on_commit(batch_id: int, result: CommitResult | None) -> None:
            committed.append((batch_id, result))
            if result is not None:
                self.say(f"stream batch {batch_id}: INSERT INTO dt=05-03: {describe(result)}")

        committer = foreach_batch_committer(t, app_id="demo-stream", on_commit=on_commit, retries=5)
        source = self.spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
        rows = source.select(
            (F.col("value") + STREAM_BASE).alias("id"),
            F.element_at(F.array(*[F.lit(k) for k in KINDS]), (F.col("value") % 3 + 1).cast("int")).alias("kind"),
            (F.col("value") % 100).alias("amount"),
            F.lit(D3).alias("dt"),
        )
        query = (
            rows.writeStream.foreachBatch(committer)
            .option("checkpointLocation", str(self.workdir / "stream-checkpoint"))
            .trigger(processingTime="2 seconds")
            .queryName("demo_stream")
            .start()
        )
        self.say("started a Structured Streaming query: 5 rows per micro-batch into dt=05-03, one INSERT INTO each")
        try:
            self._wait(lambda: len(committed) >= 1, query, "the first micro-batch")
            overwrite = self.stage(
                "INSERT OVERWRITE dt=05-03",
                t.begin(),
                lambda x: x.insert_overwrite(self.df(_rows(301, 15, D3)), {"dt": D3}),
            )
            load = self.stage(
                "INSERT INTO dt=05-03 (late batch load)", t.begin(), lambda x: x.insert_into(self.df(_rows(401, 5, D3)))
            )
            seen = len(committed)
            self._wait(lambda: len(committed) > seen, query, "a micro-batch after the overwrite's snapshot")
            self.commit("commit INSERT OVERWRITE dt=05-03", overwrite.commit)
            self.commit("commit the late load, retrying on conflict", lambda: load.commit(retries=3))

            self.say("two threads start now on dt=05-02 while the stream keeps writing dt=05-03")
            jobs = {
                "MINOR COMPACT dt=05-02 (thread)": lambda: t.compact("minor", {"dt": D2}),
                "UPDATE dt=05-02 SET amount = 0 WHERE kind = 'view' (thread)": lambda: t.update(
                    {"amount": "0"}, "kind = 'view'", partition={"dt": D2}
                ),
            }
            threads = [
                threading.Thread(target=self.commit, args=(label, job), name=label) for label, job in jobs.items()
            ]
            with self.narrator.working("two concurrent jobs and the stream"):
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
            seen = len(committed)
            self._wait(lambda: len(committed) > seen, query, "one more micro-batch")
        finally:
            query.stop()
        self.say(f"stopped the stream after {len([c for c in committed if c[1] is not None])} committed micro-batches")

    def service_act(self) -> None:
        """A stream into ``clicks`` (two partitions) with the stack's compactor running; files per partition shown."""
        from pyspark.sql import functions as F

        from ordo.producer.streaming import foreach_batch_committer
        from ordo.producer.table import DeltaTable
        from ordo.services.compactor import READY_LINE, table_layout, writer_rejections_by_service

        if self.compactor is not None:  # its own Spark starts beside the demo's: on a busy machine, after it
            with self.narrator.working("waiting for the table service's Spark session"):
                self.compactor.wait_for_line(READY_LINE, timeout=300)

        with self.narrator.working(f"creating table {SERVICE_TABLE}"):
            table = DeltaTable.create(
                self.spark,
                SERVICE_TABLE,
                schema=SCHEMA,
                primary_key="id",
                partitioned_by="dt",
                properties=SERVICE_PROPERTIES,
                settings=self.settings,
            )
        props = ", ".join(f"{k}={v}" for k, v in SERVICE_PROPERTIES.items())
        self.say(f"created {SERVICE_TABLE} ({props}); the stack's compactor follows it")
        committer = foreach_batch_committer(table, app_id="demo-clicks", retries=5)
        source = self.spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 20).load()
        rows = source.select(
            (F.col("value") + STREAM_BASE).alias("id"),
            F.element_at(F.array(*[F.lit(k) for k in KINDS]), (F.col("value") % 3 + 1).cast("int")).alias("kind"),
            (F.col("value") % 100).alias("amount"),
            F.when(F.col("value") % 2 == 0, F.lit(D1)).otherwise(F.lit(D2)).alias("dt"),
        )
        query = (
            rows.writeStream.foreachBatch(committer)
            .option("checkpointLocation", str(self.workdir / "clicks-checkpoint"))
            .trigger(processingTime="1 second")
            .queryName("demo_clicks")
            .start()
        )

        def show(label: str) -> dict[str, Any]:
            layout = table_layout(table.catalog, SERVICE_TABLE)
            last = layout["last_compaction"]
            done = f"last {last['operation']} at v{last['id_version']}" if last else "no compaction yet"
            per = ", ".join(f"dt={k}: {v}" for k, v in layout["files_per_partition"].items())
            self.say(f"{label}: v{layout['version']}, files per partition {per or '-'}; {done}")
            return layout

        started = time.monotonic()
        try:
            while time.monotonic() - started < SERVICE_STREAM_SECONDS:
                if query.exception() is not None:
                    raise RuntimeError(f"the streaming query failed: {query.exception()}")
                with self.narrator.working("streaming into clicks, the compactor running beside it"):
                    time.sleep(5.0)
                show(f"stream {len(committer.committed)} batches")
        finally:
            query.stop()
        self.say("stopped the stream: the partitions turn cold, a MAJOR COMPACT may run there now")
        deadline = time.monotonic() + 30.0
        with self.narrator.working("waiting for the compactor to finish"):
            while time.monotonic() < deadline:
                layout = table_layout(table.catalog, SERVICE_TABLE)
                if not layout["pending"] and layout["max_files_per_partition"] <= 1:
                    break
                time.sleep(1.0)
        show("after the stream")
        decisions = table.decisions()
        rewrites = [d for d in decisions if d.operation is not None and d.operation.rewrites]
        accepted = [d for d in rewrites if d.accepted]
        kinds = ", ".join(sorted({d.operation.value for d in accepted if d.operation is not None})) or "none"
        self.say(
            f"compactor commits: {len(accepted)} accepted ({kinds}), {len(rewrites) - len(accepted)} rejected; "
            f"INSERTs rejected because of it: {len(writer_rejections_by_service(decisions))}"
        )
        table.client.close()
        table.catalog.close()

    def _wait(self, condition: Callable[[], bool], query: Any, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with self.narrator.working(f"waiting for {what}"):
            while not condition():
                if query.exception() is not None:
                    raise RuntimeError(f"the streaming query failed: {query.exception()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the streaming query made no progress in {timeout:g} s ({what})")
                time.sleep(0.1)

    def report(self, console: Console) -> Report:
        """What readers see of the story (``ReadersView``): the history, the conflict summary, and reads."""
        assert self.table is not None
        return ReadersView(self.table, self.narrator, self.marks).report(console)


class ReadersView:
    """What readers see once the story ran: the table's history and conflict summary, a time-travel read at the
    seed's version, and the change feed from the first UPDATE (``marks``: those commits)."""

    def __init__(self, table: DeltaTable, narrator: Narrator, marks: dict[str, Any]) -> None:
        self.table = table
        self.narrator = narrator
        self.marks = marks

    def report(self, console: Console) -> Report:
        """The history, the conflict summary against the policy file, a time-travel read and the change feed."""
        t = self.table
        history = list(reversed(t.catalog.history(TABLE)))
        self.narrator.heading("history (oldest first): every decision of the table's log")
        console.print(history_table(history, txn=False))
        accepted = sum(1 for d in history if d.accepted)
        console.print(
            f"{len(history)} decisions: {accepted} accepted (ID versions 0..{t.version}), {len(history) - accepted} "
            "rejected (rejections consume no version)"
        )

        report = check_history(from_records(history))
        self.narrator.heading(f"conflict summary: concurrent pairs vs {POLICY_FILE}")
        console.print(conflict_table(report))
        counts = {v: sum(1 for p in report.pairs if p.verdict == v) for v in (AGREE, DISAGREE, MASKED, LINEAGE)}
        console.print(
            f"{len(report.pairs)} concurrent pairs in {report.judged} transactions; {counts[AGREE]} agree with the matrix"
            + (f", {counts[MASKED]} masked (the later job failed on another pair)" if counts[MASKED] else "")
            + (f", {counts[LINEAGE]} refused by the lineage rule" if counts[LINEAGE] else "")
            + f"; {report.disjoint} concurrent pairs on disjoint partitions (never a conflict)"
        )
        if report.agrees:
            console.print(
                "[bold green]matrix agreement: every observed outcome is the cell the policy file gives[/bold green]"
            )
        else:
            console.print(
                f"[bold red]matrix DISAGREEMENT: {counts[DISAGREE]} pair(s) contradict the policy file[/bold red]"
            )

        self.time_travel(console)
        self.change_feed(console)
        return report

    def time_travel(self, console: Console) -> None:
        from rich.table import Table

        t = self.table
        seed = self.marks["seed"]
        self.narrator.heading(
            f"time travel: the table as of v{seed.id_version} ({fmt_time(seed.time_version)}) and now"
        )
        with self.narrator.working("reading with Spark"):
            then = _counts(t.read(version=seed.id_version))
            as_of = _counts(t.read(timestamp=seed.time_version))
            now = _counts(t.read())
        grid = Table(header_style="bold")
        grid.add_column("partition")
        grid.add_column(f"rows at v{seed.id_version}", justify="right")
        grid.add_column(f"rows as of {fmt_time(seed.time_version)}", justify="right")
        grid.add_column(f"rows at head v{t.version}", justify="right")
        for dt in sorted(set(then) | set(now)):
            grid.add_row(f"dt={dt}", str(then.get(dt, 0)), str(as_of.get(dt, 0)), str(now.get(dt, 0)))
        console.print(grid)
        same = "the same snapshot" if then == as_of else "[red]a different snapshot[/red]"
        console.print(
            f"read(version={seed.id_version}) and read(timestamp=...) give {same}; old files stay until vacuum"
        )

    def change_feed(self, console: Console) -> None:
        from pyspark.sql import functions as F
        from rich.table import Table

        t = self.table
        start = self.marks["update"]
        logical = [c for c in t.catalog.commits(TABLE, start.id_version, None) if c.time_version is not None]
        end = logical[-1]
        self.narrator.heading(
            f"change feed between time versions {fmt_time(start.time_version)} and {fmt_time(end.time_version)}"
        )
        with self.narrator.working("reading the change feed with Spark"):
            feed = t.changes(start.time_version, end.time_version, by="time")
            grouped = (
                feed.groupBy("_commit_version", "_change_type", "dt")
                .agg(F.count(F.lit(1)).alias("rows"))
                .orderBy("_commit_version", "_change_type", "dt")
                .collect()
            )
        operations = {
            c.id_version: c for c in t.catalog.commits(TABLE, start.id_version, end.id_version, include_rewrites=True)
        }
        grid = Table(header_style="bold")
        for name in ("_commit_version", "operation", "time version", "_change_type", "dt", "rows"):
            grid.add_column(name, justify="right" if name in ("_commit_version", "rows") else "left")
        for row in grouped:
            commit = operations[row["_commit_version"]]
            grid.add_row(
                str(row["_commit_version"]),
                commit.operation.value,
                fmt_time(commit.time_version),
                row["_change_type"],
                row["dt"] or fmt_scope(commit.partitions),
                str(row["rows"]),
            )
        console.print(grid)
        skipped = [c for c in operations.values() if c.time_version is None]
        console.print(
            f"{len(grouped)} groups from {len({r['_commit_version'] for r in grouped})} logical commits; "
            f"{len(skipped)} compaction/clustering commits in the range changed no data and contribute no rows"
        )


def _counts(frame: Any) -> dict[str, int]:
    return {row["dt"]: row["count"] for row in frame.groupBy("dt").count().collect()}


def rejected(exc: Any) -> str:
    """``rejected CONFLICT_LATER_FAILS (vs v6)`` for a ``CommitConflictError``."""
    versus = f" (vs txn {exc.conflicting_txn_id[:8]} at v{exc.conflicting_version})" if exc.conflicting_txn_id else ""
    return f"[red]rejected {exc.reason}[/red]{versus}"


def conflict_table(report: Report) -> Any:
    """One row per (earlier, later) class pair that occurred: matrix cell, observed outcomes, verdict."""
    from rich.table import Table

    grid = Table(header_style="bold")
    for name in ("earlier", "later", "times", "matrix cell", "observed", "instances (later vs earlier)", "verdict"):
        grid.add_column(name, justify="right" if name == "times" else "left")
    for earlier, later, cell, pairs in report.by_cell():
        verdicts = sorted({p.verdict for p in pairs})
        verdict = DISAGREE if DISAGREE in verdicts else "/".join(verdicts)
        style = "red" if verdict == DISAGREE else "green" if verdict == AGREE else "yellow"
        instances = ", ".join(
            f"{_label(p.later)} vs v{p.earlier.id_version} {p.earlier.operation.value if p.earlier.operation else '?'}"
            for p in pairs[:3]
        ) + (" ..." if len(pairs) > 3 else "")
        grid.add_row(
            earlier.name,
            later.name,
            str(len(pairs)),
            cell.value,
            "; ".join(sorted({p.observed for p in pairs})),
            instances,
            f"[{style}]{verdict}[/{style}]",
        )
    return grid


def _label(txn: Any) -> str:
    op = txn.operation.value if txn.operation else "?"
    if txn.accepted:
        return f"v{txn.id_version} {op}"
    return f"{op} {txn.txn_id[:6]} (read v{txn.read_version})"


class JavaMissingError(OrdoError):
    """Raised by ``ordo demo`` when no Java runtime for Spark can be found."""


def _check_java() -> None:
    import os
    import shutil

    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists()):
        raise JavaMissingError(
            "Spark needs Java 17 or newer and none was found: install it (Debian/Ubuntu: apt-get install "
            "openjdk-17-jre-headless; macOS: brew install openjdk@17) and put java on PATH or set JAVA_HOME"
        )


def run_demo(console: Console | None = None, broker: str = "kafka") -> int:
    """Run the whole demo on ``broker`` (``kafka`` or ``tansu``); returns the exit code (0 when every concurrent pair
    agreed with the matrix)."""
    from ordo.services.up import EmbeddedStack
    from ordo.spark import local_spark_session

    _check_java()
    console = console or make_console()
    narrator = Narrator(console)
    console.rule("[bold]ordo demo[/bold]: concurrent Spark writers, one Kafka commit log", align="left")
    with tempfile.TemporaryDirectory(prefix="ordo-demo-") as tmp:
        workdir = Path(tmp)
        # the table service follows `clicks` only: the story of `events` commits its own compactions in a fixed order
        stack = EmbeddedStack(
            workdir / "stack",
            topic_prefix="demo",
            echo=narrator.say,
            compactor=True,
            compactor_args=("--tables", SERVICE_TABLE, "--interval", "2"),
            broker=broker,
        )
        broker_name = "Apache Kafka (1 node, KRaft)" if broker == "kafka" else "Tansu (in memory only)"
        failure: list[BaseException] = []

        def start_stack() -> None:
            try:
                started = time.monotonic()
                stack.start_broker()
                narrator.say(f"{broker_name} ready in {time.monotonic() - started:.1f} s")
                stack.start_services()
            except BaseException as exc:  # re-raised on the main thread
                failure.append(exc)

        # The broker (a JVM for Kafka), then the arbiter and consumer processes, start beside the Spark JVM:
        # each takes seconds, and the demo needs Spark first.
        starter = threading.Thread(target=start_stack, name="ordo-demo-stack")
        starter.start()
        try:
            with narrator.working(f"starting {broker_name}, the arbiter, the consumer and Spark"):
                from pyspark.sql import SparkSession

                existing = SparkSession.getActiveSession()
                spark = local_spark_session("ordo-demo", cores=2, warehouse=str(workdir / "spark-warehouse"))
                narrator.say(f"Spark {spark.version} ready (local mode, 2 cores)")
                starter.join()
            if failure:
                raise failure[0]
            assert stack.settings is not None and stack.arbiter is not None and stack.consumer is not None
            narrator.say(
                f"stack up: {broker_name} at {stack.settings.bootstrap_servers}, "
                f"arbiter pid {stack.arbiter.pid}, consumer pid {stack.consumer.pid} at {stack.url}, "
                f"compactor pid {stack.compactor.pid if stack.compactor else '-'}"
            )
            narrator.say(f"catalog {stack.catalog_path}, warehouse {stack.warehouse}")
            demo = Demo(spark, stack.settings, narrator, workdir, stack.compactor)
            try:
                demo.run()
                report = demo.report(console)
            finally:
                demo.close()
                if existing is None:
                    spark.stop()
        finally:
            starter.join()
            with narrator.working("stopping the stack"):
                stack.stop()
    narrator.heading("done")
    verdict = "every concurrent pair agreed with the matrix" if report.agrees else "MATRIX DISAGREEMENT"
    console.print(f"demo finished in {time.monotonic() - narrator.started:.0f} s: {verdict}; stack stopped")
    console.print("next: `ordo up` runs the stack for your own jobs; docs/api.md shows the Python API")
    return 0 if report.agrees else 1


__all__ = ["Demo", "conflict_table", "run_demo"]
