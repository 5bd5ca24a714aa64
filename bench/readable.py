"""Commit to readable: from a writer holding its decision to the version being readable in the catalog.

One writer commits in a closed loop (metadata-only INSERT_INTO of 4 files, as
in ``bench.latency``) against an ``ordo arbiter`` subprocess; an ``ordo
consumer`` subprocess materializes the SQLite catalog. After each accepted
commit this process polls the catalog file (``Catalog.head``, a read
transaction, every 0.5 ms) until the commit's ID version is there. The figure
is the time from ``commit()`` returning to that moment: a slight underestimate
of "from the decision's Kafka commit" (the decision was committed a fetch
before the writer read it). The writer pauses a random 0-20 ms between commits
so the samples fall anywhere in the consumer's fetch cycle.

Also reported: the idle consumer's CPU (a share of one core, from ``/proc``)
over ``idle_seconds``, since a shorter fetch wait costs idle CPU on Tansu (an
empty fetch is answered only after the full wait).
"""

from __future__ import annotations

import os
import random
import time

from bench.common import Result, machine, percentile, pick, stack
from bench.latency import idle_cpu
from bench.workload import TABLE, create_intent, insert_intent

BENCHMARK = "commit to readable"


def run() -> list[Result]:
    from ordo.consumer import Catalog
    from ordo.kernel.settings import resolve_waits
    from ordo.producer import CommitClient

    commits = pick(300, 2000)
    idle_seconds = pick(10, 30)
    rng = random.Random(7)
    samples: list[float] = []
    with stack("readable", "rd") as bench_stack:
        settings, consumer = bench_stack.settings, bench_stack.consumer
        client = CommitClient(settings=settings)
        try:
            client.commit(create_intent(), timeout=60)
            with Catalog(settings.catalog) as catalog:
                catalog.wait_for_version(TABLE, 0, timeout=60)
                version = 0
                for n in range(commits + 20):
                    decision = client.commit(insert_intent(n, partition="w", read_version=version), timeout=30)
                    decided = time.perf_counter()
                    if not decision.accepted or decision.id_version is None:
                        raise RuntimeError(f"commit rejected: {decision.reason} {decision.message}")
                    version = decision.id_version
                    deadline = decided + 30
                    while catalog.head(TABLE) < version:
                        if time.perf_counter() > deadline:
                            raise RuntimeError(f"version {version} not readable within 30 s")
                        time.sleep(0.0005)
                    if n >= 20:  # warm-up
                        samples.append((time.perf_counter() - decided) * 1000)
                    time.sleep(rng.uniform(0, 0.02))
            time.sleep(3)
            idle = idle_cpu({"consumer": consumer.pid}, idle_seconds)
        finally:
            client.close()
    stats = {q: round(percentile(samples, p), 2) for q, p in (("p50", 50), ("p90", 90), ("p99", 99))}
    stats["max"] = round(max(samples), 2)
    common = {
        "samples": {"commits": len(samples), **stats, "idle_consumer_cpu_percent": idle["consumer"]},
        "machine": machine(),
        "notes": f"{len(samples)} closed-loop commits (random 0-20 ms pauses) after 20 warm-up; SQLite catalog "
        f"polled every 0.5 ms; consumer fetch wait {resolve_waits(settings, 'tansu').consumer} ms; embedded Tansu broker",
    }
    return [
        Result(
            BENCHMARK,
            "p50 decision in hand to version readable",
            "ms",
            stats["p50"],
            target="(p99 is the target)",
            **common,
        ),
        Result(
            BENCHMARK,
            "p99 decision in hand to version readable",
            "ms",
            stats["p99"],
            target="<= 50 ms",
            met=stats["p99"] <= 50,
            **common,
        ),
        Result(
            BENCHMARK,
            "idle consumer CPU",
            "% of a core",
            idle["consumer"],
            **{**common, "samples": {"idle_cpu_percent": idle, "seconds": idle_seconds}},
        ),
    ]


if __name__ == "__main__":
    os.environ.setdefault("BENCH_PROFILE", "quick")
    from bench.common import table

    print(table(run()))
