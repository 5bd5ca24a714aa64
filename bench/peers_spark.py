"""Side by side on Spark (issue 24): ordo, Delta Lake (delta-spark) and Apache Iceberg.

``make bench-peers-spark`` builds ``.venv-bench-spark`` (PySpark pinned to ordo's minimum, 4.2.0, the newest
Spark that delta-spark 4.4 supports, and ``delta-spark`` of the same release as its jar) and
``.venv-bench-iceberg`` (PySpark 4.1.4: below), fetches the jars with ``tools/spark_lakes.py`` and runs
``python -m bench peers-spark``.

One local Spark session (``local[2]``, ordo's ``local_spark_session`` settings) hosts ordo and Delta, so they
run on the same Spark, JVM, data and machine. No Iceberg runtime runs on Spark 4.2 (the newest, 1.12.0, is
built for Spark 4.1 and fails on 4.2's ``View``), so Iceberg runs in a child process (``_Child``) with a
session of the same settings on the newest PySpark 4.1 (``.venv-bench-iceberg``; ``ORDO_ICEBERG_PYTHON``
overrides), driven operation by operation from this process: same machine, same data generators, the
systems interleaved round by round (``bench.common.interleave``), but Iceberg on Spark 4.1.4 and in its own
JVM. When ``ORDO_ICEBERG_RUNTIME`` names a runtime built for this process's Spark, Iceberg joins the one
session instead. Every operation of every system goes through its host (``_Local`` or ``_Child``: ``OPS``).

* ordo: ``producer.DeltaTable.insert_into(df, retries=...)`` on the embedded stack (Tansu broker,
  ``ordo arbiter``, ``ordo consumer``; ``bench.common.stack``); a CONFLICT_LATER_FAILS rejection on a
  shared partition is retried at the metadata level by ``insert_into`` itself (its documented path).
* Delta Lake: ``df.write.format("delta").mode("append").save(path)`` on a table at a local path,
  partitioned by ``p``, default table properties (WriteSerializable; blind appends never conflict, and
  Delta retries a lost race for the next log entry itself); a ``ConcurrentModificationException`` that
  still reaches the writer is retried by writing again and counted.
* Apache Iceberg: ``df.writeTo("ice.db.t").append()`` on the JDBC catalog (``SparkCatalog``, ``type=jdbc``,
  a SQLite file through ``org.xerial:sqlite-jdbc``: a commit is an atomic swap of the metadata pointer in the
  database, safe for concurrent writers, which the Hadoop catalog is not), format version 2,
  ``commit.retry.num-retries=100`` (documented default 4; raised because 8 writers on one table is exactly
  the case it is for); a ``CommitFailedException`` that still reaches the writer is retried by writing again
  and counted. Iceberg's own retries inside a commit are not visible to the benchmark. UPDATE, DELETE and
  MERGE are merge-on-read (delete files) on workload 3's table, as Iceberg recommends for small frequent
  changes; copy-on-write (its default) on workloads 1 and 4's, because its changelog scan refuses delete
  files ("Delete files are currently not supported in changelog scans"). Isolation: the default,
  serializable. The session probes the runtime once; when it cannot run, every Iceberg figure is recorded as
  an error with the reason.

The workloads, numbered as in issue 24 (``BENCH_PEERS_SPARK_WORKLOADS=seeds,commits,reads,history`` runs some
of them; the figures of the others are kept from the previous ``bench/results.json``, with the date they were
measured):

Workload 1, the seeds' scenario (``seeds``): one keyed table, 4 partitions, loaded with a base; for a fixed
time (quick 60 s, full 300 s) a micro-batch of upserts every second (ordo: ``producer.streaming.BatchCommitter``,
the ``foreachBatch`` committer, with its default 5 metadata-level retries; Delta and Iceberg: ``MERGE`` from
the batch, retried up to 5 times on a conflict), while the table service compacts (ordo: the ``ordo compactor``
service's ``Compactor`` in this session, a round every 3 s, the table's documented defaults; Delta: ``OPTIMIZE
... WHERE p = k`` of each partition in turn, a round every 3 s; Iceberg: ``rewrite_data_files`` likewise) and
an UPDATE job
and a DELETE job each hit a random partition every 2 s, retrying a conflict up to 5 times as their users do.
Every job is a thread of the system's Spark session (2 cores: one driver per job does not fit). The run reports
batches committed, retried and failed, table-service commits and failures, batch jobs retried and failed,
the end-to-end latency of a batch (from its scheduled second to its commit returning), files per partition
at the end, a full read at the end, and whether the change feed of the run, folded over the table as it was
at the start, gives the table at the end.

Workload 2, commit cost alone (``commits``): closed-loop single-row appends (``spark.range(1)`` projected to
one row ``(id, v, p)``: no Python worker, the same plan for every system) by 1 writer, 8 writers each on its
own partition, and 8 writers on one shared partition. The writers are threads of the system's session (not
processes: 8 Spark drivers do not fit in 2 cores and 24 GiB beside the stack, and concurrent jobs of one
session is how Spark users run concurrent writes from one application). Each writer commits once to warm
up, then all start together and commit until the deadline; a commit's latency runs from building its
DataFrame to the write returning, retries included. A fresh table per system, scenario and round.

Workload 3, reads (``reads``): a table of N rows (quick 100,000, full 1,000,000; ``id``, ``v``, 4 partitions
``p``) written in one commit, then 100 small upserts of 1% of the keys each with new values: ``insert_into``
on ordo (an upsert by primary key, merged on read), ``MERGE INTO ... WHEN MATCHED UPDATE SET * WHEN NOT
MATCHED INSERT *`` on Delta (deletion vectors on, ``delta.enableDeletionVectors=true``: the documented
setting for small MERGEs, which then mark rows instead of rewriting files) and on Iceberg (merge-on-read:
``write.merge.mode=merge-on-read``). Then each system's full read (every row and column into Spark's
``noop`` sink) and a point read by key (``WHERE id = k``, collected) are timed, uncompacted and again after
its compaction (ordo ``compact("major")``, Delta ``OPTIMIZE``, Iceberg ``rewrite_data_files`` then
``rewrite_position_delete_files``), beside plain Parquet of the same final rows (written once by Spark,
partitioned by ``p``: the floor). Reads alternate between systems, repeated; the median is reported.

Workload 4, time travel and the change feed (``history``): a table of N commits (quick 150, full 1,000) of
10 new rows each, every 10th commit an UPDATE of an earlier commit's 10 rows instead; then the read of
version N-50 (``versionAsOf`` on both ``format("ordo")`` and ``format("delta")``) and the change feed of the
last 100 versions (``readChangeFeed``; Delta with ``delta.enableChangeDataFeed=true``; Iceberg: below), each into the
``noop`` sink, alternating, median of the repeats; the rows each returned are checked against the model of
the commits made.

Iceberg in workloads 1 and 4: time travel is ``VERSION AS OF`` the version's snapshot (snapshot k of the
current one's ancestry is version k, as Delta numbers commits after the table's creation); the change feed is
``CALL system.create_changelog_view`` over the versions' snapshots with ``compute_updates`` by ``id``, its
change types and snapshots put in Delta's terms (``INSERT`` -> ``insert``, ``UPDATE_BEFORE`` ->
``update_preimage``, ..., ``_commit_version``); the table service is ``rewrite_data_files`` of one partition
(``where``) at its defaults, a round every 3 s; the conflicts retried are ``CommitFailedException`` and
``ValidationException``.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, Result, interleave, machine, median, percentile, pick, ratio, stack

BENCHMARK = "peers on Spark"
SYSTEMS = ("ordo", "delta", "iceberg")
SCENARIOS = {  # name -> (writers, shared partition)
    "1 writer": (1, False),
    "8 writers, own partitions": (8, False),
    "8 writers, one partition": (8, True),
}
SCHEMA = "id BIGINT, v STRING, p STRING"
ICEBERG_RETRIES = 100
ORDO_RETRIES = 1000
PLOT = ROOT / "docs" / "peers_spark.png"


def _session(work: Path, lakes: tuple[str, ...]) -> Any:
    """One local Spark session with ordo's settings and the extensions and catalogs of ``lakes`` (of SYSTEMS)."""
    from pyspark.sql import SparkSession

    sys.path.insert(0, str(ROOT / "tools"))
    from spark_lakes import spark_config

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("ordo-bench-peers-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "3g")
        .config("spark.sql.parquet.compression.codec", "zstd")
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={work / 'derby'}")
        .config("spark.sql.warehouse.dir", str(work / "spark-warehouse"))
    )
    if "ordo" in lakes:
        # ordo's documented setting for Python workers (``ordo.spark.session.PYTHON_WORKER_SETTINGS``, what
        # ``local_spark_session`` sets); Delta and Iceberg start no Python worker, so it leaves them as they are.
        from ordo.spark.session import PYTHON_WORKER_SETTINGS

        for key, value in PYTHON_WORKER_SETTINGS.items():
            builder = builder.config(key, value)
    extensions = []
    if "delta" in lakes:
        extensions.append("io.delta.sql.DeltaSparkSessionExtension")
        builder = builder.config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        # Delta rebuilds a snapshot's state (every read, every 10th commit's checkpoint) in this many tasks;
        # the default (50) is for clusters: on local[2] it made a checkpointing append take ~18 s and a read
        # of a 15-commit table ~10 s (2 tasks: 1.3 s and 0.8 s, same machine), so it is set to the cores.
        builder = builder.config("spark.databricks.delta.snapshotPartitions", "2")
    if "iceberg" in lakes:
        extensions.append("org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        # The JDBC catalog (a SQLite file): its commit is an atomic compare-and-swap of the table's metadata
        # pointer in the database, safe for concurrent writers (the Hadoop catalog's rename is not).
        catalog = {
            "": "org.apache.iceberg.spark.SparkCatalog",
            ".type": "jdbc",
            ".uri": f"jdbc:sqlite:{work / 'iceberg-catalog.db'}",
            ".warehouse": str(work / "iceberg"),
        }
        for key, value in catalog.items():
            builder = builder.config(f"spark.sql.catalog.ice{key}", value)
    if extensions:
        builder = builder.config("spark.sql.extensions", ",".join(extensions))
    for key, value in spark_config(tuple(lake for lake in lakes if lake != "ordo")).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if "ordo" in lakes:
        from ordo.spark import register

        register(spark)
    return spark


def _row(spark: Any, key: int, partition: str) -> Any:
    return spark.range(1).selectExpr(f"CAST({key} AS BIGINT) AS id", f"'v{key}' AS v", f"'{partition}' AS p")


class _Table:
    """One system's table: ``append(df)`` commits one append and returns the retries it took."""

    def __init__(self, system: str, spark: Any, work: Path, settings: Any, n: int) -> None:
        self.system = system
        self.spark = spark
        if system == "ordo":
            from ordo.producer.table import DeltaTable

            self.ordo = DeltaTable.create(
                spark, f"peers_spark_{n}", schema=SCHEMA, primary_key="id", partitioned_by="p", settings=settings
            )
        elif system == "delta":
            self.path = str(work / "delta" / f"t{n}")
            spark.sql(f"CREATE TABLE delta.`{self.path}` ({SCHEMA}) USING delta PARTITIONED BY (p)")
        else:
            self.name = f"ice.db.t{n}"
            spark.sql(
                f"CREATE TABLE {self.name} ({SCHEMA}) USING iceberg PARTITIONED BY (p) "
                f"TBLPROPERTIES ('format-version'='2', 'commit.retry.num-retries'='{ICEBERG_RETRIES}')"
            )

    def append(self, df: Any) -> int:
        if self.system == "ordo":
            result = self.ordo.insert_into(df, retries=ORDO_RETRIES)
            return (result.attempts - 1) if result is not None else 0
        retries = 0
        while True:
            try:
                if self.system == "delta":
                    df.write.format("delta").mode("append").save(self.path)
                else:
                    df.writeTo(self.name).append()
                return retries
            except Exception as exc:  # the JVM's exception class is in the message
                text = str(exc)
                if "ConcurrentAppend" in text or "ConcurrentModification" in text or "CommitFailedException" in text:
                    retries += 1
                    continue
                raise


def _run_writers(spark: Any, table: _Table, writers: int, shared: bool, duration: float) -> dict[str, Any]:
    """``writers`` threads appending one row each commit; warm-up, common start, closed loop to the deadline."""
    stop_at: list[float] = []
    barrier = threading.Barrier(writers + 1, action=lambda: stop_at.append(time.monotonic() + duration))
    stats: list[dict[str, Any]] = [{"latencies": [], "retries": 0} for _ in range(writers)]
    errors: list[str] = []

    def writer(index: int) -> None:
        partition = "shared" if shared else f"w{index}"
        key = index * 10_000_000
        try:
            table.append(_row(spark, key, partition))  # warm-up
        except Exception as exc:
            errors.append(f"writer {index} warm-up: {type(exc).__name__}: {str(exc)[:1500]}")
        try:
            barrier.wait(timeout=600)
        except threading.BrokenBarrierError:
            return
        if errors:
            return
        mine = stats[index]
        while time.monotonic() < stop_at[0]:
            key += 1
            started = time.perf_counter()
            try:
                mine["retries"] += table.append(_row(spark, key, partition))
            except Exception as exc:
                errors.append(f"writer {index}: {type(exc).__name__}: {str(exc)[:1500]}")
                return
            mine["latencies"].append(time.perf_counter() - started)

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(writers)]
    for thread in threads:
        thread.start()
    barrier.wait(timeout=600)
    started = time.monotonic()
    for thread in threads:
        thread.join(duration + 600)
    elapsed = max(duration, time.monotonic() - started)
    if errors:
        raise RuntimeError("; ".join(errors[:2]))
    latencies = [x for s in stats for x in s["latencies"]]
    return {
        "commits": len(latencies),
        "rate": len(latencies) / elapsed,
        "latencies": latencies,
        "retries": sum(s["retries"] for s in stats),
    }


