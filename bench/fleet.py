"""Fleet handover: three ``ordo arbiter --fleet`` share tables; kill -9 one; the time until its tables decide again.

On each broker of the run (``BENCH_BROKERS``; Apache Kafka: 1 node), three
arbiters join the fleet's consumer group and split ``tables`` tables. Then,
``kills`` times: one commit to every table (every owner warm), the instance
owning tables (from its log) is killed with SIGKILL, one intent is submitted to
each of its tables at once, and the figure is the time from the kill to each
decision (the group noticing the death after ``session.timeout.ms``, the new
owner fencing the dead one's per-table producer and rebuilding). A new instance
replaces the victim before the next kill. Reported: the median and the worst
over every table of every kill, per broker.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench.common import Result, broker_label, brokers, machine, median, pick, stack
from bench.workload import create_intent, insert_intent

BENCHMARK = "fleet handover"
INSTANCES = 3


def _measure(kind: str, tables: int, kills: int) -> dict[str, Any]:
    from ordo.producer import CommitClient
    from ordo.services.stack import owned_tables, wait_arbiter_ready

    seconds: list[float] = []
    with stack(f"fleet-{kind}", "fleet", consumer=False, broker=kind) as bench_stack:
        settings = bench_stack.settings
        bench_stack.arbiter.terminate(30)  # the stack's single arbiter: replaced by a fleet
        started = 0

        def start() -> Any:
            nonlocal started
            started += 1
            args = ["--fleet", "--state-dir", str(Path(bench_stack.work) / f"state{started}")]
            return bench_stack.group.start_arbiter(settings, args=args, wait_ready=False)

        fleet = [start() for _ in range(INSTANCES)]
        for process in fleet:
            wait_arbiter_ready(process, 180)
        names = [f"h{i:02d}" for i in range(tables)]
        with CommitClient(settings=settings) as client:
            for future in [client.submit(create_intent(t)) for t in names]:
                future.result(timeout=180)
            counter = 0
            for kill in range(kills):
                deadline = time.monotonic() + 180
                while not all(owned_tables(p) for p in fleet):  # the group gave every instance its share
                    if time.monotonic() > deadline:
                        raise RuntimeError("the group did not give every instance a table in 180 s")
                    time.sleep(0.5)
                for future in [client.submit(insert_intent(counter, table=t, partition="warm")) for t in names]:
                    future.result(timeout=120)  # every owner warm
                counter += 1
                victim = next(p for p in fleet if owned_tables(p))
                lost = sorted(owned_tables(victim))
                fleet.remove(victim)
                victim.kill()
                killed = time.monotonic()
                decided: dict[str, float] = {}
                futures = {t: client.submit(insert_intent(counter, table=t, partition=f"k{kill}")) for t in lost}
                counter += 1
                for table, future in futures.items():
                    future.add_done_callback(
                        lambda _, table=table, into=decided: into.setdefault(table, time.monotonic())
                    )
                for future in futures.values():
                    future.result(timeout=180)
                seconds += [decided[t] - killed for t in lost]
                fleet.append(start())
                wait_arbiter_ready(fleet[-1], 180)
    return {"seconds": [round(x, 2) for x in seconds], "tables": tables, "kills": kills}


def run() -> list[Result]:
    tables = pick(12, 30)
    kills = pick(2, 5)
    results = []
    for kind in brokers():
        measured = _measure(kind, tables, kills)
        values = measured["seconds"]
        worst = max(values)
        results.append(
            Result(
                BENCHMARK,
                f"kill -9 of 1 of {INSTANCES} arbiters to its tables' next decision, median (worst) "
                f"[{broker_label(kind)}]",
                "s",
                round(median(values), 2),
                peer="worst table",
                peer_value=round(worst, 2),
                target="<= 10 s (worst)",
                met=worst <= 10,
                samples=measured,
                notes=f"{tables} tables, {kills} kills, one intent per lost table submitted at the kill; "
                "the arbiters' consumer group at ordo's defaults (session.timeout.ms of the fleet group)",
                machine=machine(),
            )
        )
    return results


if __name__ == "__main__":
    os.environ.setdefault("BENCH_PROFILE", "quick")
    from bench.common import table

    print(table(run()))
