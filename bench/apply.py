"""Consumer apply rate through the broker: an ``ordo consumer``'s materializer reading a decisions log into SQLite.

On each broker of the run (``BENCH_BROKERS``: Tansu, then a 1-node Apache
Kafka): ``decisions`` INSERT decisions of 4 files each (signed every 100, as
the arbiter's batches) are produced to a decisions topic, then a
``Materializer`` starts and the figure is decisions applied per second from its
start to the last one in the catalog (start-up, topic discovery, fetching,
signature verification, the chain check and the SQLite rows included).
``bench/consumer_quick.py``'s ``bench_kafka``; ``scale`` has the same apply
without a broker.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.common import Result, broker_label, brokers, machine, median, pick

BENCHMARK = "consumer apply through the broker"


def run() -> list[Result]:
    from bench import consumer_quick

    decisions = pick(25_000, 100_000)
    records = consumer_quick.build_log(decisions)
    results = []
    for kind in brokers():
        runs = []
        for _ in range(pick(2, 3)):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(consumer_quick.bench_kafka(records, Path(tmp) / "catalog.db", 100, broker=kind))
        rate = median(r["decisions_per_s"] for r in runs)
        results.append(
            Result(
                BENCHMARK,
                f"decisions/s from the decisions log into the SQLite catalog (4 files each) [{broker_label(kind)}]",
                "decisions/s",
                round(rate),
                samples={"decisions": decisions, "decisions_per_s": [r["decisions_per_s"] for r in runs]},
                notes="consumer_quick.bench_kafka: records produced first, then the materializer started and timed "
                "to the last applied (start-up included); signed every 100 decisions, verified",
                machine=machine(),
            )
        )
    return results


if __name__ == "__main__":
    os.environ.setdefault("BENCH_PROFILE", "quick")
    from bench.common import table

    print(table(run()))
