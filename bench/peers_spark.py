"""Side by side on Spark (issue 24): ordo, Delta Lake (delta-spark) and Apache Iceberg, one Spark session.

``make bench-peers-spark`` builds ``.venv-bench-spark`` (PySpark pinned to ordo's minimum, 4.2.0, the newest
Spark that delta-spark 4.4 supports, and ``delta-spark`` of the same release as its jar), fetches the jars
with ``tools/spark_lakes.py`` and runs ``python -m bench peers-spark``.

One local Spark session (``local[2]``, ordo's ``local_spark_session`` settings) hosts all three systems,
so they run on the same Spark, JVM, data and machine, interleaved round by round (``bench.common.interleave``):

* ordo: ``producer.DeltaTable.insert_into(df, retries=...)`` on the embedded stack (Tansu broker,
  ``ordo arbiter``, ``ordo consumer``; ``bench.common.stack``); a CONFLICT_LATER_FAILS rejection on a
  shared partition is retried at the metadata level by ``insert_into`` itself (its documented path).
* Delta Lake: ``df.write.format("delta").mode("append").save(path)`` on a table at a local path,
  partitioned by ``p``, default table properties (WriteSerializable; blind appends never conflict, and
  Delta retries a lost race for the next log entry itself); a ``ConcurrentModificationException`` that
  still reaches the writer is retried by writing again and counted.
* Apache Iceberg: ``df.writeTo("ice.db.t").append()`` on a Hadoop catalog in a local directory
  (``SparkCatalog``, ``type=hadoop``; its in-JVM lock manager makes the writers' commits safe since they
  are threads of one JVM), format version 2, ``commit.retry.num-retries=100`` (documented default 4;
  raised because 8 writers on one table is exactly the case it is for); a ``CommitFailedException`` that
  still reaches the writer is retried by writing again and counted. The runtime available for Spark 4 is
  built for Spark 4.1 (``tools/spark_lakes.py``); the session probes it once and, when it cannot run on
  this Spark, every Iceberg figure is recorded as an error with the JVM's reason.

Workload 1, commit cost alone: closed-loop single-row appends (``spark.range(1)`` projected to one row
``(id, v, p)``: no Python worker, the same plan for every system) by 1 writer, 8 writers each on its own
partition, and 8 writers on one shared partition. The writers are threads of the one Spark session (not
processes: 8 Spark drivers do not fit in 2 cores and 24 GiB beside the stack, and concurrent jobs of one
session is how Spark users run concurrent writes from one application). Each writer commits once to warm
up, then all start together and commit until the deadline; a commit's latency runs from building its
DataFrame to the write returning, retries included. A fresh table per system, scenario and round.

Workload 3, reads: a table of N rows (quick 100,000, full 1,000,000; ``id``, ``v``, 4 partitions ``p``)
written in one commit, then 100 small upserts of 1% of the keys each with new values: ``insert_into`` on
ordo (an upsert by primary key, merged on read), ``MERGE INTO ... WHEN MATCHED UPDATE SET * WHEN NOT MATCHED
INSERT *`` on Delta (deletion vectors on, ``delta.enableDeletionVectors=true``: the documented setting for
small MERGEs, which then mark rows instead of rewriting files) and on Iceberg (merge-on-read:
``write.merge.mode=merge-on-read``). Then each system's full read (every row and column into Spark's
``noop`` sink) and a point read by key (``WHERE id = k``, collected) are timed, uncompacted and again after
its compaction (ordo ``compact("major")``, Delta ``OPTIMIZE``, Iceberg ``rewrite_data_files`` then
``rewrite_position_delete_files``), beside plain Parquet of the same final rows (written once by Spark,
partitioned by ``p``: the floor). Reads alternate between systems, repeated; the median is reported.

Workloads 2 and 4 of the issue (the seeds' scenario; time travel and change feed) are not measured yet;
they are recorded as pending.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, Result, interleave, machine, median, pending, percentile, pick, ratio, stack

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


def _session(work: Path) -> Any:
    """One local Spark session with ordo's settings, Delta's and Iceberg's extensions and catalogs."""
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
        .config(
            "spark.sql.extensions",
            "io.delta.sql.DeltaSparkSessionExtension,org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        # Delta rebuilds a snapshot's state (every read, every 10th commit's checkpoint) in this many tasks;
        # the default (50) is for clusters: on local[2] it made a checkpointing append take ~18 s and a read
        # of a 15-commit table ~10 s (2 tasks: 1.3 s and 0.8 s, same machine), so it is set to the cores.
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.catalog.ice", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.ice.type", "hadoop")
        .config("spark.sql.catalog.ice.warehouse", str(work / "iceberg"))
    )
    for key, value in spark_config().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
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
            from producer.table import DeltaTable

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