# --------------------------------------------------------------------------- where each system runs

ICEBERG_PYTHON = ROOT / ".venv-bench-iceberg" / "bin" / "python"  # make bench-peers-spark builds it (PySpark 4.1)
_REPLY = "@@peers-spark-child "  # marks the child's replies on its stdout (Spark and Ivy print there too)


class _Context:
    """A Spark session and the tables the operations below made in it (by (system, name))."""

    def __init__(self, spark: Any, work: Path, settings: Any) -> None:
        self.spark, self.work, self.settings = spark, work, settings
        self.tables: dict[tuple[str, str], _ReadTable] = {}
        self.counter = iter(range(1_000_000))


def _op_hello(ctx: _Context) -> dict[str, str]:
    import pyspark

    return {"spark": pyspark.__version__, "packages": ctx.spark.conf.get("spark.jars.packages")}


def _op_probe(ctx: _Context) -> str | None:
    """None when the Iceberg runtime works on this Spark, else the JVM's reason."""
    try:
        ctx.spark.sql(f"CREATE TABLE ice.db.probe ({SCHEMA}) USING iceberg PARTITIONED BY (p)")
        _row(ctx.spark, 0, "x").writeTo("ice.db.probe").append()
        ctx.spark.sql("DROP TABLE ice.db.probe")
        return None
    except Exception as exc:
        import pyspark

        text = str(exc).strip().splitlines()
        return f"Iceberg's probe failed on Spark {pyspark.__version__}: {' '.join(text[:3])[:600]}"


def _op_commits(ctx: _Context, system: str, writers: int, shared: bool, duration: float) -> dict[str, Any]:
    """Workload 2's run on a fresh table."""
    table = _Table(system, ctx.spark, ctx.work, ctx.settings, next(ctx.counter))
    try:
        return _run_writers(ctx.spark, table, writers, shared, duration)
    except Exception as exc:
        return {"error": str(exc)[:2000]}


def _op_reads_build(ctx: _Context, system: str, rows: int, upserts: int, per_upsert: int) -> dict[str, Any]:
    """Workload 3's table: ``rows`` in one commit, then ``upserts`` upserts of ``per_upsert`` keys each."""
    started = time.perf_counter()
    table = ctx.tables[system, "reads"] = _ReadTable(system, ctx.spark, ctx.work, ctx.settings)
    table.load(_frame(ctx.spark, 0, rows, "base"))
    for i in range(upserts):
        table.upsert(_frame(ctx.spark, (i * per_upsert * 7) % rows, per_upsert, f"u{i}"))
    return {"build_s": round(time.perf_counter() - started, 1), "count": table.read().count()}


