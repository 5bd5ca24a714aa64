"""Figure 1: arbiter throughput on one table vs a raw pass-through on the same broker.

Workload: CREATE_TABLE then N metadata-only INSERT_INTO intents with 4 files
each, every one into its own partition at read version 0, so none conflicts
and all are accepted. The intents are published before the process starts;
the figure is output records per second between the first and the last output
record (their timestamps), so process start-up and table discovery are left out.

* ordo: ``ordo arbiter`` (a subprocess, as deployed) deciding the intents.
* peer: ``bench.passthrough``, the same Kafka loop with the same transaction
  batching, producing one record of the decision's size per intent, no decision.

Both run against one embedded Tansu broker, alternating, each round on fresh
topics. CPU seconds of the process are recorded too (steadier than wall time
on a shared machine).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Result,
    interleave,
    isolate_state,
    machine,
    median,
    output_timestamps,
    pick,
    publish,
    rate_between,
    ratio,
)
from bench.workload import TABLE, fold, insert_records

BENCHMARK = "arbiter throughput"


def cpu_seconds(pid: int, task: int | None = None) -> float:
    """User + system CPU time of a live process (or one of its threads), from /proc."""
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_split(pid: int) -> dict[str, float]:
    """CPU seconds of the main (Python) thread and of all other threads (librdkafka's) of a live process."""
    total = cpu_seconds(pid)
    main = cpu_seconds(pid, pid)
    return {"cpu_s": total, "main_thread_cpu_s": main, "other_threads_cpu_s": round(total - main, 3)}


def _cpu_delta(start: dict[str, float], end: dict[str, float], records: int) -> dict[str, float]:
    """CPU microseconds per record between the first output record and the end (start-up left out)."""
    return {
        "cpu_us": 1e6 * (end["cpu_s"] - start["cpu_s"]) / records,
        "main_thread_cpu_us": 1e6 * (end["main_thread_cpu_s"] - start["main_thread_cpu_s"]) / records,
    }


def run() -> list[Result]:
    from confluent_kafka.admin import AdminClient

    from ordo.broker import EmbeddedBroker, create_table_topics, create_topics
    from ordo.keys import embedded_keys
    from ordo.schemas import decisions_topic, intents_topic
    from ordo.services.stack import ProcessGroup, start_process
    from ordo.settings import Settings

    n = pick(20_000, 100_000)
    repeats = pick(3, 5)
    records = insert_records(n)
    sizes = [len(data) for data in fold([value for _, value in records], keep=True).encoded]
    work = Path(tempfile.mkdtemp(prefix="ordo-bench-tp-"))
    isolate_state(work)
    sizes_path = work / "sizes.json"
    sizes_path.write_text(json.dumps(sizes))
    expected = len(records)
    timeout = max(120.0, n / 500)

    with EmbeddedBroker() as broker, ProcessGroup(log_dir=work / "logs") as group:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def ordo_side(round_: int) -> dict[str, Any]:
            prefix = f"tp{round_}"
            settings = embedded_keys(
                Settings(bootstrap_servers=bootstrap, topic_prefix=prefix, state_dir=str(work / "state")), work
            )
            create_table_topics(admin, prefix, TABLE)
            publish(bootstrap, intents_topic(prefix, TABLE), records)
            arbiter = group.start_arbiter(settings, wait_ready=False)
            first: list[dict[str, float]] = []
            stamps = output_timestamps(
                bootstrap,
                decisions_topic(prefix, TABLE),
                expected,
                timeout,
                lambda: first.append(cpu_split(arbiter.pid)),
            )
            cpu = _cpu_delta(first[0], cpu_split(arbiter.pid), expected - 1)
            arbiter.terminate()
            return {"rate": rate_between(stamps), **cpu}

        def raw_side(round_: int) -> dict[str, Any]:
            source, target = f"raw{round_}.in", f"raw{round_}.out"
            create_topics(admin, {source: {}, target: {}})
            publish(bootstrap, source, records)
            process = group.add(
                start_process(
                    [
                        os.sys.executable,
                        "-m",
                        "bench.passthrough",
                        bootstrap,
                        source,
                        target,
                        str(sizes_path),
                        str(expected),
                    ],
                    name=f"passthrough-{round_}",
                    log_dir=work / "logs",
                )
            )
            first: list[dict[str, float]] = []
            stamps = output_timestamps(
                bootstrap, target, expected, timeout, lambda: first.append(cpu_split(process.pid))
            )
            process.wait_for_line("passthrough done", timeout=60)
            cpu = _cpu_delta(first[0], cpu_split(process.pid), expected - 1)
            process.terminate()
            if process.returncode != 0:
                raise RuntimeError(f"passthrough failed: {process.tail()}")
            return {"rate": rate_between(stamps), **cpu}

        time.sleep(0.5)
        runs = interleave({"ordo": ordo_side, "raw": raw_side}, repeats)

    ordo_rate = median(r["rate"] for r in runs["ordo"])
    raw_rate = median(r["rate"] for r in runs["raw"])
    r = ratio(ordo_rate, raw_rate)
    samples = {
        "intents": n,
        "files_per_intent": 4,
        "repeats": repeats,
        "ordo_rates": [round(x["rate"]) for x in runs["ordo"]],
        "raw_rates": [round(x["rate"]) for x in runs["raw"]],
        "cpu_us_per_record": {
            side: [
                {"process": round(x["cpu_us"], 1), "python_thread": round(x["main_thread_cpu_us"], 1)}
                for x in runs[side]
            ]
            for side in ("ordo", "raw")
        },
    }
    return [
        Result(
            BENCHMARK,
            "decisions/s (4 files/intent, non-conflicting)",
            "decisions/s",
            round(ordo_rate),
            peer="raw pass-through",
            peer_value=round(raw_rate),
            ratio=r,
            target=">= 30,000/s and ratio >= 0.6",
            met=ordo_rate >= 30_000 and (r or 0) >= 0.6,
            samples=samples,
            notes="ordo arbiter subprocess vs bench.passthrough subprocess, same broker (embedded Tansu, in memory)",
            machine=machine(),
        )
    ]
