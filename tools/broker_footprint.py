"""What each local broker costs: start time and memory (RSS) of Apache Kafka (1 node, KRaft) and Tansu.

    .venv/bin/python tools/broker_footprint.py [--rounds 3] [--commits 200]

For each broker, ``rounds`` times: start it as ``ordo up`` does (``EmbeddedStack``
without the table service) and time the broker alone (process start to a
metadata answer; for Kafka, storage formatting included, the jars already
fetched), read its resident memory then (``VmRSS`` of ``/proc/<pid>/status``),
then commit ``commits`` INSERT INTOs to one table through the stack's arbiter
and consumer (a ``CommitClient``, closed loop) and read its memory again, with
its peak (``VmHWM``). Prints one JSON object per round and the medians, with
the load average (the figures depend on the machine's load).
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

from ordo.producer import CommitClient
from ordo.schemas import CommitIntent, DataFile, Operation, TableMetadata
from ordo.services.up import EmbeddedStack


def memory_mib(pid: int) -> tuple[float, float]:
    """``(VmRSS, VmHWM)`` of ``pid`` in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def commit_load(stack: EmbeddedStack, commits: int) -> float:
    """``commits`` INSERT INTOs, one after another; returns their wall time."""
    assert stack.settings is not None
    metadata = TableMetadata(location=str(stack.warehouse / "t"), schema="id BIGINT", primary_key=("id",))
    started = time.monotonic()
    with CommitClient(settings=stack.settings) as client:
        create = CommitIntent(
            txn_id="c", table="t", operation=Operation.CREATE_TABLE, read_version=0, metadata=metadata
        )
        assert client.commit(create, timeout=60).accepted
        for i in range(commits):
            intent = CommitIntent(
                txn_id=f"w{i}",
                table="t",
                operation=Operation.INSERT_INTO,
                read_version=i,  # the head: v0 is the CREATE_TABLE
                added_files=(DataFile(path=f"w{i}-0.parquet", partition={}, record_count=1, size_bytes=100),),
            )
            assert client.commit(intent, timeout=60).accepted
    return time.monotonic() - started


def one_round(kind: str, commits: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"ordo-footprint-{kind}-") as tmp:
        stack = EmbeddedStack(Path(tmp), broker=kind)
        try:
            started = time.monotonic()
            stack.start_broker()
            start_s = time.monotonic() - started
            assert stack.broker is not None and stack.broker.pid is not None
            pid = stack.broker.pid
            rss_ready, _ = memory_mib(pid)
            stack.start_services()
            commit_s = commit_load(stack, commits)
            rss_working, peak = memory_mib(pid)
            return {
                "broker": kind,
                "start_s": round(start_s, 2),
                "rss_ready_mib": round(rss_ready),
                "rss_working_mib": round(rss_working),
                "rss_peak_mib": round(peak),
                "commits": commits,
                "commits_s": round(commit_s, 1),
                "loadavg": load(),
            }
        finally:
            stack.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--broker", action="append", choices=["kafka", "tansu"])
    args = parser.parse_args()
    for kind in args.broker or ["kafka", "tansu"]:
        rounds = []
        for _ in range(args.rounds):
            rounds.append(one_round(kind, args.commits))
            print(json.dumps(rounds[-1]), flush=True)
        median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0] if key.endswith(("_s", "_mib"))}
        print(json.dumps({"broker": kind, "median_of": len(rounds), **median}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