def _op_history_build(ctx: _Context, system: str, commits: int) -> dict[str, Any]:
    """Workload 4's table of ``commits`` commits, and what its head, version N-50 and last 100 versions hold."""
    started = time.perf_counter()
    table = ctx.tables[system, "history"] = _ReadTable(system, ctx.spark, ctx.work, ctx.settings, "history", cdf=True)
    for i in range(commits):
        if i % 10 == 9:
            low = (i - 5) * HISTORY_ROWS
            table.update(f"'u{i}'", f"id >= {low} AND id < {low + HISTORY_ROWS}")
        else:
            table.load(_frame(ctx.spark, i * HISTORY_ROWS, HISTORY_ROWS, f"c{i}"))
    build_s = round(time.perf_counter() - started, 1)
    head = table.head()
    feed = table.changes(head - 99, head)
    return {
        "build_s": build_s,
        "head": head,
        "found": {
            "head": head,
            "travel_rows": table.read_at(head - 50).count(),
            "changes": {r[0]: int(r[1]) for r in feed.groupBy("_change_type").count().collect()},
            "versions": feed.select("_commit_version").distinct().count(),
        },
    }


def _op_time(ctx: _Context, system: str, name: str, what: str, *args: Any) -> float:
    """Seconds of one read of table ``name``: ``full``, ``point`` (key), ``travel`` (version), ``changes`` (range)."""
    table = ctx.tables[system, name]
    if what == "full":
        return _noop(table.read())
    if what == "point":
        return _point(table.read(), args[0])
    if what == "travel":
        return _noop(table.read_at(args[0]))
    if what == "changes":
        return _noop(table.changes(args[0], args[1]))
    raise ValueError(f"unknown read {what!r}")


def _op_compact(ctx: _Context, system: str, name: str) -> float:
    started = time.perf_counter()
    ctx.tables[system, name].compact()
    return round(time.perf_counter() - started, 1)


def _op_plain(ctx: _Context, system: str, name: str, path: str) -> None:
    """Write the rows of table ``name`` as plain Parquet at ``path`` (workload 3's floor)."""
    ctx.tables[system, name].read().write.partitionBy("p").parquet(path)


def _op_seeds(ctx: _Context, system: str, seconds: float) -> dict[str, Any]:
    return _seeds_run(system, ctx.spark, ctx.work, ctx.settings, seconds)


OPS: dict[str, Any] = {
    "hello": _op_hello,
    "probe": _op_probe,
    "commits": _op_commits,
    "reads_build": _op_reads_build,
    "history_build": _op_history_build,
    "time": _op_time,
    "compact": _op_compact,
    "plain": _op_plain,
    "seeds": _op_seeds,
}


class _Local:
    """Systems that run in this process's Spark session."""

    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx

    def call(self, op: str, *args: Any) -> Any:
        return OPS[op](self.ctx, *args)

    def close(self) -> None:
        return None


class _Child:
    """Iceberg in a child process on another PySpark (``python -m bench.peers_spark --child WORK``): one
    operation at a time, a JSON line each way."""

    def __init__(self, python: Path, work: Path) -> None:
        import subprocess

        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYSPARK_PYTHON", "PYTHONPATH")}
        env["PYSPARK_PYTHON"] = str(python)
        self.process = subprocess.Popen(
            [str(python), "-m", "bench.peers_spark", "--child", str(work)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lock = threading.Lock()

    def call(self, op: str, *args: Any) -> Any:
        import json

        assert self.process.stdin is not None and self.process.stdout is not None
        with self.lock:
            self.process.stdin.write(json.dumps([op, list(args)]) + "\n")
            self.process.stdin.flush()
            while True:
                line = self.process.stdout.readline()
                if not line:
                    raise RuntimeError(f"the Iceberg child process exited (code {self.process.poll()})")
                if line.startswith(_REPLY):
                    reply = json.loads(line[len(_REPLY) :])
                    break
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["value"]

    def close(self) -> None:
        import subprocess

        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _child(work: Path) -> None:
    """The child's loop: a session with Iceberg only, then one operation per line of stdin."""
    import json

    work.mkdir(parents=True, exist_ok=True)  # its catalog's SQLite file goes here
    ctx = _Context(_session(work, ("iceberg",)), work, None)
    try:
        for line in sys.stdin:
            op, args = json.loads(line)
            try:
                reply = {"value": OPS[op](ctx, *args)}
            except Exception as exc:
                reply = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
            sys.stdout.write(_REPLY + json.dumps(reply) + "\n")
            sys.stdout.flush()
    finally:
        ctx.spark.stop()


def _iceberg_host(local: _Local, work: Path) -> tuple[Any, str | None, dict[str, str]]:
    """Where Iceberg runs: this session when its runtime is built for this Spark, else a child process on the
    PySpark it is built for (``ORDO_ICEBERG_PYTHON``, default .venv-bench-iceberg); the reason when nowhere."""
    import pyspark

    sys.path.insert(0, str(ROOT / "tools"))
    from spark_lakes import iceberg_coordinate, iceberg_spark

    runtime, line = iceberg_coordinate(), iceberg_spark()
    if pyspark.__version__.startswith(line + "."):
        host: Any = local
    else:
        python = Path(os.environ.get("ORDO_ICEBERG_PYTHON") or ICEBERG_PYTHON)
        if not python.exists():
            return None, f"{runtime} needs Spark {line}: no {python} (make bench-peers-spark builds it)", {}
        host = _Child(python, work / "iceberg-child")
    try:
        hello = host.call("hello")
        error = host.call("probe")
    except Exception as exc:
        error = f"the Iceberg session did not start: {type(exc).__name__}: {str(exc)[:600]}"
        hello = {}
    if error is not None:
        host.close()
        return None, error, {}
    return host, None, {"iceberg-runtime": runtime, "iceberg-spark": hello["spark"]}


WORKLOADS = ("seeds", "commits", "reads", "history")  # issue 24's workloads 1-4, in its order
ALL_RUN = ("commits", "reads", "history", "seeds")  # the order they run in (the long scenario last)


def _chosen() -> tuple[str, ...]:
    wanted = os.environ.get("BENCH_PEERS_SPARK_WORKLOADS")
    if not wanted:
        return ALL_RUN
    names = tuple(w.strip() for w in wanted.split(",") if w.strip())
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"BENCH_PEERS_SPARK_WORKLOADS: unknown {unknown}; choose from {WORKLOADS}")
    return tuple(w for w in ALL_RUN if w in names)


def run() -> list[Result]:
    from ordo.producer.table import close_connections

    chosen = _chosen()
    duration = float(os.environ.get("BENCH_PEERS_SPARK_SECONDS") or pick(12.0, 30.0))
    rounds = pick(2, 3)
    work = Path(tempfile.mkdtemp(prefix="ordo-bench-peers-spark-"))
    outcomes: dict[str, dict[str, list[Any]]] = {}
    measured: dict[str, Any] = {}
    versions: dict[str, str] = {}
    with stack("peers-spark", prefix="pspark") as bench_stack:
        sys.path.insert(0, str(ROOT / "tools"))
        import pyspark
        from spark_lakes import iceberg_spark

        here = ("ordo", "delta") + (("iceberg",) if pyspark.__version__.startswith(iceberg_spark() + ".") else ())
        spark = _session(work, here)
        local = _Local(_Context(spark, work, bench_stack.settings))
        iceberg = None
        try:
            from importlib import metadata

            iceberg, iceberg_error, iceberg_versions = _iceberg_host(local, work)
            print(f"peers-spark: Iceberg {iceberg_versions or iceberg_error}", flush=True)
            versions = {
                "spark": pyspark.__version__,
                "delta-spark": metadata.version("delta-spark"),
                **iceberg_versions,
            }
            hosts = {"ordo": local, "delta": local, **({"iceberg": iceberg} if iceberg is not None else {})}
            if "commits" in chosen:
                for scenario, (writers, shared) in SCENARIOS.items():

                    def side(system: str, writers: int = writers, shared: bool = shared) -> Any:
                        return lambda _round: hosts[system].call("commits", system, writers, shared, duration)

                    print(f"peers-spark: {scenario}", flush=True)
                    outcomes[scenario] = interleave({s: side(s) for s in hosts}, rounds)
                    if iceberg_error is not None:
                        outcomes[scenario]["iceberg"] = [{"error": iceberg_error}]
            later = {"reads": _reads, "history": _history, "seeds": _seeds}
            for name in chosen:
                if name == "commits":
                    continue
                print(f"peers-spark: {name}", flush=True)
                try:
                    measured[name] = later[name](hosts, spark, work)
                except Exception as exc:
                    measured[name] = {"error": f"{type(exc).__name__}: {str(exc)[:1500]}"}
                if iceberg_error is not None:
                    measured[name].setdefault("errors", {})["iceberg"] = iceberg_error
        finally:
            if iceberg is not None:
                iceberg.close()
            spark.stop()
            close_connections()
    shutil.rmtree(work, ignore_errors=True)
    results: list[Result] = []
    for name in WORKLOADS:
        if name not in chosen:
            results.extend(_kept(name))
        elif name == "commits":
            results.extend(_results(outcomes, versions, duration, rounds))
        else:
            results.extend(RESULTS_OF[name](measured[name], versions))
    _plot(results)
    return results


def _workload_of(figure: str) -> str:
    if "commits/s" in figure or "commit latency" in figure:
        return "commits"
    if figure.startswith(("full read,", "point read,")) or figure.startswith("reads after"):
        return "reads"
    if figure.startswith(("time travel", "change feed")):
        return "history"
    return "seeds"


def _kept(name: str) -> list[Result]:
    """The previous run's figures of workload ``name`` (from bench/results.json), marked with when they were made."""
    import json

    try:
        document = json.loads((ROOT / "bench" / "results.json").read_text())
    except (OSError, ValueError):
        return []
    for entry in document.get("benchmarks", []):
        if entry.get("module") != "bench.peers_spark":
            continue
        out = []
        for figure in entry.get("figures", []):
            if figure.get("status") == "pending" or _workload_of(figure["figure"]) != name:
                continue
            samples = dict(figure.get("samples") or {})
            samples.setdefault("kept_from", entry.get("measured_at"))
            samples.setdefault("kept_load_average", entry.get("machine", {}).get("load_average"))
            # This run's machine: bench/__main__ files the entry under its first figure's, and a kept one may be first.
            out.append(Result(**{**figure, "samples": samples, "machine": machine()}))
        return out
    return []


def _versus(
    figure: str,
    unit: str,
    value: float | None,
    peers: dict[str, float | None],
    *,
    lower_is_better: bool,
    target: str | None = None,
    met: Any = None,
    samples: dict[str, Any] | None = None,
    notes: str = "",
) -> Result:
    """One figure of ordo's against the better peer's (``met``: ratio -> bool, for ``target``)."""
    known = {s: v for s, v in peers.items() if v is not None}
    best = (min if lower_is_better else max)(known, key=lambda s: known[s]) if known else None
    peer_value = known[best] if best else None
    quotient = ratio(value, peer_value)
    return Result(
        BENCHMARK,
        figure,
        unit,
        value,
        peer=best,
        peer_value=peer_value,
        ratio=quotient,
        target=target,
        met=met(quotient) if (met is not None and quotient is not None) else None,
        status="ok" if value is not None else "error",
        samples={**(samples or {}), "values": {"ordo": value, **peers}},
        notes=notes,
        machine=machine(),
    )


def _error(figure: str, found: dict[str, Any]) -> list[Result]:
    why = found.get("error") or "; ".join(f"{k}: {v}" for k, v in found.get("errors", {}).items())
    return [Result(BENCHMARK, figure, "", None, status="error", notes=why, machine=machine())]


def _notes(found: dict[str, Any]) -> str:
    return "; ".join(f"{k}: {v}" for k, v in found.get("errors", {}).items())


def _summary(runs: list[Any]) -> dict[str, Any]:
    errors = [r["error"] for r in runs if "error" in r]
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"error": errors[0] if errors else "no run"}
    latencies = [x * 1000 for r in good for x in r["latencies"]]
    return {
        "commits_per_s": round(median(r["rate"] for r in good), 2),
        "rates": [round(r["rate"], 2) for r in good],
        "commits": [r["commits"] for r in good],
        "p50_ms": round(percentile(latencies, 50), 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 99), 1) if latencies else None,
        "retries": [r["retries"] for r in good],
        "errors": errors,
    }


