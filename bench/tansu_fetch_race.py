"""Reproduce a Tansu 0.6.0 fetch race: a consumer reading while several producers append skips records.

    .venv/bin/python -m bench.tansu_fetch_race [--writers 8] [--records 500] [--runs 5]

No ordo code on the data path: ``--writers`` processes, each an idempotent
producer (acks=all, linger.ms=2) with one record in flight at a time (like a
commit client in a closed loop), append to one single-partition topic. One
consumer (``assign()``, ``fetch.wait.max.ms`` 20) reads the topic as it grows
and, for each batch it gets, produces the batch to a second topic in a Kafka
transaction (what the arbiter does). Afterwards the offsets it was handed are
compared with the offsets the topic holds: every offset it never saw is a
record a live reader skipped, though a reader starting later at offset 0 sees
it. Observed with librdkafka 2.16; the race needs the concurrent appends (one
producer alone, or reading after the writers finished, shows no gap).
See docs/tansu.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _writer(bootstrap: str, topic: str, writer: int, records: int, done: object) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 2})
    for i in range(records):
        producer.produce(topic, f"w{writer}-{i}".encode(), key=f"w{writer}-{i}".encode())
        producer.flush(10)
    done.put(writer)  # type: ignore[attr-defined]


def run_once(writers: int, records: int, isolation: str = "read_committed") -> dict[str, object]:
    """One run; returns the offsets a live consumer skipped (and whether a later reader finds them)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from ordo.broker import DECISIONS_CONFIG, INTENTS_CONFIG, EmbeddedBroker, create_topics

    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        create_topics(AdminClient({"bootstrap.servers": bootstrap}), {"in": INTENTS_CONFIG, "out": DECISIONS_CONFIG})
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "race", "acks": "all", "linger.ms": 2})
        txn.init_transactions(30)
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "race",
                "isolation.level": isolation,
                "fetch.wait.max.ms": 20,
            }
        )
        consumer.assign([TopicPartition("in", 0, 0)])
        seen: list[int] = []
        stop = threading.Event()

        def follow() -> None:
            while not stop.is_set():
                first = consumer.poll(0.05)
                batch = [] if first is None else [first, *consumer.consume(1000, 0)]
                batch = [m for m in batch if m.error() is None]
                if not batch:
                    continue
                txn.begin_transaction()
                for message in batch:
                    seen.append(message.offset())
                    txn.produce("out", message.value(), message.key())
                txn.commit_transaction(30)

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        ctx = multiprocessing.get_context("spawn")
        done = ctx.Queue()
        processes = [ctx.Process(target=_writer, args=(bootstrap, "in", w, records, done)) for w in range(writers)]
        for process in processes:
            process.start()
        for _ in processes:
            done.get(timeout=300)
        for process in processes:
            process.join(30)
        time.sleep(2)
        stop.set()
        reader.join(30)
        consumer.close()
        later = Consumer({"bootstrap.servers": bootstrap, "group.id": "later", "enable.partition.eof": True})
        later.assign([TopicPartition("in", 0, 0)])
        stored: list[int] = []
        while True:
            message = later.poll(5)
            if message is None or message.error() is not None:
                break
            stored.append(message.offset())
        later.close()
    skipped = sorted(set(stored) - set(seen))
    return {"produced": writers * records, "stored": len(stored), "seen_live": len(seen), "skipped": skipped}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--isolation", default="read_committed", choices=("read_committed", "read_uncommitted"))
    args = parser.parse_args()
    total = 0
    for run in range(args.runs):
        result = run_once(args.writers, args.records, args.isolation)
        total += len(result["skipped"])  # type: ignore[arg-type]
        print(f"run {run + 1}: {result}", flush=True)
    print(f"{total} record(s) skipped by the live reader in {args.runs} run(s)")
    return 1 if total else 0


if __name__ == "__main__":
    raise SystemExit(main())
