"""Pipelined throughput of one ``CommitClient``: N intents in flight at once, end to end.

On each broker of the run (``BENCH_BROKERS``: Tansu, then a 1-node Apache Kafka).
One table; every intent a metadata-only INSERT_INTO of 4 files into its own
partition at read version 0 (none conflicts, all accepted). ``submit()`` is
called N times from one thread without waiting; the figure is N divided by the
time from the first ``submit()`` to the last decision in hand (publish, the
``ordo arbiter`` subprocess deciding in batches, the client's decision reader
verifying the signed batches and resolving each future). Run ``rounds`` times
on fresh tables; the median is reported. Also the CPU each process spent per
commit (client, arbiter, broker, from ``/proc``) and the cores they kept busy
together: on a 2-core machine the three share two cores, which bounds the rate.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import wait

from bench.common import Result, broker_label, brokers, cpu_seconds, machine, median, pick, stack
from bench.workload import create_intent, insert_intent

BENCHMARK = "pipelined commit client"


def run() -> list[Result]:
    return [_run(kind) for kind in brokers()]


def _run(kind: str) -> Result:
    from ordo.producer import CommitClient

    n = pick(20_000, 50_000)
    rounds = pick(3, 5)
    rates: list[float] = []
    cpu: list[dict[str, float]] = []  # per round, CPU microseconds per commit of each process
    with stack(f"pipe-{kind}", "pipe", consumer=False, broker=kind) as bench_stack:
        settings = bench_stack.settings
        pids = {"client": os.getpid(), "arbiter": bench_stack.arbiter.pid, "broker": bench_stack.broker.pid or 0}
        with CommitClient(settings=settings, resubmit_after=60) as client:
            for r in range(rounds):
                table = f"pipe{r}"
                client.commit(create_intent(table), timeout=60)
                intents = [insert_intent(i, table=table, partition=f"p{i}", txn_prefix=f"r{r}") for i in range(n)]
                before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                started = time.perf_counter()
                futures = [client.submit(intent, timeout=300) for intent in intents]
                wait(futures, timeout=300)
                elapsed = time.perf_counter() - started
                used = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
                cpu.append({name: round(1e6 * seconds / n, 1) for name, seconds in used.items()})
                cpu[-1]["cores_busy"] = round(sum(used.values()) / elapsed, 2)
                accepted = sum(1 for f in futures if f.done() and f.exception() is None and f.result().accepted)
                if accepted != n:
                    raise RuntimeError(f"round {r}: {accepted} of {n} commits accepted")
                rates.append(n / elapsed)
    value = round(median(rates))
    return Result(
        BENCHMARK,
        f"commits/s, one CommitClient, N intents in flight (4 files each) [{broker_label(kind)}]",
        "commits/s",
        value,
        target=">= 15,000/s",
        met=value >= 15_000,
        samples={
            "intents": n,
            "rounds": rounds,
            "rates": [round(x) for x in rates],
            "cpu_us_per_commit": cpu,
            "cpu_us_per_commit_median": {name: median(r[name] for r in cpu) for name in cpu[0]},
        },
        notes="submit() x N from one thread, then wait for every decision; ordo arbiter subprocess; "
        f"{broker_label(kind)}; signed decisions verified by the client; CPU per commit of the client "
        "(this process), the arbiter and the broker from /proc, and the cores they kept busy together",
        machine=machine(),
    )


if __name__ == "__main__":
    os.environ.setdefault("BENCH_PROFILE", "quick")
    from bench.common import table

    print(table(run()))