def _results(
    outcomes: dict[str, dict[str, list[Any]]], versions: dict[str, str], duration: float, rounds: int
) -> list[Result]:
    results: list[Result] = []
    for scenario, runs in outcomes.items():
        summary = {system: _summary(r) for system, r in runs.items()}
        ours = summary.get("ordo", {})
        peers = {s: v for s, v in summary.items() if s != "ordo" and "error" not in v}
        common = {"versions": versions, "duration_s": duration, "rounds": rounds, "systems": summary}
        notes = "; ".join(f"{s}: {v['error']}" for s, v in summary.items() if "error" in v)
        many = scenario.startswith("8")
        results.append(
            _versus(
                f"{scenario}: single-row commits/s",
                "commits/s",
                ours.get("commits_per_s"),
                {s: v["commits_per_s"] for s, v in peers.items()},
                lower_is_better=False,
                target=">= 5x the better peer (8 writers)" if many else None,
                met=(lambda q: q >= 5) if many else None,
                samples=common,
                notes=notes,
            )
        )
        for q in ("p50", "p99"):
            key = f"{q}_ms"
            results.append(
                _versus(
                    f"{scenario}: {q} commit latency",
                    "ms",
                    ours.get(key),
                    {s: v[key] for s, v in peers.items()},
                    lower_is_better=True,
                )
            )
    return results


def _bars(ax: Any, groups: list[tuple[str, dict[str, Any]]], systems: list[str], label: str, fmt: str) -> None:
    """Grouped bars: one group per (name, {system: value or error text}), one bar per system."""
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        xs = [j + i * width for j in range(len(groups))]
        values = [g[1].get(system) for g in groups]
        heights = [v if isinstance(v, int | float) else 0 for v in values]
        ax.bar(xs, heights, width, label=system)
        for x, h, v in zip(xs, heights, values, strict=True):
            text = "failed" if isinstance(v, str) else ("" if v is None else fmt.format(h))
            ax.text(x, h, text, ha="center", va="bottom", fontsize=7, rotation=90 if isinstance(v, str) else 0)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(groups))])
    ax.set_xticklabels([textwrap.fill(g[0], 24) for g in groups], fontsize=7)
    ax.set_ylabel(label)
    ax.legend(fontsize=7)


def _plot(results: list[Result]) -> Path | None:
    """docs/peers_spark.png: commits/s (workload 2), read times (workloads 3, 4, 1's final read) and the seeds'
    scenario's counts (workload 1), per system."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rates = [r for r in results if r.figure.endswith("commits/s") and r.samples.get("systems")]
    panels: list[tuple[str, list[tuple[str, dict[str, Any]]], str, str]] = []
    if rates:
        groups = [
            (
                r.figure.split(":")[0],
                {s: v.get("commits_per_s", v.get("error")) for s, v in r.samples["systems"].items()},
            )
            for r in rates
        ]
        load = rates[0].samples.get("kept_load_average") or rates[0].machine.get("load_average")
        title = f"workload 2: closed-loop single-row appends (load average {load})"
        panels.append((title, groups, "commits/s", "{:.1f}"))

    def pair(r: Result) -> dict[str, Any]:
        """Every system's value (a figure kept from before per-system values were recorded: ordo's and the peer's)."""
        return r.samples.get("values") or {"ordo": r.value, **({r.peer: r.peer_value} if r.peer else {})}

    timed = [r for r in results if r.unit == "s" and r.status == "ok" and r.value is not None]
    if timed:
        groups = [(r.figure.replace(" after 100 upserts", ""), pair(r)) for r in timed]
        panels.append(("reads: workloads 3, 4 and 1's last read", groups, "seconds (lower is better)", "{:.2f}"))
    seeds = [r for r in results if r.figure.startswith("seeds' scenario") and r.unit in ("batches", "commits", "jobs")]
    if seeds:
        groups = [(r.figure.split(": ", 1)[1], pair(r)) for r in seeds]
        panels.append((seeds[0].figure.split(":")[0], groups, "count", "{:.0f}"))
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3.8 * len(panels)), squeeze=False)
    for ax, (title, groups, label, fmt) in zip(axes[:, 0], panels, strict=True):
        _bars(ax, groups, list(SYSTEMS), label, fmt)
        note = "" if "load" in title else " (loaded machine: each run's load average is in bench/results.json)"
        ax.set_title(title + note, fontsize=9)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=100)
    plt.close(fig)
    return PLOT


# --------------------------------------------------------------------------- workload 3: reads


