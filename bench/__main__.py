"""Run the benchmarks: ``python -m bench [name ...]`` (``make bench``); ``BENCH_PROFILE=full`` for the large ones.

Prints a Markdown table and writes ``bench/results.json``: one object per
benchmark with its figures (ours, the peer's, their ratio, the target) and the
machine they were measured on. Names: core, throughput, latency, pipeline, apply, fleet, closed-loop, readable, peers, scale,
spark, datasource, service, compaction (default: all, in that order; Spark last); peers-spark (ordo, Delta Lake and
Iceberg on Spark: run it alone, from ``make bench-peers-spark``, which builds its venv); object-store (appends on
S3 against local disk: run it alone, ``python -m bench object-store``); cluster (ordo beside Delta Lake on a Spark
standalone cluster, tables on S3: run it alone, ``python -m bench cluster``). Running some of them replaces
their entries in an existing ``results.json`` and keeps the others (each entry
says when it was measured and in which profile). A benchmark that fails is
recorded as an error with its reason, and the others still run.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from datetime import UTC, datetime

from bench.common import ROOT, Result, brokers, machine, profile, table

BENCHMARKS = {
    "core": "pure hot path",
    "throughput": "arbiter throughput",
    "latency": "commit latency",
    "pipeline": "pipelined commit client",
    "apply": "consumer apply through the broker",
    "fleet": "fleet handover",
    "closed-loop": "closed-loop writers",
    "readable": "commit to readable",
    "peers": "8 writers vs peers",
    "scale": "scale",
    "spark": "spark",
    "datasource": 'format("ordo") sink and change feed',
    "service": "table service",
    "compaction": "table service capacity",
    "peers-spark": "peers on Spark",
    "object-store": "appends on S3 vs local disk",
    "cluster": "ordo beside Delta Lake on a Spark cluster, tables on S3",
}
RESULTS = ROOT / "bench" / "results.json"
OWN_VENV = {"peers-spark"}  # not in the default run: it needs the venv make bench-peers-spark builds
# not in the default run: object-store and cluster run S3Proxy (make s3 fetches it); cluster needs a PySpark that
# delta-spark supports (4.2) for Delta's side
ALONE = OWN_VENV | {"object-store", "cluster"}


def module(name: str) -> str:
    """The module of benchmark ``name`` (``peers-spark`` is ``bench.peers_spark``)."""
    return f"bench.{name.replace('-', '_')}"


def main(argv: list[str]) -> int:
    names = argv or [n for n in BENCHMARKS if n not in ALONE]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}", file=sys.stderr)
        return 2
    started = time.time()
    at_start = machine()
    print(
        f"bench: profile {profile()}, brokers {', '.join(brokers())}, {', '.join(names)}; "
        f"load average {at_start['load_average']}",
        flush=True,
    )
    report: list[dict[str, object]] = []
    everything: list[Result] = []
    for name in names:
        t0 = time.perf_counter()
        print(f"--- {name}", flush=True)
        try:
            results = importlib.import_module(module(name)).run()
        except Exception as exc:
            traceback.print_exc()
            results = [
                Result(
                    BENCHMARKS[name],
                    "(benchmark failed)",
                    "",
                    None,
                    status="error",
                    notes=f"{type(exc).__name__}: {exc}"[:2000],
                    machine=machine(),
                )
            ]
        seconds = time.perf_counter() - t0
        print(table(results), flush=True)
        print(f"({name}: {seconds:.0f} s)", flush=True)
        everything.extend(results)
        report.append(
            {
                "benchmark": BENCHMARKS[name],
                "module": module(name),
                "profile": profile(),
                "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "seconds": round(seconds, 1),
                "machine": results[0].machine if results else machine(),
                "figures": [{k: v for k, v in r.to_json().items() if k != "machine"} for r in results],
            }
        )
    finished = time.time()
    report = _merge(report)
    document = {
        "profile": profile(),
        "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "duration_s": round(finished - started, 1),
        "machine": at_start,
        "load_average_at_end": machine()["load_average"],
        "benchmarks": report,
    }
    RESULTS.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print("\n" + table(everything))
    print(f"\nwrote {RESULTS.relative_to(ROOT)} ({document['duration_s']:.0f} s, profile {profile()})")
    try:
        from bench.plot import draw

        drawn = draw(RESULTS)
        if drawn is not None:
            print(f"drew {drawn.relative_to(ROOT)}")
    except ImportError as exc:  # matplotlib comes with the bench extra
        print(f"no latency plot: {exc}")
    return 0 if all(r.status != "error" for r in everything) else 1


def _merge(report: list[dict[str, object]]) -> list[dict[str, object]]:
    """This run's benchmarks, plus the other benchmarks of an existing results.json (each keeps its profile)."""
    try:
        previous = json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        return report
    ran = {entry["module"] for entry in report}
    kept = {
        entry["module"]: {"profile": previous.get("profile"), **entry}  # entries older than per-entry profiles
        for entry in previous.get("benchmarks", [])
        if entry.get("module") not in ran
    }
    merged = {entry["module"]: entry for entry in report} | kept
    order = [module(name) for name in BENCHMARKS]
    return [merged[m] for m in order if m in merged]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
