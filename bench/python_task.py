"""What a Python task costs Spark, beside its work: the floor under every ``format("ordo")`` read.

    .venv-bench-spark/bin/python -m bench.python_task [repeats]

A Python data source (defined here, no ordo) that builds its rows in Arrow and does nothing else, read into
``noop`` or collected, against Spark's own Parquet scan of the same rows, on ``local[2]`` with the peers'
benchmark settings (``bench.peers_spark._session``, which reaches Python workers over a Unix socket), then the same
with loopback TCP (``spark.python.unix.domain.socket.enabled=false``, Spark's default). Each figure is the median
of ``repeats`` (default 5), after one warm-up, with the 1-minute load average:

* ``100,000 rows in N tasks``: the same rows split into 2, 4, 8 or 16 input partitions: what each task more costs;
* ``1 row, 1 task, filtered and collected``: a point read's floor;
* ``parquet``: Spark's JVM scan of the same 100,000 rows (one file) into ``noop``, and a point read of it.

Each configuration runs in a child process of its own (a Spark conf of the Python workers is read when the
SparkContext starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROWS = 100_000


def _child(repeats: int) -> dict[str, float]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from bench.peers_spark import _session
    from bench.read_profile import _median

    work = Path(tempfile.mkdtemp(prefix="ordo-python-task-"))
    spark = _tcp_session(work) if os.environ.get("BENCH_PYTHON_TASK_TCP") else _session(work, ("ordo",))

    class Reader(DataSourceReader):
        def __init__(self, rows: int, parts: int) -> None:
            self.rows, self.parts = rows, parts

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(self.parts)]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow as pa

            k = self.rows // self.parts
            ids = pa.array(range(partition.value * k, (partition.value + 1) * k), pa.int64())
            yield from pa.table({"id": ids, "v": pa.array([f"v{i}" for i in range(k)])}).to_batches()

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_python_task"

        def schema(self) -> str:
            return "id bigint, v string"

        def reader(self, schema: Any) -> Reader:
            return Reader(int(self.options["rows"]), int(self.options["parts"]))

    spark.dataSource.register(Source)

    def timed(action: Any) -> float:
        action()  # warm-up: the Python workers, the classes
        return _median(action, repeats)

    def source(rows: int, parts: int) -> Any:
        return spark.read.format("bench_python_task").option("rows", rows).option("parts", parts).load()

    def noop(df: Any) -> None:
        df.write.format("noop").mode("overwrite").save()

    figures = {}
    for parts in (2, 4, 8, 16):
        figures[f"100,000 rows in {parts} tasks"] = timed(lambda p=parts: noop(source(ROWS, p)))
    figures["1 row, 1 task, filtered and collected"] = timed(lambda: source(1, 1).where("id = 0").collect())
    path = str(work / "plain")
    pq.write_table(pa.table({"id": pa.array(range(ROWS), pa.int64()), "v": [f"v{i}" for i in range(ROWS)]}), path)
    figures["parquet, 100,000 rows"] = timed(lambda: noop(spark.read.parquet(path)))
    figures["parquet, point read collected"] = timed(lambda: spark.read.parquet(path).where("id = 5").collect())
    spark.stop()
    return figures


def _tcp_session(work: Path) -> Any:
    """``_session`` with Spark's default loopback TCP to the Python workers."""
    from bench.peers_spark import _session
    from ordo.spark import session

    saved = dict(session.PYTHON_WORKER_SETTINGS)
    session.PYTHON_WORKER_SETTINGS["spark.python.unix.domain.socket.enabled"] = "false"
    try:
        return _session(work, ("ordo",))
    finally:
        session.PYTHON_WORKER_SETTINGS.clear()
        session.PYTHON_WORKER_SETTINGS.update(saved)


def main(argv: list[str]) -> int:
    if os.environ.get("BENCH_PYTHON_TASK_CHILD"):
        print(json.dumps(_child(int(argv[0]) if argv else 5)))
        return 0
    repeats = argv[0] if argv else "5"
    results: dict[str, dict[str, float]] = {}
    load = os.getloadavg()[0]
    for name, extra in (("unix socket", {}), ("loopback tcp", {"BENCH_PYTHON_TASK_TCP": "1"})):
        env = os.environ | {"BENCH_PYTHON_TASK_CHILD": "1"} | extra
        done = subprocess.run(
            [sys.executable, "-m", "bench.python_task", repeats], env=env, capture_output=True, text=True, check=True
        )
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"python task: load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    for figure in results["unix socket"]:
        row = ", ".join(f"{name} {results[name][figure] * 1000:.0f} ms" for name in results)
        print(f"    {figure}: {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