def _noop(df: Any) -> float:
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def _point(df: Any, key: int) -> float:
    started = time.perf_counter()
    rows = df.where(f"id = {key}").collect()
    elapsed = time.perf_counter() - started
    if len(rows) != 1:
        raise RuntimeError(f"point read of id {key} found {len(rows)} rows")
    return elapsed


class _ReadTable:
    """One system's keyed table (``id``, ``v``, partitions ``p``): load, upsert, compact, read, and for workloads
    1 and 4 UPDATE, DELETE, time travel, the change feed and the files per partition."""

    def __init__(
        self,
        system: str,
        spark: Any,
        work: Path,
        settings: Any,
        name: str = "reads",
        *,
        cdf: bool = False,
        location: str | None = None,
    ) -> None:
        """``location``: where ordo's or Delta's table lives (ordo: the catalog's default; Delta: under ``work``)."""
        self.system, self.spark, self.settings, self.table_name = system, spark, settings, name
        if system == "ordo":
            from ordo.producer.table import DeltaTable

            self.ordo = DeltaTable.create(
                spark, f"peers_spark_{name}", schema=SCHEMA, primary_key="id", partitioned_by="p",
                location=location, settings=settings,
            )  # fmt: skip
        elif system == "delta":
            self.path = location or str(work / "delta" / name)
            cdf_property = ", 'delta.enableChangeDataFeed'='true'" if cdf else ""
            spark.sql(
                f"CREATE TABLE delta.`{self.path}` ({SCHEMA}) USING delta PARTITIONED BY (p) "
                f"TBLPROPERTIES ('delta.enableDeletionVectors'='true'{cdf_property})"
            )
        else:
            # Merge-on-read (delete files) for small upserts, as Iceberg documents; but its changelog scan refuses
            # delete files, so the tables whose change feed is read (workloads 1, 4) keep copy-on-write, the default.
            mode = "copy-on-write" if cdf else "merge-on-read"
            self.name = f"ice.db.{name}"
            spark.sql(
                f"CREATE TABLE {self.name} ({SCHEMA}) USING iceberg PARTITIONED BY (p) TBLPROPERTIES "
                f"('format-version'='2', 'commit.retry.num-retries'='{ICEBERG_RETRIES}', "
                + ", ".join(f"'write.{op}.mode'='{mode}'" for op in ("merge", "update", "delete"))
                + ")"
            )

    def load(self, df: Any) -> None:
        if self.system == "ordo":
            self.ordo.insert_into(df)
        elif self.system == "delta":
            df.write.format("delta").mode("append").save(self.path)
        else:
            df.writeTo(self.name).append()

    def upsert(self, df: Any) -> None:
        if self.system == "ordo":
            self.ordo.insert_into(df)
            return
        view = f"peers_spark_source_{threading.get_ident()}"
        df.createOrReplaceTempView(view)
        target = f"delta.`{self.path}`" if self.system == "delta" else self.name
        self.spark.sql(
            f"MERGE INTO {target} t USING {view} s ON t.id = s.id AND t.p = s.p "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )

    def update(self, assignment: str, where: str) -> None:
        """UPDATE ``SET v = assignment WHERE where``."""
        if self.system == "ordo":
            self.ordo.update({"v": assignment}, where=where)
        else:
            self.spark.sql(f"UPDATE {self._sql_name()} SET v = {assignment} WHERE {where}")

    def delete(self, where: str) -> None:
        if self.system == "ordo":
            self.ordo.delete(where)
        else:
            self.spark.sql(f"DELETE FROM {self._sql_name()} WHERE {where}")

    def compact_partition(self, partition: str) -> bool:
        """Delta's OPTIMIZE, Iceberg's ``rewrite_data_files`` (its defaults), of one partition (ordo's compaction
        is its service's to plan: ``ordo.services.compactor``); False when it found nothing to rewrite (no commit)."""
        if self.system == "iceberg":
            where = f'p = "{partition}"'
            row = self.spark.sql(f"CALL ice.system.rewrite_data_files(table => '{self._ice()}', where => '{where}')")
            return int(row.collect()[0]["rewritten_data_files_count"]) > 0
        metrics = self.spark.sql(f"OPTIMIZE {self._sql_name()} WHERE p = '{partition}'").collect()[0]["metrics"]
        return int(metrics["numFilesRemoved"]) > 0

    def _ice(self) -> str:
        """The Iceberg table's name in its catalog (``db.name``), as its procedures take it."""
        return self.name.removeprefix("ice.")

    def _snapshots(self) -> list[int]:
        """Iceberg: the snapshot ids from the first to the current one; snapshot ``k`` is version ``k``."""
        rows = self.spark.sql(f"SELECT snapshot_id, parent_id FROM {self.name}.snapshots").collect()
        return snapshot_chain([(r[0], r[1]) for r in rows])

    def _sql_name(self) -> str:
        if self.system == "iceberg":
            return self.name
        return f"delta.`{self.path}`"

    def head(self) -> int:
        if self.system == "ordo":
            return int(self.ordo.snapshot().id_version)
        if self.system == "iceberg":
            return len(self._snapshots())
        rows = self.spark.sql(f"DESCRIBE HISTORY {self._sql_name()} LIMIT 1").collect()
        return int(rows[0]["version"])

    def _reader(self) -> Any:
        if self.system == "ordo":
            from ordo.spark.datasource import settings_options

            return self.spark.read.format("ordo").options(**settings_options(self.settings))
        return self.spark.read.format("delta")

    def _location(self) -> str:
        return self.ordo.name if self.system == "ordo" else self.path

    def read_at(self, version: int) -> Any:
        """Time travel through the system's Spark format (``versionAsOf``; Iceberg: ``VERSION AS OF`` the
        version's snapshot)."""
        if self.system == "iceberg":
            if version < 1:
                raise ValueError(f"{self.name}: version {version} has no snapshot (the table was empty)")
            return self.spark.sql(f"SELECT * FROM {self.name} VERSION AS OF {self._snapshots()[version - 1]}")
        return self._reader().option("versionAsOf", version).load(self._location())

    def changes(self, start: int, end: int) -> Any:
        """The change feed of versions ``start``..``end`` through the system's Spark format (Delta's form; Iceberg:
        its changelog view with updates computed by the key, change types and versions put in Delta's terms)."""
        if self.system == "iceberg":
            chain = self._snapshots()
            view = f"peers_spark_changes_{threading.get_ident()}"
            bounds = f"'end-snapshot-id', '{chain[end - 1]}'"
            if start > 1:
                bounds = f"'start-snapshot-id', '{chain[start - 2]}', " + bounds  # exclusive
            self.spark.sql(
                f"CALL ice.system.create_changelog_view(table => '{self._ice()}', options => map({bounds}), "
                f"changelog_view => '{view}', compute_updates => true, identifier_columns => array('id'))"
            )
            versions = self.spark.createDataFrame(
                [(s, v) for v, s in enumerate(chain, start=1) if start <= v <= end],
                "_commit_snapshot_id BIGINT, _commit_version BIGINT",
            )
            kinds = ", ".join(f"'{a}', '{b}'" for a, b in _ICEBERG_CHANGES.items())
            return (
                self.spark.table(view)
                .join(versions, "_commit_snapshot_id")
                .selectExpr("id", "v", "p", f"map({kinds})[_change_type] AS _change_type", "_commit_version")
            )
        reader = self._reader().option("readChangeFeed", "true")
        return reader.option("startingVersion", start).option("endingVersion", end).load(self._location())

    def files_per_partition(self) -> dict[str, int]:
        """Live data files per partition at the head."""
        counts: dict[str, int] = {}
        if self.system == "ordo":
            for entry in self.ordo.snapshot().files:
                key = str(entry.partition.get("p"))
                counts[key] = counts.get(key, 0) + 1
            return dict(sorted(counts.items()))
        if self.system == "iceberg":
            files = self.spark.sql(f"SELECT partition.p, count(*) FROM {self.name}.data_files GROUP BY 1")
        else:
            # Delta: the files a scan reads (a file whose every row is deleted leaves the snapshot: DELETE removes it).
            files = self.read().select("p", "_metadata.file_path").distinct().groupBy("p").count()
        for row in files.collect():
            counts[str(row[0])] = int(row[1])
        return dict(sorted(counts.items()))

    def compact(self) -> None:
        if self.system == "ordo":
            self.ordo.compact("major")
        elif self.system == "delta":
            self.spark.sql(f"OPTIMIZE delta.`{self.path}`")
        else:
            self.spark.sql(f"CALL ice.system.rewrite_data_files(table => '{self._ice()}')")
            self.spark.sql(f"CALL ice.system.rewrite_position_delete_files(table => '{self._ice()}')")

    def read(self) -> Any:
        if self.system == "ordo":
            return self.ordo.read()
        if self.system == "delta":
            return self.spark.read.format("delta").load(self.path)
        return self.spark.table(self.name)


