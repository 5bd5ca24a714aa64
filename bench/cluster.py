"""Benchmark: ordo beside Delta Lake (delta-spark) on one Spark standalone cluster, both tables on one S3 server.

    python -m bench cluster        (BENCH_PROFILE=full: more repeats)

The production topology on this machine (tests/cluster's; docs/operations.md,
"Production"): S3Proxy (its in-memory backend), Apache Kafka, the arbiter, the
consumer serving the catalog over HTTP, a Spark master and two workers (1 core,
1 GiB each) from PySpark's install whose executors run ordo from its wheel in
their own Python. This process is the driver (client mode) of one application
holding both workers' cores, with S3A's jars (``tools/spark_s3a.py``) and
delta-spark's (``tools/spark_lakes.py``: from ~/.m2, fetched by mvn). ordo's
table is ``s3://bench/ordo`` (keyed by ``id``), Delta's ``s3a://bench/delta``
(no key: Delta has none; its appends are blind); both are partitioned by
``dt`` with the same rows (``bench.object_store.rows``).

Figures, each system alternating first (``bench.common.interleave``), median of
the repeats:

* a 1-row append and a ~100 MB append: the wall time of ordo's
  ``insert_into`` (validate, the executors writing their files, the commit,
  the catalog showing it) and of Delta's ``write.format("delta").mode("append")``;
* a full read (every row and column into Spark's ``noop`` sink) and a point
  read (``id = k``, collected; both systems must return the same row),
  uncompacted (after the appends: one file per 1-row append beside the large
  ones) and compacted (ordo ``compact("major")``, Delta ``OPTIMIZE``; their
  wall times are recorded too).

Delta's jar is ``DELTA_VERSION`` (``ORDO_DELTA_VERSION`` overrides), built for
Spark 4.2: on a Spark it does not support its probe (an append and a read)
fails and Delta's figures are recorded as errors with the reason, ordo's
still run. The load average is recorded before and after.

Last, the seeds' scenario (``bench.peers_spark``'s workload 1: a micro-batch of
upserts every second while the table service compacts and an UPDATE and a
DELETE job run every 2 s, each a thread of this driver's session) on the
cluster: ordo's table at ``s3://bench/seeds`` with its ``Compactor`` on the
cluster, Delta's at ``s3a://bench/delta-seeds`` with MERGE and OPTIMIZE, one
after the other (ordo first), for ``BENCH_CLUSTER_SEEDS_SECONDS`` (quick 60,
full 300; 0 skips it). Its figures are workload 1's, named "... on the cluster".
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import ROOT, Result, interleave, machine, median, pick, ratio, stack
from bench.object_store import BIG_ROWS, SCHEMA, append, rows

BENCHMARK = "cluster"
BUCKET = "bench"
DELTA_VERSION = "4.4.0"  # delta-spark for Spark 4.2 (its 4.x line supports no later Spark)
SMALL_ROWS = 1
POINT_KEY = 123_457  # inside the first large append
S3_HEAP = "6g"  # S3Proxy keeps every object in its heap: both tables, their compacted copies (2g ran out)


def delta_coordinate() -> str:
    return f"io.delta:delta-spark_2.13:{os.environ.get('ORDO_DELTA_VERSION', DELTA_VERSION)}"


def spark_settings(hadoop: dict[str, str]) -> dict[str, str]:
    """The driver's Spark settings: S3A's and Delta's jars, ``hadoop`` (``fs.s3a.*``), both workers' cores."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from spark_lakes import EXCLUDES, IVY_SETTINGS, fetch
        from spark_s3a import spark_config
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from ordo.services.cluster import driver_config

    fetch(delta_coordinate())
    jars = {
        "spark.jars.packages": delta_coordinate(),
        "spark.jars.excludes": EXCLUDES,
        "spark.jars.ivySettings": str(IVY_SETTINGS),
    }
    return driver_config(spark_config() | jars, hadoop, cores_max=2) | {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }


@contextmanager
def cluster_topology(work: Path) -> Iterator[tuple[Any, Any]]:
    """S3, Kafka, arbiter, consumer over HTTP, a standalone cluster and this driver's session on it:
    ``(spark, driver settings)``."""
    from ordo.broker import free_port
    from ordo.broker.kafka import cache_root
    from ordo.broker.s3proxy import S3ProxyServer
    from ordo.kernel.objectstore import use_options
    from ordo.producer.table import close_connections
    from ordo.services.cluster import SparkStandalone, build_wheel, executor_python
    from ordo.spark import cluster_spark_session

    python = executor_python(build_wheel(ROOT, work / "wheel"), work / "executor-venv", cache_root())
    saved = dict(os.environ)
    cluster: SparkStandalone | None = None
    spark = None
    with S3ProxyServer(heap=S3_HEAP) as s3, stack(BENCHMARK, consumer=False, broker="kafka") as ordo:
        try:
            s3.create_bucket(BUCKET)
            os.environ.update(s3.environment())
            use_options(None)
            port = free_port()
            server = ordo.settings.with_overrides(http_port=port)
            consumer = ordo.group.start_ordo(server, "consumer", name="consumer")
            consumer.wait_for_line("consumer ready", timeout=120)
            cluster = SparkStandalone(work / "spark", env=s3.environment()).start()
            os.environ["PYSPARK_PYTHON"] = str(python)
            spark = cluster_spark_session(cluster.url, "bench-cluster", spark_settings(s3.hadoop_settings()))
            spark.sparkContext.setLogLevel("ERROR")
            yield spark, server.with_overrides(catalog=f"http://127.0.0.1:{port}")
        finally:
            close_connections()
            if spark is not None:
                spark.stop()
            if cluster is not None:
                cluster.stop()
            os.environ.clear()
            os.environ.update(saved)
            use_options(None)


