"""Quick arbiter throughput: pre-publish N intents, start ``ordo arbiter``, time the decisions.

    .venv/bin/python bench/arbiter_quick.py [-n 20000] [--files 4] [--json out.json] [--profile] [--unsigned]

One table partitioned by ``p``; every intent is a metadata-only INSERT_INTO of
``--files`` files into its own partition, all read at version 0, so all are
accepted and the run measures the decision path, not the conflict outcome.
Uses the embedded Tansu broker unless ``--bootstrap-servers`` is given. The
figure is decisions per second between the first and the last decision record
(their broker timestamps), which leaves out process start-up; the wall time
from process start is printed too. ``--profile`` samples the arbiter with
py-spy (``pip install py-spy``) and prints the top functions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ordo.broker import EmbeddedBroker, create_table_topics
from ordo.keys import embedded_keys
from ordo.schemas import CommitIntent, DataFile, Operation, TableMetadata, decisions_topic, encode, intents_topic
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings

TABLE = "bench"


def intents(n: int, files: int) -> list[bytes]:
    """CREATE_TABLE then ``n`` INSERT_INTO intents, encoded."""
    records = [
        encode(
            CommitIntent(
                txn_id="create",
                table=TABLE,
                operation=Operation.CREATE_TABLE,
                read_version=0,
                metadata=TableMetadata(
                    location="/bench",
                    schema="id BIGINT, v STRING, p STRING",
                    primary_key=("id",),
                    partition_columns=("p",),
                ),
            )
        )
    ]
    for i in range(n):
        spec = {"p": f"{i:06d}"}
        records.append(
            encode(
                CommitIntent(
                    txn_id=f"txn-{i}",
                    table=TABLE,
                    operation=Operation.INSERT_INTO,
                    read_version=0,
                    partitions=(spec,),
                    added_files=tuple(
                        DataFile(
                            path=f"p={spec['p']}/txn-{i}-{j}.parquet",
                            partition=spec,
                            record_count=1000,
                            size_bytes=65536,
                            min_key="0",
                            max_key="999",
                        )
                        for j in range(files)
                    ),
                    writer="bench",
                )
            )
        )
    return records


def publish(bootstrap: str, prefix: str, records: list[bytes]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    create_table_topics(AdminClient({"bootstrap.servers": bootstrap}), prefix, TABLE)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    topic = intents_topic(prefix, TABLE)
    for record in records:
        while True:
            try:
                producer.produce(topic, record)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(60)
    if remaining:
        raise SystemExit(f"{remaining} intents not delivered")


def follow(bootstrap: str, prefix: str, expected: int, timeout: float) -> list[int]:
    """Broker timestamps (ms) of the first ``expected`` decision records."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(decisions_topic(prefix, TABLE), 0, 0)])
    stamps: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while len(stamps) < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(stamps)} of {expected} decisions after {timeout} s")
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                if message.error() is None:
                    stamps.append(message.timestamp()[1])
    finally:
        consumer.close()
    return stamps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="intents (default 20000)")
    parser.add_argument("--files", type=int, default=4, help="files per intent (default 4)")
    parser.add_argument("--bootstrap-servers", default=None, help="an existing broker (default: embedded Tansu)")
    parser.add_argument("--json", default=None, help="write the result here")
    parser.add_argument("--profile", action="store_true", help="sample the arbiter with py-spy")
    parser.add_argument(
        "--unsigned", action="store_true", help="run the arbiter without a signing key (the cost of signing)"
    )
    args = parser.parse_args()

    with ExitStack() as stack:
        bootstrap = args.bootstrap_servers or stack.enter_context(EmbeddedBroker()).bootstrap_servers
        prefix = f"bench{int(time.time())}"
        settings = Settings(bootstrap_servers=bootstrap, topic_prefix=prefix, require_signatures=not args.unsigned)
        if not args.unsigned:
            settings = embedded_keys(settings, stack.enter_context(tempfile.TemporaryDirectory(prefix="ordo-keys-")))
        t0 = time.perf_counter()
        records = intents(args.n, args.files)
        t1 = time.perf_counter()
        publish(bootstrap, prefix, records)
        t2 = time.perf_counter()
        print(f"encoded {len(records)} intents in {t1 - t0:.1f} s, published in {t2 - t1:.1f} s", flush=True)

        group = stack.enter_context(ProcessGroup(log_dir=tempfile.mkdtemp(prefix="ordo-bench-")))
        started = time.perf_counter()
        arbiter = group.start_arbiter(settings, wait_ready=False)
        arbiter.wait_for_line("arbiter ready", timeout=120)
        cpu_ready = _cpu_seconds(arbiter.pid)  # start-up and rebuild left out: the decision loop's CPU only
        profiler = None
        if args.profile:
            py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            out = Path(tempfile.mkdtemp(prefix="ordo-prof-")) / "arbiter.txt"
            profiler = subprocess.Popen(
                [py_spy, "record", "--pid", str(arbiter.pid), "--format", "raw", "--output", str(out), "--rate", "200"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        stamps = follow(bootstrap, prefix, len(records), timeout=max(120.0, args.n / 200))
        wall = time.perf_counter() - started
        loop_cpu = _cpu_seconds(arbiter.pid) - cpu_ready
        if profiler is not None:
            arbiter.terminate()
            profiler.wait(timeout=30)
            _print_profile(out)
        else:
            arbiter.terminate()
        metrics_line = next(
            (line for line in reversed(arbiter.log_text().splitlines()) if "arbiter stopped" in line), ""
        )

    from ordo.schemas.signing import Signer

    signer = Signer.generate()
    began = time.process_time()
    for record in records[:2000]:
        signer.header(TABLE, record)
    sign_us = (time.process_time() - began) / min(2000, len(records)) * 1e6
    batches = _metric(metrics_line, "batches")
    span = (stamps[-1] - stamps[0]) / 1000.0
    rate = (len(stamps) - 1) / span if span > 0 else float("inf")
    result = {
        "intents": args.n,
        "files_per_intent": args.files,
        "signed": not args.unsigned,
        "decisions_per_second": round(rate),
        "decision_span_s": round(span, 3),
        "decisions_per_cpu_second": round(len(stamps) / loop_cpu) if loop_cpu > 0 else None,
        "cpu_us_per_decision": round(loop_cpu / len(stamps) * 1e6, 1),
        "transactions": batches,
        "sign_us": round(sign_us, 1),
        # signatures made: one per table per transaction (one table here)
        "signing_us_per_decision": round(sign_us * batches / len(stamps), 3) if batches else None,
        "wall_from_process_start_s": round(wall, 3),
        "broker": "external" if args.bootstrap_servers else "embedded Tansu (in memory)",
    }
    print(
        f"arbiter: {rate:,.0f} decisions/s ({len(stamps) - 1} decisions in {span:.2f} s; "
        f"{wall:.2f} s from process start); {loop_cpu / len(stamps) * 1e6:.1f} CPU us/decision "
        f"({'signed' if not args.unsigned else 'unsigned'})"
    )
    if metrics_line:
        print(metrics_line[metrics_line.index("arbiter stopped") :])
    print(
        f"signing: {sign_us:.1f} us per signature x {batches} transaction(s) = "
        f"{result['signing_us_per_decision']} us per decision"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


def _metric(line: str, name: str) -> int:
    """A counter from the arbiter's ``arbiter stopped: {...}`` line (0 when absent)."""
    if "{" not in line:
        return 0
    return int(json.loads(line[line.index("{") :]).get(name, 0))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc): steadier than wall time on a busy host."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _print_profile(path: Path, top: int = 25) -> None:
    """Self time per function from py-spy's collapsed stacks."""
    from collections import Counter

    if not path.exists():
        print("py-spy wrote no profile (is ptrace allowed?)")
        return
    self_time: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        self_time[frames[-1]] += int(count)
        total += int(count)
    print(f"py-spy: {total} samples; top self time:")
    for frame, count in self_time.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
