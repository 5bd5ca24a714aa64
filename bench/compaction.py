"""The table service's capacity: groups compacted per minute and the backlog left beside a stream, by partitions.

``python -m bench compaction`` (quick: about 9 minutes; ``BENCH_PROFILE=full``: about 20). One stack on
loopback (broker, ``ordo arbiter``, ``ordo consumer``) and one ``ordo compactor`` process, the service as
operators run it (Spark ``local[2]``, ``--interval 1``, the default of 2 tables at once), following every
table. For each of 1, 16 and 64 partitions (``BENCH_COMPACTION_PARTITIONS`` chooses), a fresh table
(key ``id``, partitioned by ``part``, 4 buckets, the default compaction policy: ``min_files`` 8, cold after
30 s) gets a stream: one micro-batch every 2 s, an INSERT INTO of ``ROWS_PER_PARTITION`` rows into every
partition (upserts over a bounded key space, so each batch adds a file to every (partition, bucket)
group). The stream's files are written with pyarrow in this process (``producer.arrow``, what the
``format("ordo")`` sink's tasks run), so the service has Spark to itself. Every 2 s: the live files of
each partition (catalog) and the service's counters (its ``/metrics``).

The stream runs 90 s (quick) or 300 s (full; ``BENCH_COMPACTION_WRITE_SECONDS`` sets it), then stops;
the backlog is then followed for ``DRAIN_SECONDS`` (60 s). Figures per partition count: groups compacted
per minute while the stream runs (``ordo_compactor_groups_total`` over the steady state, which starts when
the second rewrite landed: until the first has landed the service has no time of the table's rewrites to
start MINORs early by, so that cycle overshoots; the worst sample since the first is kept too); live files
per partition at steady state (the median and the worst of each sample's most-filled partition), against
the table's bound ``min_files x buckets + buckets`` = 36; the same 60 s after the writes stopped; the time
the backlog took to drain (every partition back to one file per bucket, which needs the partitions to turn cold: 30 s).
The service's batches (groups, seconds, Spark's part) are kept with the figures, and the time from the
service's start to ready with its CPU seconds. The load average at the start and the end of each run is
recorded: the machine is shared. ``BENCH_COMPACTION_MASTER`` runs the service on another Spark master.
Then the same stream, for 16 partitions (``BENCH_COMPACTION_CLUSTER_PARTITIONS``; empty skips it), with the
service on a Spark standalone cluster started here (``ordo.services.cluster``: a master and 2 workers of 1 core
and 1 GiB, executors running ordo from its wheel in their own Python, as tests/cluster and ``make cluster`` run
it). The table lives on the local disk, which the executors share on one machine.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import statistics
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import Result, cpu_seconds, machine, pick, stack

BENCHMARK = "table service capacity"
BUCKETS = 4
MIN_FILES = 8  # the default ordo.compaction.min_files
BOUND = MIN_FILES * BUCKETS + BUCKETS
BATCH_SECONDS = 2.0
ROWS_PER_PARTITION = 200  # per micro-batch: about 50 per (partition, bucket) group
KEYS_PER_PARTITION = 2_000
SAMPLE_SECONDS = 2.0
DRAIN_SECONDS = 60.0
COMPACTOR_INTERVAL = "1"
PARTITIONS = (1, 16, 64)
CLUSTER_PARTITIONS = (16,)
CLUSTER_WORKERS = 2
WHERE_CLUSTER = f"; the service on a Spark standalone cluster ({CLUSTER_WORKERS} workers x 1 core)"


def create_table(settings: Any, name: str, **properties: str) -> Any:
    """A table (``id`` key, partitioned by ``part``, 4 buckets, ``properties``) created with a CREATE TABLE intent,
    no Spark in this process; its ``Layout`` (for ``producer.arrow`` writes)."""
    from ordo.producer.connection import shared_connection
    from ordo.producer.data import Layout
    from ordo.schemas import CommitIntent, Operation, TableMetadata

    metadata = TableMetadata(
        location=str(Path(settings.warehouse).resolve() / name),
        schema="`id` bigint, `v` string, `part` string",
        primary_key=("id",),
        partition_columns=("part",),
        properties={"ordo.buckets": str(BUCKETS), **properties},
    )
    connection = shared_connection(settings)
    intent = CommitIntent(
        txn_id=uuid.uuid4().hex, table=name, operation=Operation.CREATE_TABLE, read_version=0, metadata=metadata
    )
    decision = connection.client.commit(intent, timeout=60.0)
    if not decision.accepted:
        raise RuntimeError(f"CREATE TABLE {name}: {decision.reason}")
    connection.catalog.wait_for_version(name, 0, timeout=60.0)
    return Layout.of(name, metadata)


class Stream:
    """One micro-batch every ``BATCH_SECONDS``: an INSERT INTO of every partition, written with pyarrow."""

    def __init__(self, settings: Any, layout: Any, partitions: int) -> None:
        self.settings = settings
        self.layout = layout
        self.partitions = partitions
        self.batches = 0
        self.rejected = 0
        self.late = 0  # batches that took longer than the period
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-stream", daemon=True)

    def start(self) -> Stream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        try:
            next_at = time.monotonic()
            while not self._stop.is_set():
                self._batch()
                next_at += BATCH_SECONDS
                delay = next_at - time.monotonic()
                if delay < 0:
                    self.late += 1
                    next_at = time.monotonic()
                self._stop.wait(max(0.0, delay))
        except BaseException as exc:
            self.error = exc

    def _batch(self) -> None:
        import pyarrow as pa

        from ordo.producer.arrow import insert_intent
        from ordo.producer.connection import shared_connection

        n = self.batches
        ids, parts = [], []
        for p in range(self.partitions):
            base = p * KEYS_PER_PARTITION
            start = (n * ROWS_PER_PARTITION) % KEYS_PER_PARTITION
            ids += [base + (start + i) % KEYS_PER_PARTITION for i in range(ROWS_PER_PARTITION)]
            parts += [str(p)] * ROWS_PER_PARTITION
        rows = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([f"b{n}"] * len(ids)), "part": parts})
        connection = shared_connection(self.settings)
        head = connection.catalog.table(self.layout.name).head_version
        intent = insert_intent(rows, self.layout, uuid.uuid4().hex, int(head), writer="bench-compaction")
        decision = connection.client.commit(intent, timeout=60.0)
        if not decision.accepted:
            self.rejected += 1
            return
        connection.catalog.wait_for_version(self.layout.name, int(decision.id_version or 0), timeout=60.0)
        self.batches += 1


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the service's Spark JVM runs in a session of its own)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


def _groups(metrics_url: str, table: str) -> float:
    """``ordo_compactor_groups_total`` of ``table``, every operation."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("ordo_compactor_groups_total{") and f'table="{table}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _files_per_partition(settings: Any, name: str) -> list[int]:
    from ordo.producer.connection import shared_connection

    counts: dict[str, int] = {}
    for f in shared_connection(settings).catalog.snapshot(name).files:
        counts[f.partition["part"]] = counts.get(f.partition["part"], 0) + 1
    return list(counts.values())


def _batches(log: str, table: str) -> list[dict[str, float]]:
    """The service's batches of ``table`` from its log: groups, seconds in all and in Spark."""
    found = []
    pattern = rf"{table} (\w+): \d+ partition\(s\), (\d+) group\(s\), .* in ([\d.]+) s \(Spark ([\d.]+) s\)"
    for match in re.finditer(pattern, log):
        found.append(
            {
                "operation": match.group(1),
                "groups": int(match.group(2)),
                "s": float(match.group(3)),
                "spark_s": float(match.group(4)),
            }
        )
    return found


def _measure(settings: Any, metrics_url: str, partitions: int, write_seconds: float, warm: float) -> dict[str, Any]:
    name = f"stream_{partitions}p"
    layout = create_table(settings, name)
    load_start = [round(x, 2) for x in os.getloadavg()]
    stream = Stream(settings, layout, partitions).start()
    started = time.monotonic()
    samples: list[dict[str, Any]] = []
    stopped_at: float | None = None
    drained_at: float | None = None
    try:
        while True:
            time.sleep(SAMPLE_SECONDS)
            t = time.monotonic() - started
            if stopped_at is None and t >= write_seconds:
                stream.stop()
                stopped_at = time.monotonic() - started
            if stream.error is not None:
                raise RuntimeError(f"the stream failed: {stream.error}")
            counts = _files_per_partition(settings, name)
            sample = {
                "t": round(t, 1),
                "batches": stream.batches,
                "max_files": max(counts, default=0),
                "mean_files": round(statistics.fmean(counts), 1) if counts else 0,
                "groups": _groups(metrics_url, name),
            }
            samples.append(sample)
            if stopped_at is not None and drained_at is None and sample["max_files"] <= BUCKETS:
                drained_at = t
            if stopped_at is not None and t >= stopped_at + DRAIN_SECONDS:
                break
    finally:
        stream.stop()
    assert stopped_at is not None
    # steady state: from the second rewrite landed. Until the first has landed the service has not timed a
    # rewrite of the table, so it starts MINORs at min_files without a lead: that first cycle overshoots.
    landed = [later["t"] for earlier, later in itertools.pairwise(samples) if later["groups"] > earlier["groups"]]
    start = landed[1] if len(landed) > 1 else stopped_at
    steady = [s for s in samples if max(warm, start) <= s["t"] <= stopped_at]
    since_first = [s["max_files"] for s in samples if landed and landed[0] <= s["t"] <= stopped_at]
    minutes = (steady[-1]["t"] - steady[0]["t"]) / 60 if len(steady) > 1 else 0
    after = [s for s in samples if s["t"] >= stopped_at + DRAIN_SECONDS - SAMPLE_SECONDS]
    return {
        "partitions": partitions,
        "groups": partitions * BUCKETS,
        "bound": BOUND,
        "write_seconds": round(stopped_at, 1),
        "batches": stream.batches,
        "batches_late": stream.late,
        "insert_rejections": stream.rejected,
        "groups_per_minute": round((steady[-1]["groups"] - steady[0]["groups"]) / minutes, 1) if minutes else None,
        "steady_median_max_files": statistics.median(s["max_files"] for s in steady) if steady else None,
        "steady_worst_max_files": max((s["max_files"] for s in steady), default=None),
        "steady_from_s": start,
        "worst_since_the_first_rewrite": max(since_first, default=None),
        "max_files_60s_after": after[0]["max_files"] if after else samples[-1]["max_files"],
        "drained_after_s": None if drained_at is None else round(drained_at - stopped_at, 1),
        "load_average": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "samples": samples,
    }


def _figures(run: dict[str, Any], ready_s: float) -> list[Result]:
    p = run["partitions"]
    label = f"{p} partition{'s' if p > 1 else ''} x {BUCKETS} buckets, a micro-batch every {BATCH_SECONDS:g} s"
    label += run.get("where", "")
    load = run["load_average"]
    notes = (
        f"load average {load['start']} at the start, {load['end']} at the end; {run['batches']} micro-batches "
        f"({run['batches_late']} late) in {run['write_seconds']} s; `ordo compactor` {run['master']}, interval "
        f"{COMPACTOR_INTERVAL} s, ready after {ready_s} s"
    )
    steady_ok = run["steady_worst_max_files"] is not None and run["steady_worst_max_files"] <= BOUND
    drained = run["drained_after_s"]
    samples = {k: v for k, v in run.items() if k != "samples"} | {"samples": run["samples"]}
    return [
        Result(
            BENCHMARK,
            f"groups compacted per minute, steady state [{label}]",
            "groups/min",
            run["groups_per_minute"],
            samples=samples,
            notes=notes,
            machine=machine(),
        ),
        Result(
            BENCHMARK,
            f"live files per partition at steady state, median of the fullest partition [{label}]",
            "files",
            run["steady_median_max_files"],
            peer="worst sample",
            peer_value=run["steady_worst_max_files"],
            target=f"<= {BOUND} (min_files x buckets + buckets)" if p == 16 else None,
            met=steady_ok if p == 16 else None,
            notes=f"insert rejections: {run['insert_rejections']}; " + notes,
            machine=machine(),
        ),
        Result(
            BENCHMARK,
            f"live files per partition 60 s after the writes stopped (fullest partition) [{label}]",
            "files",
            run["max_files_60s_after"],
            notes=notes,
            machine=machine(),
        ),
        Result(
            BENCHMARK,
            f"seconds from the writes' end until every partition holds one file per bucket [{label}]",
            "s",
            drained,
            target=f"<= {DRAIN_SECONDS:g} s" if p == 16 else None,
            met=(drained is not None and drained <= DRAIN_SECONDS) if p == 16 else None,
            notes=f"the partitions turn cold {30} s after their last write (ordo.compaction.cold_seconds), then "
            "get their MAJOR COMPACT; " + notes,
            machine=machine(),
        ),
    ]


def _counts(variable: str, default: tuple[int, ...]) -> list[int]:
    chosen = os.environ.get(variable)
    return [int(p) for p in chosen.split(",") if p.strip()] if chosen is not None else list(default)


def run() -> list[Result]:
    """The service on local Spark (``BENCH_COMPACTION_PARTITIONS``), then on a standalone cluster
    (``BENCH_COMPACTION_CLUSTER_PARTITIONS``, default 16); an empty list skips its part."""
    local = _counts("BENCH_COMPACTION_PARTITIONS", PARTITIONS)
    results = _run_on(os.environ.get("BENCH_COMPACTION_MASTER", "local[2]"), local) if local else []
    on_cluster = _counts("BENCH_COMPACTION_CLUSTER_PARTITIONS", CLUSTER_PARTITIONS)
    if on_cluster:
        results += _run_on("cluster", on_cluster)
    return results


@contextmanager
def _service_master(master: str, work: Path) -> Iterator[tuple[str, str]]:
    """``(master URL, label suffix)`` for the service: ``master`` itself, or for ``"cluster"`` a Spark standalone
    cluster on loopback (``CLUSTER_WORKERS`` workers of 1 core and 1 GiB) whose executors run ordo from its wheel
    in their own Python. The driver settings (``SPARK_CONF_DIR``, ``PYSPARK_PYTHON``) go into this process's
    environment, which the compactor inherits; the environment is restored and the cluster stopped on exit."""
    if master != "cluster":
        yield master, ""
        return
    from ordo.broker.kafka import cache_root
    from ordo.services.cluster import SparkStandalone, build_wheel, driver_config, executor_python, write_spark_defaults

    root = Path(__file__).resolve().parents[1]
    python = executor_python(build_wheel(root, work / "wheel"), work / "executor-venv", cache_root())
    conf = write_spark_defaults(work / "spark-conf", driver_config({}, cores_max=CLUSTER_WORKERS))
    saved = dict(os.environ)
    with SparkStandalone(work / "spark", workers=CLUSTER_WORKERS) as cluster:
        try:
            os.environ.update(
                {"PYSPARK_PYTHON": str(python), "SPARK_CONF_DIR": str(conf), "SPARK_LOCAL_IP": "127.0.0.1"}
            )
            yield cluster.url, WHERE_CLUSTER
        finally:
            os.environ.clear()
            os.environ.update(saved)


def _run_on(master: str, counts: list[int]) -> list[Result]:
    from ordo.producer.table import close_connections

    write_seconds = float(os.environ.get("BENCH_COMPACTION_WRITE_SECONDS") or pick(90.0, 300.0))
    warm = pick(20.0, 60.0)
    results: list[Result] = []
    with stack("compaction") as bench_stack, _service_master(master, bench_stack.work) as (master, where):
        settings, work = bench_stack.settings, bench_stack.work
        started = time.monotonic()
        compactor = bench_stack.group.start_ordo(
            settings,
            "compactor",
            *("--master", master, "--interval", COMPACTOR_INTERVAL, "--metrics-port", "0"),
            name="compactor",
        )
        metrics_url = compactor.wait_for_line(r"compactor metrics at (\S+)/metrics", timeout=120).group(1) + "/metrics"
        ready = compactor.wait_for_line(r"compactor ready in ([\d.]+) s \(Spark ([\d.]+) s\)", timeout=300)
        ready_s = round(time.monotonic() - started, 1)
        ready_cpu_s = round(sum(cpu_seconds(pid) for pid in [compactor.pid, *children(compactor.pid)]), 1)
        print(f"compactor ready after {ready_s} s, {ready_cpu_s} CPU-s ({ready.group(0)})", flush=True)
        try:
            for partitions in counts:
                print(f"  {partitions} partitions ...", flush=True)
                measured = _measure(settings, metrics_url, partitions, write_seconds, warm)
                measured["master"] = master
                measured["where"] = where
                batches = measured["batches_of_the_service"] = _batches(compactor.log_text(), f"stream_{partitions}p")
                print(
                    f"  the service's batches (operation, groups, s, Spark s): {[tuple(b.values()) for b in batches]}"
                )
                print(
                    f"  {partitions} partitions: {measured['groups_per_minute']} groups/min, files per partition "
                    f"steady {measured['steady_median_max_files']} (worst {measured['steady_worst_max_files']}), "
                    f"60 s after {measured['max_files_60s_after']}, drained after {measured['drained_after_s']} s; "
                    f"load {measured['load_average']}",
                    flush=True,
                )
                results += _figures(measured, ready_s)
        finally:
            code = compactor.terminate(timeout=60)
            log = compactor.log_text()
            close_connections()
        if code != 0 or "Traceback" in log:
            raise RuntimeError(f"the compactor exited {code} or printed a traceback: {compactor.tail(40)}")
        results.append(
            Result(
                BENCHMARK,
                "`ordo compactor` start to ready (Spark start-up included)" + where,
                "s",
                ready_s,
                peer="CPU seconds to ready (the process and Spark's JVM)",
                peer_value=ready_cpu_s,
                notes=f"{re.sub(r'^.*?compactor ready', 'compactor ready', ready.group(0))}; load average "
                f"{[round(x, 2) for x in os.getloadavg()]} at the end",
                machine=machine(),
            )
        )
    shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    os.environ.setdefault("BENCH_PROFILE", "quick")
    from bench.common import table

    print(table(run()))
