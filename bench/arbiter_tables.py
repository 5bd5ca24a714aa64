"""What many tables cost one arbiter: start-up, decisions across tables, threads and memory.

    .venv/bin/python bench/arbiter_tables.py [-t 100] [-k 20]

Pre-publishes, for each of ``-t`` tables, a CREATE_TABLE and ``-k``
non-conflicting INSERT_INTOs, starts ``ordo arbiter`` (shard 0/1) and times:
process start to the ready line (each table is taken -- its transactional
producer initialised -- and rebuilt before it), and process start until every
decision is in the logs. Then counts the arbiter's threads (``/proc/PID/task``)
and its resident memory. Uses the embedded Tansu broker unless
``--bootstrap-servers`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ordo.broker import EmbeddedBroker, create_table_topics
from ordo.schemas import CommitIntent, DataFile, Operation, TableMetadata, decisions_topic, encode, intents_topic
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings


def table_intents(table: str, k: int) -> list[bytes]:
    """CREATE_TABLE then ``k`` INSERT_INTOs into distinct partitions, encoded."""
    records = [
        encode(
            CommitIntent(
                txn_id=f"create-{table}",
                table=table,
                operation=Operation.CREATE_TABLE,
                read_version=0,
                metadata=TableMetadata(
                    location=f"/bench/{table}",
                    schema="id BIGINT, p STRING",
                    primary_key=("id",),
                    partition_columns=("p",),
                ),
            )
        )
    ]
    for i in range(k):
        spec = {"p": str(i)}
        records.append(
            encode(
                CommitIntent(
                    txn_id=f"{table}-{i}",
                    table=table,
                    operation=Operation.INSERT_INTO,
                    read_version=0,
                    partitions=(spec,),
                    added_files=(
                        DataFile(path=f"p={i}/{table}-{i}-0.parquet", partition=spec, record_count=1, size_bytes=1),
                    ),
                )
            )
        )
    return records


def proc_status(pid: int) -> tuple[int, int]:
    """(threads, resident kB) of a Linux process."""
    threads = len(list(Path(f"/proc/{pid}/task").iterdir()))
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return threads, rss


def count_decisions(bootstrap: str, prefix: str, tables: list[str], expected: int, timeout: float) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(decisions_topic(prefix, t), 0, 0) for t in tables])
    seen = 0
    deadline = time.monotonic() + timeout
    try:
        while seen < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {seen} of {expected} decisions after {timeout} s")
            seen += sum(1 for m in consumer.consume(num_messages=10_000, timeout=0.2) if m.error() is None)
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-t", type=int, default=100, help="tables (default 100)")
    parser.add_argument("-k", type=int, default=20, help="inserts per table (default 20)")
    parser.add_argument("--bootstrap-servers", default=None, help="an existing broker (default: embedded Tansu)")
    parser.add_argument("--json", default=None, help="write the result here")
    args = parser.parse_args()

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    with ExitStack() as stack:
        bootstrap = args.bootstrap_servers or stack.enter_context(EmbeddedBroker()).bootstrap_servers
        prefix = f"benchtables{int(time.time())}"
        settings = Settings(bootstrap_servers=bootstrap, topic_prefix=prefix)
        tables = [f"t{i:04d}" for i in range(args.t)]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
        for table in tables:
            create_table_topics(admin, prefix, table)
            for record in table_intents(table, args.k):
                producer.produce(intents_topic(prefix, table), record)
        if producer.flush(60):
            raise SystemExit("intents not delivered")
        group = stack.enter_context(ProcessGroup(log_dir=tempfile.mkdtemp(prefix="ordo-bench-")))
        started = time.perf_counter()
        arbiter = group.start_arbiter(settings, wait_ready=False, args=["--checkpoint-every", "0"])
        arbiter.wait_for_line("arbiter ready", timeout=600)
        ready = time.perf_counter() - started
        count_decisions(bootstrap, prefix, tables, args.t * (args.k + 1), timeout=600)
        done = time.perf_counter() - started
        threads, rss = proc_status(arbiter.pid)
        arbiter.terminate()
    result = {
        "tables": args.t,
        "decisions": args.t * (args.k + 1),
        "ready_s": round(ready, 2),
        "all_decided_s": round(done, 2),
        "threads": threads,
        "rss_mb": round(rss / 1024, 1),
    }
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