def snapshot_chain(snapshots: list[tuple[int, int | None]]) -> list[int]:
    """Iceberg's (snapshot id, parent id) pairs as the line from the first snapshot to the current one: snapshot
    ``k`` of it is version ``k``, as Delta numbers the commits after a table's creation (version 0, the empty
    table, has no snapshot). The history must be one line (no rollback, nothing expired): else ValueError."""
    parent = {int(s): (None if p is None else int(p)) for s, p in snapshots}
    children = set(parent.values())
    heads = [s for s in parent if s not in children]
    if len(heads) > 1 or (parent and not heads):
        raise ValueError(f"the snapshots are not one line ({len(heads)} without a child)")
    chain: list[int] = []
    snapshot = heads[0] if heads else None
    while snapshot is not None:
        if snapshot not in parent:
            raise ValueError(f"snapshot {snapshot}, a parent, is gone (expired?)")
        if len(chain) > len(parent):
            raise ValueError("the snapshots' parents make a cycle")
        chain.append(snapshot)
        snapshot = parent.get(snapshot)
    if len(chain) != len(parent):
        raise ValueError(f"{len(parent) - len(chain)} snapshots are not ancestors of the current one")
    return chain[::-1]


def _frame(spark: Any, start: int, count: int, tag: str) -> Any:
    return spark.range(start, start + count).selectExpr(
        "id", f"concat('{tag}-', CAST(id AS STRING)) AS v", "CAST(id % 4 AS STRING) AS p"
    )


def _each(hosts: dict[str, Any], op: str, *args: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Operation ``op`` for each system on its host, one system after the other: what each returned, and the
    reason of each that failed."""
    done: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for system, host in hosts.items():
        try:
            done[system] = host.call(op, system, *args)
        except Exception as exc:
            errors[system] = f"{type(exc).__name__}: {str(exc)[:1500]}"
    return done, errors


def _reads(hosts: dict[str, Any], spark: Any, work: Path) -> dict[str, Any]:
    rows = pick(100_000, 1_000_000)
    upserts = 100
    per_upsert = rows // 100
    repeats = pick(3, 5)
    built, errors = _each(hosts, "reads_build", rows, upserts, per_upsert)
    # The floor: plain Parquet of the same final rows, written from a table of this session.
    reference = next((s for s in built if isinstance(hosts[s], _Local)), None)
    if reference is None:
        return {"errors": errors}
    plain = str(work / "plain")
    hosts[reference].call("plain", reference, "reads", plain)
    key = rows // 2 + 1

    def sides() -> dict[str, Any]:
        out: dict[str, Any] = {
            "plain full": lambda _r: _noop(spark.read.parquet(plain)),
            "plain point": lambda _r: _point(spark.read.parquet(plain), key),
        }
        for system in built:
            host = hosts[system]
            out[f"{system} full"] = lambda _r, h=host, s=system: h.call("time", s, "reads", "full")
            out[f"{system} point"] = lambda _r, h=host, s=system: h.call("time", s, "reads", "point", key)
        return out

    timings: dict[str, Any] = {"uncompacted": interleave(sides(), repeats)}
    compact_s, failed = _each({s: hosts[s] for s in built}, "compact", "reads")
    errors.update({f"{s} compaction": why for s, why in failed.items()})
    timings["compacted"] = interleave(sides(), repeats)
    return {
        "rows": rows,
        "upserts": upserts,
        "rows_per_upsert": per_upsert,
        "repeats": repeats,
        "counts": {s: b["count"] for s, b in built.items()},
        "build_s": {s: b["build_s"] for s, b in built.items()},
        "compact_s": compact_s,
        "errors": errors,
        "seconds": {stage: {k: [round(x, 4) for x in v] for k, v in t.items()} for stage, t in timings.items()},
        "median_s": {stage: {k: round(median(v), 4) for k, v in t.items()} for stage, t in timings.items()},
    }


def _read_results(reads: dict[str, Any], versions: dict[str, str]) -> list[Result]:
    if "median_s" not in reads:
        return _error("reads after 100 small upserts", reads)
    results = []
    for stage, medians in reads["median_s"].items():
        for kind in ("full", "point"):
            results.append(
                _versus(
                    f"{kind} read, {reads['rows']:,} rows after {reads['upserts']} upserts, {stage}",
                    "s",
                    medians.get(f"ordo {kind}"),
                    {s: medians.get(f"{s} {kind}") for s in ("delta", "iceberg")},
                    lower_is_better=True,
                    target="<= 1.2x the better peer",
                    met=lambda q: q <= 1.2,
                    samples={**reads, "versions": versions, "plain_s": medians.get(f"plain {kind}")},
                    notes=_notes(reads),
                )
            )
    return results


# --------------------------------------------------------------------------- workload 4: time travel, change feed

HISTORY_ROWS = 10  # rows per commit


def _history_model(commits: int) -> dict[str, Any]:
    """What version N-50 and the last 100 versions hold: commit ``i`` inserts 10 new keys, or (every 10th) updates
    the 10 rows commit ``i - 5`` inserted; each commit is one version after the table's creation (version 0)."""
    updates = [i % 10 == 9 for i in range(commits)]
    travel = sum(1 for u in updates[: commits - 50] if not u) * HISTORY_ROWS
    last = updates[commits - 100 :]
    inserts = sum(1 for u in last if not u) * HISTORY_ROWS
    updated = sum(1 for u in last if u) * HISTORY_ROWS
    return {
        "travel_rows": travel,
        "changes": {"insert": inserts, "update_preimage": updated, "update_postimage": updated},
        "versions": 100,
    }


def _history(hosts: dict[str, Any], spark: Any, work: Path) -> dict[str, Any]:
    commits = int(os.environ.get("BENCH_PEERS_SPARK_COMMITS") or pick(150, 1000))
    if commits < 100:
        raise ValueError("workload 4 needs at least 100 commits (the change feed reads the last 100 versions)")
    repeats = pick(3, 5)
    model = _history_model(commits)
    built, errors = _each(hosts, "history_build", commits)
    sides: dict[str, Any] = {}
    for system, b in built.items():
        host, head = hosts[system], b["head"]
        sides[f"{system} travel"] = lambda _r, h=host, s=system, v=head: h.call("time", s, "history", "travel", v - 50)
        sides[f"{system} changes"] = lambda _r, h=host, s=system, v=head: h.call(
            "time", s, "history", "changes", v - 99, v
        )
    load_before = [round(x, 2) for x in os.getloadavg()]
    timings = interleave(sides, repeats) if sides else {}
    found = {s: b["found"] for s, b in built.items()}
    return {
        "load_average_at_reads": [load_before, [round(x, 2) for x in os.getloadavg()]],
        "commits": commits,
        "rows_per_commit": HISTORY_ROWS,
        "repeats": repeats,
        "build_s": {s: b["build_s"] for s, b in built.items()},
        "model": model,
        "found": found,
        "model_holds": {s: {k: f[k] == model[k] for k in model} for s, f in found.items()},
        "errors": errors,
        "seconds": {k: [round(x, 4) for x in v] for k, v in timings.items()},
        "median_s": {k: round(median(v), 4) for k, v in timings.items()},
    }


def _history_results(found: dict[str, Any], versions: dict[str, str]) -> list[Result]:
    if not found.get("median_s"):
        return _error("time travel and change feed", found)
    medians = found["median_s"]
    figures = {
        "travel": f"time travel: read of version N-50 (N = {found['commits']} commits)",
        "changes": f"change feed: the last 100 of {found['commits']} versions",
    }
    return [
        _versus(
            figure,
            "s",
            medians.get(f"ordo {kind}"),
            {s: medians.get(f"{s} {kind}") for s in ("delta", "iceberg")},
            lower_is_better=True,
            target="<= 1.2x the better peer",
            met=lambda q: q <= 1.2,
            samples={**found, "versions": versions},
            notes=_notes(found),
        )
        for kind, figure in figures.items()
    ]


# --------------------------------------------------------------------------- workload 1: the seeds' scenario

SEEDS_BASE = 20_000  # rows loaded before the run
SEEDS_BATCH = 100  # rows per micro-batch: half new keys, half upserts of keys seen before
SEEDS_RETRIES = 5  # ordo's foreachBatch committer's default; the same for every job of every system
SEEDS_SERVICE_S = 3.0  # a table-service round every 3 s
SEEDS_JOB_PAUSE_S = 2.0  # an UPDATE (and a DELETE) job every 2 s
PARTITIONS = ("0", "1", "2", "3")
_DELTA_CONFLICT = re.compile(
    r"Concurrent\w*Exception|MetadataChangedException|ProtocolChangedException|DELTA_CONCURRENT_\w+"
)
# Iceberg: a commit that lost its race past the table's retries, or a validation against a concurrent commit
# (serializable isolation, the default of its MERGE, UPDATE and DELETE; a rewrite whose files changed).
# Named with the message's first words (letters only: no file names or ids), which tell its kinds apart.
_ICEBERG_CONFLICT = re.compile(r"(CommitFailedException|ValidationException):?\s*([A-Za-z ,]{0,48})")
# Iceberg's changelog types in Delta's change feed's terms.
_ICEBERG_CHANGES = {
    "INSERT": "insert",
    "DELETE": "delete",
    "UPDATE_BEFORE": "update_preimage",
    "UPDATE_AFTER": "update_postimage",
}


def _conflict(system: str, exc: BaseException) -> str | None:
    """The conflict's name when ``exc`` is the system's concurrent-commit failure (what its users retry), else None."""
    if system == "ordo":
        from ordo.kernel.errors import CommitConflictError

        return (getattr(exc, "reason", None) or "conflict") if isinstance(exc, CommitConflictError) else None
    if system == "iceberg":
        found = _ICEBERG_CONFLICT.search(str(exc))
        return f"{found[1]}: {found[2].strip()}".rstrip(": ") if found else None
    match = _DELTA_CONFLICT.search(str(exc))
    return match.group(0) if match else None


class _Job:
    """One job's counters: commits done, retries, conflicts by name, failures (conflicts past the retries), conflicts
    left unretried because the run ended (``cut``), errors."""

    def __init__(self) -> None:
        self.done = self.retries = self.failed = self.cut = 0
        self.idle = 0  # table-service rounds of a partition that found nothing to rewrite (no commit)
        self.until = float("inf")  # the run's deadline (monotonic): no retry starts after it
        self.conflicts: dict[str, int] = {}
        self.errors: list[str] = []
        self.latencies: list[float] = []

    def attempt(self, system: str, action: Any, retries: int = SEEDS_RETRIES) -> bool:
        """Run ``action``, retrying a conflict up to ``retries`` times; True when it committed."""
        for attempt in range(retries + 1):
            try:
                action()
                self.done += 1
                return True
            except Exception as exc:
                name = _conflict(system, exc)
                if name is None:
                    self.errors.append(f"{type(exc).__name__}: {str(exc)[:600]}")
                    return False
                self.conflicts[name] = self.conflicts.get(name, 0) + 1
                if attempt == retries:
                    self.failed += 1
                    return False
                if time.monotonic() >= self.until:
                    self.cut += 1
                    return False
                self.retries += 1
        return False

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "committed": self.done,
            "retried": self.retries,
            "failed": self.failed,
            "cut_by_the_end": self.cut,
            "nothing_to_do": self.idle,
            "conflicts": self.conflicts,
            "errors": self.errors[:3],
        }
        if self.latencies:
            ms = [x * 1000 for x in self.latencies]
            out["p50_ms"] = round(percentile(ms, 50), 1)
            out["p99_ms"] = round(percentile(ms, 99), 1)
        return out