def progress(what: str, figures: Any) -> Any:
    """Print ``figures`` as they come (a later phase that fails leaves the earlier ones in the log)."""
    print(f"cluster: {what}: {figures}; load average {os.getloadavg()}", flush=True)
    return figures


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return round(time.perf_counter() - started, 3)


class Ordo:
    """ordo's side: a keyed table at ``s3://bench/ordo``."""

    name = "ordo"

    def __init__(self, spark: Any, settings: Any) -> None:
        from ordo.producer.table import DeltaTable

        self.spark = spark
        self.table = DeltaTable.create(
            spark, "bench_cluster", schema=SCHEMA, primary_key="id", partitioned_by="dt",
            location=f"s3://{BUCKET}/ordo", settings=settings,
        )  # fmt: skip

    def append(self, df: Any) -> dict[str, Any]:
        return append(self.table, df)

    def frame(self) -> Any:
        return self.table.read()

    def compact(self) -> float:
        return timed(lambda: self.table.compact("major"))

    def files(self) -> int:
        return len(self.table.snapshot().files)


class Delta:
    """Delta Lake's side: an unkeyed table at ``s3a://bench/delta``."""

    name = "delta"

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.path = f"s3a://{BUCKET}/delta"
        spark.sql(
            f"CREATE TABLE delta.`{self.path}` (id BIGINT, payload STRING, dt STRING) USING delta PARTITIONED BY (dt)"
        )

    def append(self, df: Any) -> dict[str, Any]:
        return {"total_s": timed(lambda: df.write.format("delta").mode("append").save(self.path))}

    def frame(self) -> Any:
        return self.spark.read.format("delta").load(self.path)

    def compact(self) -> float:
        return timed(lambda: self.spark.sql(f"OPTIMIZE delta.`{self.path}`").collect())

    def files(self) -> int:
        return int(self.spark.sql(f"DESCRIBE DETAIL delta.`{self.path}`").collect()[0]["numFiles"])


def full_read(side: Any) -> float:
    return timed(lambda: side.frame().write.format("noop").mode("overwrite").save())


def point_read(side: Any) -> tuple[float, list[tuple[Any, ...]]]:
    from pyspark.sql import functions as F

    found: list[Any] = []
    seconds = timed(lambda: found.extend(side.frame().where(F.col("id") == POINT_KEY).collect()))
    return seconds, [(r["id"], r["payload"], r["dt"]) for r in found]


def reads(sides: dict[str, Any], repeats: int) -> dict[str, dict[str, Any]]:
    """Full and point reads of every side, interleaved; the point reads must agree."""
    full = interleave({n: lambda _r, s=s: full_read(s) for n, s in sides.items()}, repeats)
    point = interleave({n: lambda _r, s=s: point_read(s) for n, s in sides.items()}, repeats)
    answers = {n: {tuple(map(tuple, rows_)) for _, rows_ in runs} for n, runs in point.items()}
    for name, answer in answers.items():
        assert len(answer) == 1 and len(next(iter(answer))) == 1, f"{name}: point read gave {answer}"
    assert len({a for answer in answers.values() for a in answer}) == 1, f"the systems disagree: {answers}"
    return {n: {"full_s": full[n], "point_s": [s for s, _ in point[n]], "files": sides[n].files()} for n in sides}


def probe_delta(spark: Any) -> tuple[Delta | None, str | None]:
    """Delta's side, or the reason it cannot run on this Spark (an append and a read of a scratch table)."""
    import pyspark

    try:
        scratch = f"s3a://{BUCKET}/delta-probe"
        rows(spark, 0, 3).write.format("delta").mode("append").save(scratch)
        assert spark.read.format("delta").load(scratch).count() == 3
        return Delta(spark), None
    except Exception as exc:  # a jar built for another Spark fails in many ways (NoSuchMethodError, ...)
        text = str(exc).strip().splitlines()
        first = next((line for line in text if "Error" in line or "Exception" in line), text[0] if text else "")
        return None, f"delta-spark {delta_coordinate().rsplit(':', 1)[1]} on Spark {pyspark.__version__}: {first[:400]}"


