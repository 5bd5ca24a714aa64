"""The raw pass-through peer of the arbiter: consume each record, produce one same-sized record, no decision.

    python -m bench.passthrough BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC SIZES_JSON EXPECTED

Mirrors ``arbiter.service.ArbiterService``'s Kafka work exactly: the same
consumer and transactional producer settings, ``assign()`` at offset 0, poll
for the first record then ``consume`` what is already fetched, one Kafka
transaction per batch committed when the input drains or the batch reaches
``DEFAULT_BATCH_CAP``, the record key carried over. Instead of decoding,
deciding, encoding and hashing, it produces ``bytes(size)`` where ``size`` is
the size of the decision the arbiter writes for that intent offset
(``SIZES_JSON``). After ``EXPECTED`` records are committed it idles, as an
arbiter with nothing to do would, until terminated (so its CPU time can be read).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from ordo.arbiter.service import DEFAULT_BATCH_CAP, KAFKA_TIMEOUT


def main(argv: list[str]) -> int:
    bootstrap, source, target, sizes_path, expected_text = argv
    sizes = json.loads(Path(sizes_path).read_text())
    expected = int(expected_text)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench.passthrough.{target}",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "allow.auto.create.topics": False,
        }
    )
    producer.init_transactions(KAFKA_TIMEOUT)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench.passthrough",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 20,
        }
    )
    consumer.list_topics(timeout=KAFKA_TIMEOUT)
    consumer.assign([TopicPartition(source, 0, 0)])
    print("passthrough ready", flush=True)
    cap = DEFAULT_BATCH_CAP
    in_txn = False
    txn_records = 0
    done = 0
    next_offset = 0
    while done < expected:
        if in_txn:
            messages = consumer.consume(num_messages=cap - txn_records, timeout=0)
        else:
            first = consumer.poll(0.05)
            messages = [] if first is None else [first, *consumer.consume(num_messages=cap - 1, timeout=0)]
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    print(f"consumer: {error}", file=sys.stderr)
                continue
            if message.topic() != source:
                continue
            offset = message.offset()
            if offset < next_offset:
                continue
            if not in_txn:
                producer.begin_transaction()
                in_txn = True
            payload = bytes(sizes[offset])
            while True:
                try:
                    producer.produce(target, payload, message.key())
                    break
                except BufferError:
                    producer.poll(0.05)
            next_offset = offset + 1
            txn_records += 1
        if in_txn and (not messages or txn_records >= cap):
            producer.commit_transaction(KAFKA_TIMEOUT)
            done += txn_records
            in_txn = False
            txn_records = 0
    producer.flush(KAFKA_TIMEOUT)
    print("passthrough done", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    deadline = time.monotonic() + 120
    while not stop and time.monotonic() < deadline:
        consumer.poll(0.05)
    consumer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
