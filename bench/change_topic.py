"""Change topic throughput: how fast ``ordo cdc``'s publisher empties a backlog of commits.

    .venv/bin/python bench/change_topic.py [--commits 300] [--rows 50] [--max-records 10000] [--json PATH]

A table of ``--commits`` logical commits is built by the pure arbiter core into
a real SQLite catalog with real Parquet files (``producer.arrow.write_rows``):
each commit upserts ``--rows`` keys of one of 4 partitions, half of them keys
that exist (updates: pre-images looked up) and half new. Then one
``ChangePublisher`` on the embedded Tansu broker publishes the whole backlog
(``round()`` until nothing is left) and the wall and CPU time, commits/s and
records/s are printed: the publisher's work (catalog look-ups, Parquet reads,
pairing, JSON, Kafka transactions) without the arbiter and the consumer.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--max-records", type=int, default=10_000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import pyarrow as pa

    from ordo.arbiter.core import apply, evaluate, new_state
    from ordo.broker import EmbeddedBroker
    from ordo.consumer import Catalog
    from ordo.consumer.changetopic import ChangePublisher
    from ordo.consumer.store import CatalogWriter, LogRecord
    from ordo.kernel.settings import Settings
    from ordo.producer.arrow import write_rows
    from ordo.producer.data import Layout
    from ordo.schemas import CommitIntent, Operation, TableMetadata, encode

    root = Path(tempfile.mkdtemp(prefix="bench-cdc-"))
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.float64()), ("dt", pa.string())])
    metadata = TableMetadata(
        location=str(root / "t"),
        schema="id BIGINT, v STRING, n DOUBLE, dt STRING",
        primary_key=("id",),
        partition_columns=("dt",),
        properties={"ordo.buckets": "4"},
    )
    layout = Layout.of("t", metadata)
    writer = CatalogWriter(str(root / "catalog.db"), "bench")
    state = new_state("t")

    def submit(offset: int, operation: Operation, **fields: object) -> None:
        intent = CommitIntent(
            txn_id=f"w{offset}", table="t", operation=operation, read_version=max(state.head_version, 0), **fields
        )
        decision = evaluate(state, intent, 1_000_000 + offset, offset)
        assert decision.accepted, decision
        data = encode(decision)
        apply(state, decision, data)
        writer.apply([LogRecord("t", offset, 1_000_000 + offset, data)])

    submit(0, Operation.CREATE_TABLE, metadata=metadata)
    next_key = [0, 0, 0, 0]
    records = 0
    for c in range(1, args.commits + 1):
        p = c % 4
        half = args.rows // 2
        old = [max(0, next_key[p] - 1 - i * 3) for i in range(half)] if next_key[p] else []
        new = list(range(next_key[p], next_key[p] + args.rows - len(set(old))))
        next_key[p] += len(new)
        keys = sorted(set(old) | set(new))
        records += len(keys)
        table = pa.Table.from_pylist([{"id": k, "v": f"v{c}", "n": c * 1.5, "dt": f"p{p}"} for k in keys], schema)
        files = write_rows(table, layout, f"w{c}", 0)
        submit(c, Operation.INSERT_INTO, partitions=({"dt": f"p{p}"},), added_files=tuple(files))
    writer.close()

    with EmbeddedBroker() as broker:
        settings = Settings(
            bootstrap_servers=broker.bootstrap_servers, topic_prefix="bench", catalog=str(root / "catalog.db")
        )
        publisher = ChangePublisher(settings, max_records=args.max_records)
        with Catalog(settings.catalog) as catalog:
            wall, cpu = time.perf_counter(), time.process_time()
            publisher.round(catalog)  # also starts the table's publisher (topic, init_transactions, read-back)
            published = publisher.status.records_total
            while publisher.round(catalog):
                pass
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        total = publisher.status.records_total
        assert total == records, (total, records)
        publisher.close()
    result = {
        "commits": args.commits,
        "rows_per_commit": args.rows,
        "records": total,
        "records_in_first_round": published,
        "transactions": publisher.status.transactions_total,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "commits_per_s": round(args.commits / wall, 1),
        "records_per_s": round(total / wall),
        "records_per_cpu_s": round(total / cpu),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