def run() -> list[Result]:
    import tempfile

    small_repeats, big_repeats, read_repeats = pick(3, 5), pick(2, 3), pick(3, 5)
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="ordo-bench-cluster-"))
    with cluster_topology(work) as (spark, settings):
        sides: dict[str, Any] = {"ordo": Ordo(spark, settings)}
        delta, delta_error = probe_delta(spark)
        print(f"cluster: Delta {'runs' if delta_error is None else 'does not run: ' + delta_error}", flush=True)
        if delta is not None:
            sides["delta"] = delta
        for side in sides.values():
            side.append(rows(spark, -10, 10))  # warm-up: JVMs, Kafka, the S3 clients
        starts = dict.fromkeys(sides, 0)

        def appending(name: str, count: int) -> Callable[[int], dict[str, Any]]:
            def go(_round: int) -> dict[str, Any]:
                first = starts[name]
                starts[name] += count
                return sides[name].append(rows(spark, first, count))

            return go

        big = progress("~100 MB appends", interleave({n: appending(n, BIG_ROWS) for n in sides}, big_repeats))
        small = progress("1-row appends", interleave({n: appending(n, SMALL_ROWS) for n in sides}, small_repeats))
        uncompacted = progress("reads, uncompacted", reads(sides, read_repeats))
        compaction = progress("compaction", {n: s.compact() for n, s in sides.items()})
        compacted = progress("reads, compacted", reads(sides, read_repeats))
        seeds = seeds_scenario(spark, settings, work, delta_error)
    load_after = os.getloadavg()
    loads = {"load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after]}
    figures = [
        ("1-row append", "s", {n: [r["total_s"] for r in small[n]] for n in small}, small),
        ("~100 MB append", "s", {n: [r["total_s"] for r in big[n]] for n in big}, big),
        ("full read, uncompacted", "s", {n: uncompacted[n]["full_s"] for n in sides}, uncompacted),
        ("point read, uncompacted", "s", {n: uncompacted[n]["point_s"] for n in sides}, uncompacted),
        ("full read, compacted", "s", {n: compacted[n]["full_s"] for n in sides}, compacted),
        ("point read, compacted", "s", {n: compacted[n]["point_s"] for n in sides}, compacted),
    ]
    results = [figure(label, unit, values, detail, loads, delta_error) for label, unit, values, detail in figures]
    results.append(
        Result(
            BENCHMARK,
            "major compaction of the table (ordo compact('major') / Delta OPTIMIZE)",
            "s",
            compaction["ordo"],
            peer=peer_name(),
            peer_value=compaction.get("delta"),
            ratio=ratio(compaction["ordo"], compaction.get("delta")),
            samples=loads,
            notes=delta_error or "one run each",
            machine=machine(),
        )
    )
    return results + seeds


def seeds_scenario(spark: Any, settings: Any, work: Path, delta_error: str | None) -> list[Result]:
    """Workload 1 of ``bench.peers_spark`` on this cluster, tables on S3: ordo's, then Delta's (unless it cannot
    run here: ``delta_error``)."""
    from bench.peers_spark import _seeds_results, _seeds_run, seeds_found

    seconds = float(os.environ.get("BENCH_CLUSTER_SEEDS_SECONDS") or pick(60.0, 300.0))
    if seconds <= 0:
        return []
    locations = {"ordo": f"s3://{BUCKET}/seeds", "delta": f"s3a://{BUCKET}/delta-seeds"}
    runs: dict[str, Any] = {}
    errors: dict[str, str] = {} if delta_error is None else {"delta": delta_error}
    for system, location in locations.items():
        if system in errors:
            continue
        try:
            runs[system] = progress(
                f"seeds' scenario, {system}", _seeds_run(system, spark, work, settings, seconds, location)
            )
        except Exception as exc:
            errors[system] = f"{type(exc).__name__}: {str(exc)[:1500]}"
    found = seeds_found(seconds, runs, errors, locations=locations)
    versions = {"delta": peer_name()}
    return [
        dataclasses.replace(
            r,
            benchmark=BENCHMARK,
            figure=r.figure.replace("seeds' scenario", "seeds' scenario on the cluster", 1),
            peer=peer_name() if r.peer == "delta" else r.peer,
            notes="; ".join(x for x in ("Spark standalone (2 workers x 1 core), tables on S3Proxy", r.notes) if x),
        )
        for r in _seeds_results(found, versions)
    ]


def peer_name() -> str:
    return f"Delta Lake (delta-spark {delta_coordinate().rsplit(':', 1)[1]})"


def figure(
    label: str,
    unit: str,
    values: dict[str, list[float]],
    detail: dict[str, Any],
    loads: dict[str, Any],
    delta_error: str | None,
) -> Result:
    ours = median(values["ordo"])
    theirs = median(values["delta"]) if "delta" in values else None
    samples: dict[str, Any] = {"ordo": detail["ordo"], **loads}
    if "delta" in detail:
        samples["delta"] = detail["delta"]
    notes = "Spark standalone (2 workers x 1 core), tables on S3Proxy; median of interleaved repeats"
    return Result(
        BENCHMARK,
        f"{label}: wall time on the cluster, tables on S3",
        unit,
        round(ours, 3),
        peer=peer_name(),
        peer_value=None if theirs is None else round(theirs, 3),
        ratio=ratio(ours, theirs),
        samples=samples,
        notes=notes if delta_error is None else f"{notes}; Delta did not run: {delta_error}",
        machine=machine(),
    )


if __name__ == "__main__":
    from bench.common import table

    print(table(run()))