def _probe_iceberg(spark: Any) -> str | None:
    """None when the Iceberg runtime works on this Spark, else the JVM's reason."""
    try:
        spark.sql(f"CREATE TABLE ice.db.probe ({SCHEMA}) USING iceberg PARTITIONED BY (p)")
        _row(spark, 0, "x").writeTo("ice.db.probe").append()
        spark.sql("DROP TABLE ice.db.probe")
        return None
    except Exception as exc:
        import pyspark

        text = str(exc).strip().splitlines()
        return f"Iceberg runtime cannot run on Spark {pyspark.__version__}: {' '.join(text[:3])[:600]}"


def run() -> list[Result]:
    from producer.table import close_connections

    duration = float(os.environ.get("BENCH_PEERS_SPARK_SECONDS") or pick(12.0, 30.0))
    rounds = pick(2, 3)
    work = Path(tempfile.mkdtemp(prefix="ordo-bench-peers-spark-"))
    outcomes: dict[str, dict[str, list[Any]]] = {}
    reads: dict[str, Any] = {}
    versions: dict[str, str] = {}
    counter = iter(range(1_000_000))
    with stack("peers-spark", prefix="pspark") as bench_stack:
        spark = _session(work)
        try:
            from importlib import metadata

            import pyspark

            versions = {
                "spark": pyspark.__version__,
                "delta-spark": metadata.version("delta-spark"),
                "iceberg-runtime": spark.conf.get("spark.jars.packages").split(",")[-1],
            }
            iceberg_error = _probe_iceberg(spark)
            systems = SYSTEMS if iceberg_error is None else tuple(s for s in SYSTEMS if s != "iceberg")
            for scenario, (writers, shared) in SCENARIOS.items():

                def side(system: str, writers: int = writers, shared: bool = shared) -> Any:
                    def one(_round: int) -> Any:
                        table = _Table(system, spark, work, bench_stack.settings, next(counter))
                        try:
                            return _run_writers(spark, table, writers, shared, duration)
                        except Exception as exc:
                            return {"error": str(exc)[:2000]}

                    return one

                print(f"peers-spark: {scenario}", flush=True)
                outcomes[scenario] = interleave({s: side(s) for s in systems}, rounds)
                if iceberg_error is not None:
                    outcomes[scenario]["iceberg"] = [{"error": iceberg_error}]
            print("peers-spark: reads", flush=True)
            try:
                reads = _reads(spark, work, bench_stack.settings, systems)
            except Exception as exc:
                reads = {"error": f"{type(exc).__name__}: {str(exc)[:1500]}"}
            if iceberg_error is not None:
                reads.setdefault("errors", {})["iceberg"] = iceberg_error
        finally:
            spark.stop()
            close_connections()
    shutil.rmtree(work, ignore_errors=True)
    results = _results(outcomes, versions, duration, rounds)
    results.extend(_read_results(reads, versions))
    _plot(results)
    return results


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
    where = machine()
    for scenario, runs in outcomes.items():
        summary = {system: _summary(r) for system, r in runs.items()}
        ours = summary.get("ordo", {})
        peers = {s: v for s, v in summary.items() if s != "ordo" and "error" not in v}
        best = max(peers, key=lambda s: peers[s]["commits_per_s"]) if peers else None
        common = {"versions": versions, "duration_s": duration, "rounds": rounds, "systems": summary}
        notes = "; ".join(f"{s}: {v['error']}" for s, v in summary.items() if "error" in v)
        value = ours.get("commits_per_s")
        peer_value = peers[best]["commits_per_s"] if best else None
        results.append(
            Result(
                BENCHMARK,
                f"{scenario}: single-row commits/s",
                "commits/s",
                value,
                peer=best,
                peer_value=peer_value,
                ratio=ratio(value, peer_value),
                target=">= 5x the better peer (8 writers)" if scenario.startswith("8") else None,
                met=(value / peer_value >= 5) if (value and peer_value and scenario.startswith("8")) else None,
                status="ok" if value is not None else "error",
                samples=common,
                notes=notes,
                machine=where,
            )
        )
        for q in ("p50", "p99"):
            value = ours.get(f"{q}_ms")
            peer_value = peers[best][f"{q}_ms"] if best else None
            results.append(
                Result(
                    BENCHMARK,
                    f"{scenario}: {q} commit latency",
                    "ms",
                    value,
                    peer=best,
                    peer_value=peer_value,
                    ratio=ratio(value, peer_value),
                    status="ok" if value is not None else "error",
                    machine=where,
                )
            )
    for what in ("seeds' scenario (ingestion + compaction + UPDATE/DELETE)", "time travel and change feed"):
        results.append(pending(BENCHMARK, what, "", "not measured yet (issue 24, workloads 2-4)"))
    return results


