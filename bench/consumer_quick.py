"""Quick consumer figures: catalog apply rate and snapshot-query time at 100k live files.

    .venv/bin/python bench/consumer_quick.py [--decisions 25000] [--no-kafka] [--sign-every 100] [--json PATH]

1. Apply rate: INSERT decisions with 4 files each, built beforehand by the pure
   arbiter core and encoded, folded into a fresh SQLite catalog by
   ``CatalogWriter.apply`` in batches of 5000 (decode, hash-chain check, rows,
   offsets; one SQLite transaction per batch) — the materializer's work minus Kafka.
   Wall and CPU time are both reported: on a shared machine CPU time is the steadier figure.
2. The same records produced to a decisions topic on the embedded Tansu broker
   and materialized by ``Materializer`` from offset 0 until caught up.
   Run twice on the same records: signed as the arbiter signs them (the last
   record of every ``--sign-every`` records carries an ``ordo-sig`` header) and
   verified, and unsigned with signatures not required: the cost of verification.
   ``verify`` times ``ChainVerifier.push`` alone over the same records.
3. Snapshot queries on the resulting table (``--decisions`` x 4 live files,
   100k by default): the SQL alone, and ``Catalog.snapshot`` (SQL + objects),
   at the head and at an old version; plus a by-timestamp lookup.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ordo.arbiter.core import apply, evaluate, new_state
from ordo.consumer import Catalog
from ordo.consumer.store import CatalogWriter, LogRecord, connect, query_snapshot_files
from ordo.schemas import CommitIntent, DataFile, Operation, TableMetadata, encode

PARTITIONS = [f"2024-01-{d:02d}" for d in range(1, 31)] + [f"2024-02-{d:02d}" for d in range(1, 21)]


def build_log(count: int, files_per_decision: int = 4) -> list[LogRecord]:
    """CREATE_TABLE + ``count`` INSERT decisions, encoded as the arbiter writes them."""
    rng = random.Random(1)
    state = new_state("bench")
    records: list[LogRecord] = []
    metadata = TableMetadata(
        location="/warehouse/bench",
        schema="id BIGINT, v STRING, dt STRING",
        primary_key=("id",),
        partition_columns=("dt",),
    )
    intents = [
        CommitIntent(
            txn_id="create", table="bench", operation=Operation.CREATE_TABLE, read_version=0, metadata=metadata
        )
    ]
    for i in range(count):
        dt = rng.choice(PARTITIONS)
        files = tuple(
            DataFile(
                path=f"dt={dt}/txn{i}-{n}.parquet",
                partition={"dt": dt},
                record_count=1000,
                size_bytes=65536,
                min_key=str(i * 10),
                max_key=str(i * 10 + 9),
            )
            for n in range(files_per_decision)
        )
        intents.append(
            CommitIntent(
                txn_id=f"txn{i}",
                table="bench",
                operation=Operation.INSERT_INTO,
                read_version=i,
                partitions=({"dt": dt},),
                added_files=files,
                writer="bench",
            )
        )
    for offset, intent in enumerate(intents):
        decision = evaluate(state, intent, 1_700_000_000_000 + offset, offset)
        assert decision.accepted, decision
        data = encode(decision)
        apply(state, decision, data)
        records.append(LogRecord("bench", offset * 2, 1_700_000_000_000 + offset, data))  # gaps: txn markers
    return records


def bench_apply(records: list[LogRecord], path: Path, batch: int = 5000) -> dict[str, float]:
    writer = CatalogWriter(path, "bench")
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(records), batch):
        writer.apply(records[i : i + batch])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    writer.close()
    return {
        "decisions": len(records),
        "seconds": round(elapsed, 3),
        "decisions_per_s": round(len(records) / elapsed),
        "cpu_seconds": round(cpu, 3),
        "decisions_per_cpu_s": round(len(records) / cpu),
    }


def signatures(records: list[LogRecord], every: int, signer: Any) -> dict[int, bytes]:
    """The ``ordo-sig`` header of the last record of every ``every`` records (and of the last one), by offset."""
    marks = {r.offset for r in records[every - 1 :: every]} | {records[-1].offset}
    return {r.offset: signer.header(r.table, r.value or b"") for r in records if r.offset in marks}


def bench_verify(records: list[LogRecord], every: int) -> dict[str, float]:
    """``ChainVerifier.push`` over the records, one signature per ``every`` records (the consumer's added work)."""
    from ordo.schemas.signing import ChainVerifier, Signer, Trust

    signer = Signer.generate()
    headers = signatures(records, every, signer)
    verifier: ChainVerifier[LogRecord] = ChainVerifier("bench", Trust.of([signer.public_raw]))
    released = 0
    start = time.process_time()
    for record in records:
        out, refused = verifier.push(record.offset, record.value, headers.get(record.offset), record)
        released += len(out)
        assert not refused
    cpu = time.process_time() - start
    assert released == len(records)
    return {
        "sign_every": every,
        "cpu_seconds": round(cpu, 3),
        "us_per_decision": round(cpu / len(records) * 1e6, 2),
    }


def bench_kafka(records: list[LogRecord], path: Path, sign_every: int = 0, broker: str = "tansu") -> dict[str, float]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from bench.common import new_broker
    from ordo.broker import DECISIONS_CONFIG, create_topics
    from ordo.consumer.materializer import Materializer
    from ordo.keys import embedded_keys
    from ordo.schemas.signing import SIGNATURE_HEADER, Signer
    from ordo.settings import Settings

    with new_broker(broker) as running, tempfile.TemporaryDirectory() as keys:
        settings = Settings(
            bootstrap_servers=running.bootstrap_servers,
            topic_prefix="bench",
            catalog=str(path),
            require_signatures=bool(sign_every),
        )
        headers: dict[int, bytes] = {}
        if sign_every:
            settings = embedded_keys(settings, keys)
            headers = signatures(records, sign_every, Signer.from_file(settings.arbiter_key))
        topic = "bench.bench.decisions"
        create_topics(AdminClient(settings.kafka_config()), {topic: DECISIONS_CONFIG})
        producer = Producer(settings.kafka_config(**{"linger.ms": 20, "enable.idempotence": True}))
        for record in records:
            signature = headers.get(record.offset)
            producer.produce(topic, record.value, headers=[(SIGNATURE_HEADER, signature)] if signature else None)
            producer.poll(0)
        assert producer.flush(60) == 0
        materializer = Materializer(settings)
        thread = threading.Thread(target=materializer.run, daemon=True)
        start = time.perf_counter()
        thread.start()
        while materializer.status.applied_total < len(records):
            if time.perf_counter() - start > 300:
                raise RuntimeError(f"only {materializer.status.applied_total} of {len(records)} applied in 300 s")
            time.sleep(0.01)
        elapsed = time.perf_counter() - start
        materializer.stop()
        thread.join(10)
    return {
        "decisions": len(records),
        "signed_every": sign_every,
        "seconds": round(elapsed, 3),
        "decisions_per_s": round(len(records) / elapsed),
        "broker": broker,
        "note": "includes consumer start-up, topic discovery and the broker's fetches (non-transactional records)",
    }


def timed(fn, repeat: int = 7) -> dict[str, float]:  # type: ignore[no-untyped-def]
    fn()  # warm the page cache and the statement cache
    samples, cpu = [], []
    for _ in range(repeat):
        start, used = time.perf_counter(), time.process_time()
        fn()
        samples.append(time.perf_counter() - start)
        cpu.append(time.process_time() - used)
    return {
        "median_ms": round(statistics.median(samples) * 1000, 1),
        "min_ms": round(min(samples) * 1000, 1),
        "median_cpu_ms": round(statistics.median(cpu) * 1000, 1),
    }


def bench_snapshot(path: Path, head: int) -> dict[str, object]:
    catalog = Catalog(path)
    conn = connect(path, readonly=True)
    live = len(catalog.snapshot("bench").files)
    old = head // 2
    return {
        "live_files": live,
        "sql_head": timed(lambda: query_snapshot_files(conn, 1, head)),
        "snapshot_head": timed(lambda: catalog.snapshot("bench")),
        "sql_old_version": {"version": old, **timed(lambda: query_snapshot_files(conn, 1, old))},
        "snapshot_old_version": timed(lambda: catalog.snapshot("bench", old)),
        "version_by_timestamp": timed(lambda: catalog.snapshot("bench", timestamp=1_700_000_000_000 + old), 3),
        "table_info": timed(lambda: catalog.table("bench"), 50),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=25_000, help="INSERT decisions (x4 files each)")
    parser.add_argument("--no-kafka", action="store_true", help="skip the run through the embedded broker")
    parser.add_argument(
        "--sign-every", type=int, default=100, help="one signature per N decisions, as the arbiter's batches"
    )
    parser.add_argument("--json", default=str(Path(__file__).parent / "results" / "consumer_quick.json"))
    args = parser.parse_args()
    t0 = time.perf_counter()
    records = build_log(args.decisions)
    print(f"built {len(records)} decisions in {time.perf_counter() - t0:.1f} s")
    results: dict[str, object] = {"files_per_decision": 4}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "catalog.db"
        results["apply"] = bench_apply(records, path)
        print("apply (SQLite, no Kafka):", results["apply"])
        results["snapshot"] = bench_snapshot(path, args.decisions)
        print("snapshot:", json.dumps(results["snapshot"], indent=1))
        results["catalog_bytes"] = path.stat().st_size
        results["verify"] = bench_verify(records, args.sign_every)
        print("signature verification alone (ChainVerifier):", results["verify"])
        if not args.no_kafka:
            results["kafka"] = bench_kafka(records, Path(tmp) / "kafka.db", args.sign_every)
            print("apply through Kafka (Tansu), signed and verified:", results["kafka"])
            results["kafka_unsigned"] = bench_kafka(records, Path(tmp) / "kafka-unsigned.db")
            print("apply through Kafka (Tansu), unsigned, not verified:", results["kafka_unsigned"])
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
