"""Where a one-row append through Spark goes (issue 29): the Spark write job against the driver-side write.

    .venv-bench-spark/bin/python -m bench.append_profile [appends per block] [rounds]

One local Spark session with ``bench.peers_spark``'s settings and one embedded stack (Tansu, ``ordo arbiter``,
``ordo consumer``); the append is workload 2's: ``spark.range(1)`` projected to one row ``(id, v, p)`` and
``DeltaTable.insert_into``. Blocks of appends alternate between ``spark.ordo.driverWrite.maxBytes=0`` (every
write and check a Spark job: the path before issue 29) and the default (small rows on the driver), after a
warm-up of each, with the 1-minute load average at the start of each block. Printed per path: wall p50, min,
max, and the p50 of each phase the transaction times (``validate``, ``spark_write``, ``publish_decision``,
``catalog_wait``; ``stage`` is all of ``insert_into``); then a cProfile of the driver-side path, by cumulative
time, in this (the driver's) Python process.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import stack
from bench.peers_spark import SCHEMA, _row, _session
from ordo.producer.smallwrites import DEFAULT_DRIVER_WRITE_MAX_BYTES, DRIVER_WRITE_CONF

PATHS = {"job": "0", "driver": str(DEFAULT_DRIVER_WRITE_MAX_BYTES)}


def _load() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return f.read().split()[0]


def _p50(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] * 1000


class _Appends:
    """One table's appends, timed per path and phase."""

    def __init__(self, spark: Any, settings: Any) -> None:
        from ordo.producer.table import DeltaTable

        self.spark = spark
        self.table = DeltaTable.create(
            spark, "append_profile", schema=SCHEMA, primary_key="id", partitioned_by="p", settings=settings
        )
        self.key = 0
        self.walls: dict[str, list[float]] = {path: [] for path in PATHS}
        self.phases: dict[str, dict[str, list[float]]] = {path: {} for path in PATHS}

    def use(self, path: str) -> None:
        self.spark.conf.set(DRIVER_WRITE_CONF, PATHS[path])

    def one(self, path: str, profile: cProfile.Profile | None = None) -> None:
        self.key += 1
        started = time.perf_counter()
        if profile is not None:
            profile.enable()
        with self.table.begin() as txn:
            staging = time.perf_counter()
            txn.insert_into(_row(self.spark, self.key, "w0"))
            committing = time.perf_counter()
            txn.commit(retries=1000)
            done = time.perf_counter()
        if profile is not None:
            profile.disable()
        self.walls[path].append(time.perf_counter() - started)
        timings = {**txn.timings, "stage": committing - staging, "commit": done - committing}
        for phase, seconds in timings.items():
            self.phases[path].setdefault(phase, []).append(seconds)

    def report(self) -> None:
        for path, walls in self.walls.items():
            print(
                f"{path}: n={len(walls)} p50 {_p50(walls):.1f} ms, min {min(walls) * 1000:.1f}, max {max(walls) * 1000:.1f}"
            )
            for phase, seconds in self.phases[path].items():
                print(f"    {phase}: p50 {_p50(seconds):.1f} ms")


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 10
    rounds = int(argv[1]) if len(argv) > 1 else 2
    work = Path(tempfile.mkdtemp(prefix="ordo-append-profile-"))
    with stack("append-profile") as running:
        spark = _session(work, ("ordo",))
        appends = _Appends(spark, running.settings)
        for path in PATHS:  # warm-up: the first job of each kind pays class loading
            appends.use(path)
            for _ in range(3):
                appends.one(path)
            appends.walls[path].clear()
            appends.phases[path].clear()
        loads = []
        for _ in range(rounds):
            for path in PATHS:
                appends.use(path)
                loads.append(f"{path} {_load()}")
                for _ in range(count):
                    appends.one(path)
        print(f"load average (1 min) at each block: {loads}")
        appends.report()
        appends.use("driver")
        profile = cProfile.Profile()
        for _ in range(count):
            appends.one("driver", profile)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
        print(f"load average at the end: {_load()}")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