def _seeds(hosts: dict[str, Any], spark: Any, work: Path) -> dict[str, Any]:
    seconds = float(os.environ.get("BENCH_PEERS_SPARK_SEEDS_SECONDS") or pick(60.0, 300.0))
    runs, errors = _each(hosts, "seeds", seconds)
    return seeds_found(seconds, runs, errors)


def seeds_found(seconds: float, runs: dict[str, Any], errors: dict[str, str], **more: Any) -> dict[str, Any]:
    """What ``_seeds_results`` reads: the scenario's settings, each system's run (``_seeds_run``), the errors (a
    system's that did not run, and the steps at the end that failed), and ``more``."""
    for system, found in runs.items():
        for step, why in found.get("errors_at_end", {}).items():
            errors[f"{system}, {step} at the end"] = why
    return {
        "seconds": seconds,
        "base_rows": SEEDS_BASE,
        "batch_rows": SEEDS_BATCH,
        "retries": SEEDS_RETRIES,
        "service_round_s": SEEDS_SERVICE_S,
        "job_pause_s": SEEDS_JOB_PAUSE_S,
        **more,
        "systems": runs,
        "errors": errors,
    }


def _seeds_run(
    system: str, spark: Any, work: Path, settings: Any, seconds: float, location: str | None = None
) -> dict[str, Any]:
    """The seeds' scenario on ``system``'s table (at ``location``: see ``_ReadTable``) for ``seconds``."""
    import random

    table = _ReadTable(system, spark, work, settings, "seeds", cdf=True, location=location)
    table.load(_frame(spark, 0, SEEDS_BASE, "base"))
    start_version = table.head()
    stop = threading.Event()
    jobs = {name: _Job() for name in ("ingestion", "service", "update", "delete")}
    load_at_start = [round(x, 2) for x in os.getloadavg()]

    def ingest() -> None:
        rng = random.Random(24)
        job = jobs["ingestion"]
        committer = None
        if system == "ordo":
            from ordo.producer.streaming import BatchCommitter

            def attempts(_batch: int, result: Any) -> None:
                if result is not None:
                    job.retries += result.attempts - 1

            committer = BatchCommitter(
                table.ordo, app_id="peers-spark-seeds", retries=SEEDS_RETRIES, on_commit=attempts
            )
        next_key, batch, t0 = SEEDS_BASE, 0, job.until - seconds
        try:
            # A batch is due every second until the deadline; one not started by then is not run (a late batch
            # starts at once, its latency counting from when it was due).
            while (due := t0 + batch) < t0 + seconds and time.monotonic() < t0 + seconds:
                time.sleep(max(0.0, due - time.monotonic()))
                rows = [(k, f"b{batch}", str(k % 4)) for k in rng.sample(range(next_key), SEEDS_BATCH // 2)]
                rows += [(k, f"b{batch}", str(k % 4)) for k in range(next_key, next_key + SEEDS_BATCH // 2)]
                next_key += SEEDS_BATCH // 2
                df = spark.createDataFrame(rows, SCHEMA)
                if committer is not None:
                    # ordo's own path: the committer retries at the metadata level; a rejection past them fails it.
                    ok = job.attempt(system, lambda df=df, b=batch: committer(df, b), retries=0)
                else:
                    ok = job.attempt(system, lambda df=df: table.upsert(df))
                if ok:
                    job.latencies.append(time.monotonic() - due)
                batch += 1
        finally:
            stop.set()

    def service() -> None:
        job = jobs["service"]
        if system == "ordo":
            from ordo.services.compactor import Compactor

            compactor = Compactor(spark, settings, tables=(table.ordo.name,), interval=SEEDS_SERVICE_S)
            try:
                compactor.run(stop)
            finally:
                totals = _metric_totals(compactor.metrics.samples())
                job.done = int(totals.get("ordo_compactor_commits_total", 0))
                job.failed = int(totals.get("ordo_compactor_rejections_total", 0))
                errors = int(totals.get("ordo_compactor_errors_total", 0))
                job.errors = [f"{errors} rewrites failed before a decision"] if errors else []
                job.conflicts = {
                    k.split("reason=")[1].split(",")[0].rstrip("}"): int(v)
                    for k, v in compactor.metrics.samples().items()
                    if k.startswith("ordo_compactor_rejections_total")
                }
                compactor.close()
            return
        while not stop.is_set():
            for partition in PARTITIONS:
                if stop.is_set():
                    break
                # OPTIMIZE is not retried: the next round compacts the partition again (counted as failed).
                try:
                    if table.compact_partition(partition):
                        job.done += 1
                    else:
                        job.idle += 1
                except Exception as exc:
                    name = _conflict(system, exc)
                    if name is None:
                        job.errors.append(f"{type(exc).__name__}: {str(exc)[:600]}")
                        return
                    job.conflicts[name] = job.conflicts.get(name, 0) + 1
                    job.failed += 1
            stop.wait(SEEDS_SERVICE_S)

    def batch_job(kind: str) -> None:
        rng = random.Random(kind)
        job = jobs[kind]
        n = 0
        while not stop.wait(SEEDS_JOB_PAUSE_S):
            partition, residue = rng.choice(PARTITIONS), rng.randrange(50)
            where = f"p = '{partition}' AND id % 50 = {residue}"
            if kind == "update":
                job.attempt(system, lambda w=where, n=n: table.update(f"'{kind}{n}'", w))
            else:
                job.attempt(system, lambda w=where: table.delete(w))
            n += 1
            if job.errors:
                return

    threads = [threading.Thread(target=ingest, daemon=True), threading.Thread(target=service, daemon=True)]
    threads += [threading.Thread(target=batch_job, args=(k,), daemon=True) for k in ("update", "delete")]
    started = time.monotonic()
    for job in jobs.values():
        job.until = started + seconds
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 600)
    elapsed = time.monotonic() - started
    out: dict[str, Any] = {
        "elapsed_s": round(elapsed, 1),
        "load_average_at_start": load_at_start,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "jobs": {name: job.summary() for name, job in jobs.items()},
    }
    # Each measurement at the end on its own: a peer's failure in one is recorded as it is, the others still made.
    steps = {
        "versions": lambda: [start_version, table.head()],
        "files_per_partition": table.files_per_partition,
        "full_read_s": lambda: round(median(_noop(table.read()) for _ in range(3)), 4),
        "rows_at_end": lambda: table.read().count(),
        "change_feed_model": lambda: _fold_check(table, start_version, table.head()),
    }
    if system == "ordo":
        steps["matrix"] = lambda: _ordo_conflicts(table.ordo)
    for key, step in steps.items():
        try:
            out[key] = step()
        except Exception as exc:
            out.setdefault("errors_at_end", {})[key] = f"{type(exc).__name__}: {str(exc)[:600]}"
    return out


def _metric_totals(samples: dict[str, float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for key, value in samples.items():
        name = key.split("{")[0]
        totals[name] = totals.get(name, 0.0) + value
    return totals


_REMOVES, _ADDS = frozenset({"update_preimage", "delete"}), frozenset({"insert", "update_postimage"})


def fold_changes(state: dict[Any, tuple[Any, ...]], feed: Any) -> dict[Any, tuple[Any, ...]]:
    """``state`` (key -> (v, p)) after the change rows of ``feed`` (Delta's form: ``id``, ``v``, ``p``,
    ``_change_type``, ``_commit_version``), in version order, a version's removals before its additions."""
    out = dict(state)
    for row in sorted(feed, key=lambda r: (r["_commit_version"], r["_change_type"] not in _REMOVES)):
        if row["_change_type"] in _REMOVES:
            out.pop(row["id"], None)
        elif row["_change_type"] in _ADDS:
            out[row["id"]] = (row["v"], row["p"])
        else:
            raise ValueError(f"unknown change type {row['_change_type']!r}")
    return out


def _fold_check(table: _ReadTable, start: int, end: int) -> dict[str, Any]:
    """Fold the change feed of versions ``start``+1..``end`` over the table at ``start``; compare with the head."""
    state = {r["id"]: (r["v"], r["p"]) for r in table.read_at(start).select("id", "v", "p").collect()}
    feed = []
    if end > start:
        feed = table.changes(start + 1, end).select("id", "v", "p", "_change_type", "_commit_version").collect()
    state = fold_changes(state, feed)
    head = {r["id"]: (r["v"], r["p"]) for r in table.read().select("id", "v", "p").collect()}
    differing = sum(1 for k in state.keys() | head.keys() if state.get(k) != head.get(k))
    types: dict[str, int] = {}
    for row in feed:
        types[row["_change_type"]] = types.get(row["_change_type"], 0) + 1
    return {"holds": differing == 0, "keys_differing": differing, "feed_rows": len(feed), "by_type": types}


def _ordo_conflicts(table: Any) -> dict[str, Any]:
    """ordo's rejections in the run by (earlier operation, later operation, reason), each with the matrix's cell."""
    from ordo.arbiter.policy import load_policy
    from ordo.schemas.operations import REGISTRY
    from ordo.services.compactor import writer_rejections_by_service

    decisions = table.decisions()
    operation = {d.txn_id: d.operation for d in decisions}
    policy = load_policy()
    cells: dict[str, dict[str, Any]] = {}
    for d in decisions:
        if d.accepted or d.operation is None:
            continue
        earlier = operation.get(d.conflicting_txn_id or "")
        cell = None
        first = REGISTRY[earlier].op_class if earlier is not None else None
        later = REGISTRY[d.operation].op_class
        if first is not None and later is not None:
            cell = policy.resolve(first, later).value
        key = f"{earlier.value if earlier else '?'} then {d.operation.value}: {d.reason}"
        entry = cells.setdefault(key, {"count": 0, "matrix": cell})
        entry["count"] += 1
    return {
        "rejections": cells,
        "writer_rejections_by_service": len(writer_rejections_by_service(decisions)),
        "unpredicted": sum(
            e["count"] for k, e in cells.items() if "CONFLICT_LATER_FAILS" in k and e["matrix"] != "later_fails"
        ),
    }


def _seeds_results(found: dict[str, Any], versions: dict[str, str]) -> list[Result]:
    runs = found.get("systems", {})
    if "ordo" not in runs:
        return _error("seeds' scenario (ingestion + compaction + UPDATE/DELETE)", found)
    jobs = {s: r["jobs"] for s, r in runs.items()}

    def both(what: str, *names: str) -> Any:
        return lambda s: sum(jobs[s][n][what] for n in names)

    figures = [  # figure, unit, value of a system, lower is better
        ("micro-batches committed", "batches", both("committed", "ingestion"), False),
        ("ingestion commits retried", "commits", both("retried", "ingestion"), True),
        ("ingestion commits failed", "commits", both("failed", "ingestion"), True),
        ("table-service commits failed", "commits", both("failed", "service"), True),
        ("table-service commits done", "commits", both("committed", "service"), False),
        ("UPDATE/DELETE jobs retried", "retries", both("retried", "update", "delete"), True),
        ("UPDATE/DELETE jobs failed", "jobs", both("failed", "update", "delete"), True),
        ("UPDATE/DELETE jobs committed", "jobs", both("committed", "update", "delete"), False),
        ("p50 micro-batch latency", "ms", lambda s: jobs[s]["ingestion"].get("p50_ms"), True),
        ("p99 micro-batch latency", "ms", lambda s: jobs[s]["ingestion"].get("p99_ms"), True),
        (
            "most files in a partition at the end",
            "files",
            lambda s: max(runs[s].get("files_per_partition", {None: None}).values()),
            True,
        ),
        ("full read at the end", "s", lambda s: runs[s].get("full_read_s"), True),
        (
            "change feed of the run folds to the table",
            "1 = yes",
            lambda s: float(runs[s]["change_feed_model"]["holds"]) if "change_feed_model" in runs[s] else None,
            False,
        ),
    ]
    samples = {**found, "versions": versions}
    results: list[Result] = []
    for figure, unit, value_of, lower in figures:
        result = _versus(
            f"seeds' scenario, {found['seconds']:.0f} s: {figure}",
            unit,
            value_of("ordo"),
            {s: value_of(s) for s in runs if s != "ordo"},
            lower_is_better=lower,
            samples=samples if not results else {},
            notes=_notes(found) if not results else "",
        )
        if figure == "ingestion commits failed":
            matrix = runs["ordo"].get("matrix", {})
            result.target = "no ingestion commit failed by a service or batch job the matrix says does not conflict"
            result.met = matrix.get("writer_rejections_by_service") == 0 and matrix.get("unpredicted") == 0
        elif figure == "full read at the end":
            result.target = "<= 1.2x the better peer (at its own file count: see the files figure)"
            result.met = result.ratio <= 1.2 if result.ratio is not None else None
        results.append(result)
    return results


RESULTS_OF = {"seeds": _seeds_results, "reads": _read_results, "history": _history_results}


if __name__ == "__main__":  # the Iceberg child (_Child): python -m bench.peers_spark --child WORK
    if len(sys.argv) != 3 or sys.argv[1] != "--child":
        raise SystemExit("usage: python -m bench.peers_spark --child WORK (run by python -m bench peers-spark)")
    _child(Path(sys.argv[2]))