def _plot(results: list[Result]) -> Path | None:
    """Commits/s per scenario and system, as bars (docs/peers_spark.png)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rates = [r for r in results if r.figure.endswith("commits/s") and r.samples]
    if not rates:
        return None
    systems = list(SYSTEMS)
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        heights = [r.samples["systems"].get(system, {}).get("commits_per_s") or 0 for r in rates]
        xs = [j + i * width for j in range(len(rates))]
        ax.bar(xs, heights, width, label=system)
        for x, h, r in zip(xs, heights, rates, strict=True):
            if "error" in r.samples["systems"].get(system, {"error": ""}):
                ax.text(x, 0, "failed", rotation=90, ha="center", va="bottom", fontsize=8)
            else:
                ax.text(x, h, f"{h:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(rates))])
    ax.set_xticklabels([r.figure.split(":")[0] for r in rates])
    ax.set_ylabel("single-row commits/s")
    load = rates[0].machine.get("load_average")
    ax.set_title(f"Closed-loop single-row appends on one Spark session (load average {load})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
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
    """One system's keyed table for the reads: load, upsert, compact, read."""

    def __init__(self, system: str, spark: Any, work: Path, settings: Any) -> None:
        self.system, self.spark = system, spark
        if system == "ordo":
            from producer.table import DeltaTable

            self.ordo = DeltaTable.create(
                spark, "peers_spark_reads", schema=SCHEMA, primary_key="id", partitioned_by="p", settings=settings
            )
        elif system == "delta":
            self.path = str(work / "delta" / "reads")
            spark.sql(
                f"CREATE TABLE delta.`{self.path}` ({SCHEMA}) USING delta PARTITIONED BY (p) "
                "TBLPROPERTIES ('delta.enableDeletionVectors'='true')"
            )
        else:
            self.name = "ice.db.reads"
            spark.sql(
                f"CREATE TABLE {self.name} ({SCHEMA}) USING iceberg PARTITIONED BY (p) TBLPROPERTIES "
                "('format-version'='2', 'write.merge.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
                "'write.delete.mode'='merge-on-read')"
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
        df.createOrReplaceTempView("peers_spark_source")
        target = f"delta.`{self.path}`" if self.system == "delta" else self.name
        self.spark.sql(
            f"MERGE INTO {target} t USING peers_spark_source s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )

    def compact(self) -> None:
        if self.system == "ordo":
            self.ordo.compact("major")
        elif self.system == "delta":
            self.spark.sql(f"OPTIMIZE delta.`{self.path}`")
        else:
            self.spark.sql("CALL ice.system.rewrite_data_files(table => 'db.reads')")
            self.spark.sql("CALL ice.system.rewrite_position_delete_files(table => 'db.reads')")

    def read(self) -> Any:
        if self.system == "ordo":
            return self.ordo.read()
        if self.system == "delta":
            return self.spark.read.format("delta").load(self.path)
        return self.spark.table(self.name)


def _frame(spark: Any, start: int, count: int, tag: str) -> Any:
    return spark.range(start, start + count).selectExpr(
        "id", f"concat('{tag}-', CAST(id AS STRING)) AS v", "CAST(id % 4 AS STRING) AS p"
    )


def _reads(spark: Any, work: Path, settings: Any, systems: tuple[str, ...]) -> dict[str, Any]:
    rows = pick(100_000, 1_000_000)
    upserts = 100
    per_upsert = rows // 100
    repeats = pick(3, 5)
    tables: dict[str, _ReadTable] = {}
    errors: dict[str, str] = {}
    build_s: dict[str, float] = {}
    for system in systems:
        try:
            started = time.perf_counter()
            table = _ReadTable(system, spark, work, settings)
            table.load(_frame(spark, 0, rows, "base"))
            for i in range(upserts):
                table.upsert(_frame(spark, (i * per_upsert * 7) % rows, per_upsert, f"u{i}"))
            build_s[system] = round(time.perf_counter() - started, 1)
            tables[system] = table
        except Exception as exc:
            errors[system] = f"{type(exc).__name__}: {str(exc)[:1500]}"
    reference = next(iter(tables.values()), None)
    if reference is None:
        return {"errors": errors}
    plain = str(work / "plain")
    reference.read().write.partitionBy("p").parquet(plain)
    counts = {s: t.read().count() for s, t in tables.items()}
    key = rows // 2 + 1

    def sides(stage: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "plain full": lambda _r: _noop(spark.read.parquet(plain)),
            "plain point": lambda _r: _point(spark.read.parquet(plain), key),
        }
        for system, table in tables.items():
            out[f"{system} full"] = lambda _r, t=table: _noop(t.read())
            out[f"{system} point"] = lambda _r, t=table: _point(t.read(), key)
        return out

    timings: dict[str, Any] = {"uncompacted": interleave(sides("uncompacted"), repeats)}
    compact_s: dict[str, float] = {}
    for system, table in list(tables.items()):
        try:
            started = time.perf_counter()
            table.compact()
            compact_s[system] = round(time.perf_counter() - started, 1)
        except Exception as exc:
            errors[f"{system} compaction"] = f"{type(exc).__name__}: {str(exc)[:1500]}"
    timings["compacted"] = interleave(sides("compacted"), repeats)
    return {
        "rows": rows,
        "upserts": upserts,
        "rows_per_upsert": per_upsert,
        "repeats": repeats,
        "counts": counts,
        "build_s": build_s,
        "compact_s": compact_s,
        "errors": errors,
        "seconds": {stage: {k: [round(x, 4) for x in v] for k, v in t.items()} for stage, t in timings.items()},
        "median_s": {stage: {k: round(median(v), 4) for k, v in t.items()} for stage, t in timings.items()},
    }


def _read_results(reads: dict[str, Any], versions: dict[str, str]) -> list[Result]:
    where = machine()
    if "median_s" not in reads:
        why = reads.get("error") or "; ".join(f"{k}: {v}" for k, v in reads.get("errors", {}).items())
        return [Result(BENCHMARK, "reads after 100 small upserts", "", None, status="error", notes=why, machine=where)]
    notes = "; ".join(f"{k}: {v}" for k, v in reads.get("errors", {}).items())
    results = []
    for stage, medians in reads["median_s"].items():
        for kind in ("full", "point"):
            peers = {s: medians[f"{s} {kind}"] for s in ("delta", "iceberg") if f"{s} {kind}" in medians}
            best = min(peers, key=lambda s: peers[s]) if peers else None
            value = medians.get(f"ordo {kind}")
            peer_value = peers[best] if best else None
            results.append(
                Result(
                    BENCHMARK,
                    f"{kind} read, {reads['rows']:,} rows after {reads['upserts']} upserts, {stage}",
                    "s",
                    value,
                    peer=best,
                    peer_value=peer_value,
                    ratio=ratio(value, peer_value),
                    target="<= 1.2x the better peer",
                    met=(value / peer_value <= 1.2) if (value and peer_value) else None,
                    status="ok" if value is not None else "error",
                    samples={**reads, "versions": versions, "plain_s": medians.get(f"plain {kind}")},
                    notes=notes,
                    machine=where,
                )
            )
    return results
