"""Figure 2: commit latency, one writer in a closed loop, vs a raw produce-then-consume round trip.

* ordo: ``CommitClient.commit(intent)`` against an ``ordo arbiter`` subprocess;
  latency is from the ``commit()`` call to the decision in hand. The intent is
  a metadata-only INSERT_INTO of 4 files into the writer's partition, read at
  the version of its previous commit (never concurrent: all accepted).
* peer: the same round trip without ordo, at the broker's best: produce one
  record of the intent's size (idempotent, acks=all, ``linger.ms`` 0) and wait
  until a consumer in the same process (read_committed, ``assign()``,
  ``fetch.wait.max.ms`` 1, polling thread) reads it back from the same topic.
  Tansu holds an empty fetch for the full wait, so 1 ms is its fastest
  setting (0 never answers on Tansu: the reader times out).
* floor: the same hops as a commit with no ordo code in them. A relay process
  reads each record of a topic (read_committed, ``fetch.wait.max.ms`` 1, as the
  arbiter's busy wait) and writes it to a second topic in a Kafka transaction
  of its own (``begin``, ``produce``, ``commit_transaction``; ``linger.ms`` 5
  as the arbiter's producers, which measured faster than 0); the benchmark
  produces to the first topic and waits until its reader (as above) reads the
  record back from the second. ordo's commit over this floor is what ordo
  itself costs; the floor over the raw round trip is the transaction and the
  second hop.
* ordo direct: ``commit()`` as above, against a second ``ordo arbiter`` (topic
  prefix ``latd``) with ``ORDO_DECISIONS_TRANSACTIONS=false``: decisions
  written by an idempotent producer without Kafka transactions (issue 29's
  prototype, docs/architecture.md), in the same alternating blocks.
* idle cost: after the latency blocks, with a consumer (``ordo consumer``)
  following the table, CPU time over ``idle_seconds`` of the broker, the
  arbiter, the consumer and this process (an idle ``CommitClient``) from
  ``/proc``, as a share of one core.

On each broker of the run (``BENCH_BROKERS``, default ``tansu,kafka``: an
embedded Tansu, then a 1-node Apache Kafka), the same workload, with ordo at
its defaults for that broker, in alternating blocks, after a warm-up. The
comparators' readers (and the relay) fetch only during their own blocks, with
one unmeasured round trip after resuming: an idle 1 ms fetcher costs the broker
~13 % of a core, which would otherwise load it under ordo's blocks.
The per-commit samples are kept (``latency_samples_ms``) for the CDF plot.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import (
    Result,
    broker_label,
    brokers,
    cpu_seconds,
    interleave,
    isolate_state,
    machine,
    new_broker,
    percentile,
    pick,
    ratio,
)
from bench.workload import create_intent, insert_intent

BENCHMARK = "commit latency"


class RawRoundTrip:
    """Produce a record and wait until a same-process consumer reads it back (the ordo-free peer)."""

    def __init__(
        self, bootstrap: str, topic: str, *, read_topic: str | None = None, wait: int = 1, linger: int = 0
    ) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition

        self.topic = topic
        self.read_topic = read_topic or topic
        self._next = 0  # the read topic's next offset, where a resumed reader starts
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": linger,
                "allow.auto.create.topics": False,
                "client.id": "bench-raw-producer",
            }
        )
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "bench.latency",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": wait,
                "allow.auto.create.topics": False,
                "client.id": "bench-raw-consumer",
            }
        )
        self.consumer.list_topics(timeout=10)
        self.consumer.assign([TopicPartition(self.read_topic, 0, 0)])
        self._waiting: dict[bytes, Future[float]] = {}
        self._lock = threading.Lock()
        self._pending: tuple[bool, threading.Event] | None = None  # an assignment change for the reader thread
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._reader.start()
        self._poller.start()

    def _read(self) -> None:
        from confluent_kafka import TopicPartition

        while not self._stop.is_set():
            with self._lock:
                pending, self._pending = self._pending, None
            if pending is not None:
                fetch, done = pending
                if fetch:
                    self.consumer.assign([TopicPartition(self.read_topic, 0, self._next)])
                else:
                    self.consumer.unassign()
                done.set()
            first = self.consumer.poll(0.05)
            messages = [] if first is None else [first, *self.consumer.consume(num_messages=1000, timeout=0)]
            for message in messages:
                if message.error() is not None:
                    continue
                with self._lock:
                    self._next = message.offset() + 1
                    future = self._waiting.pop(message.key(), None)
                if future is not None:
                    future.set_result(time.perf_counter())

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.05)

    def pause(self) -> None:
        """Stop fetching between this side's blocks: an idle 1 ms fetcher would load the broker under the others."""
        self._change(False)

    def resume(self) -> None:
        """Fetch again from the next offset (the first round trip after it pays the assignment)."""
        self._change(True)

    def _change(self, fetch: bool) -> None:
        """Have the reader thread assign or unassign (librdkafka's unassign blocks while another thread polls)."""
        done = threading.Event()
        with self._lock:
            self._pending = (fetch, done)
        if not done.wait(10):
            raise RuntimeError("the round trip's reader did not change its assignment")

    def round_trip(self, size: int, timeout: float = 30.0) -> float:
        """Seconds from produce() to the record read back."""
        key = uuid.uuid4().bytes
        future: Future[float] = Future()
        with self._lock:
            self._waiting[key] = future
        started = time.perf_counter()
        self.producer.produce(self.topic, bytes(size), key)
        return future.result(timeout) - started

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._reader.join(5)
        self._poller.join(5)
        self.producer.flush(10)
        self.consumer.close()


def relay(bootstrap: str, source: str, target: str, ready: Any, stop: Any, active: Any) -> None:
    """Copy each record of ``source`` to ``target`` in a Kafka transaction of its own (a process of its own).

    Fetches only while ``active`` is set (between its blocks an idle 1 ms fetcher would load the broker).
    """
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench.latency.relay",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 1,
            "client.id": "bench-relay-consumer",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "bench.latency.relay",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "client.id": "bench-relay-producer",
        }
    )
    producer.init_transactions(30)
    ready.set()
    position, assigned = 0, False
    while not stop.is_set():
        if not active.is_set():
            if assigned:
                consumer.unassign()
                assigned = False
            active.wait(0.05)
            continue
        if not assigned:
            consumer.assign([TopicPartition(source, 0, position)])
            assigned = True
        message = consumer.poll(0.05)
        if message is None or message.error() is not None:
            continue
        position = message.offset() + 1
        producer.begin_transaction()
        producer.produce(target, message.value(), message.key())
        producer.commit_transaction(30)
    consumer.close()


class Relay:
    """The ``relay`` process, started with ``spawn`` (never fork a process holding librdkafka threads)."""

    def __init__(self, bootstrap: str, source: str, target: str) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._ready, self._stop, self.active = context.Event(), context.Event(), context.Event()
        self.process = context.Process(
            target=relay, args=(bootstrap, source, target, self._ready, self._stop, self.active), daemon=True
        )
        self.process.start()
        if not self._ready.wait(120):
            self.close()
            raise RuntimeError("the relay process did not start")

    def close(self) -> None:
        self._stop.set()
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()


def idle_cpu(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Per process, the share of one core (percent) used over ``seconds`` of idling."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {name: round(100 * (cpu_seconds(pid) - before[name]) / elapsed, 2) for name, pid in pids.items()}


def _measure(kind: str) -> tuple[dict[str, list[list[float]]], dict[str, float], Any, int, int, int]:
    """The alternating blocks on a fresh broker of ``kind``: (runs, idle CPU, settings, block, rounds, idle s)."""
    from confluent_kafka.admin import AdminClient

    from ordo.broker import create_topics
    from ordo.keys import embedded_keys
    from ordo.producer import CommitClient
    from ordo.schemas import encode
    from ordo.services.stack import ProcessGroup, start_consumer
    from ordo.settings import load_settings

    block = pick(50, 100)
    rounds = pick(8, 30)
    warmup = 20
    idle_seconds = pick(30, 60)
    work = Path(tempfile.mkdtemp(prefix=f"ordo-bench-lat-{kind}-"))
    isolate_state(work)
    with new_broker(kind) as broker, ProcessGroup(log_dir=work / "logs") as group:
        bootstrap = broker.bootstrap_servers
        settings = embedded_keys(
            load_settings(bootstrap_servers=bootstrap, topic_prefix="lat", state_dir=str(work / "state")), work
        )
        arbiter = group.start_arbiter(settings, timeout=120)
        direct_settings = replace(settings, topic_prefix="latd", decisions_transactions=False)
        direct_arbiter = group.start_arbiter(direct_settings, timeout=120)
        create_topics(
            AdminClient({"bootstrap.servers": bootstrap}), {"lat.raw": {}, "lat.relay-in": {}, "lat.relay-out": {}}
        )
        client = CommitClient(settings=settings)
        direct_client = CommitClient(settings=direct_settings)
        raw = RawRoundTrip(bootstrap, "lat.raw")
        relay_process = Relay(bootstrap, "lat.relay-in", "lat.relay-out")
        floor = RawRoundTrip(bootstrap, "lat.relay-in", read_topic="lat.relay-out")
        try:
            client.commit(create_intent(), timeout=60)
            direct_client.commit(create_intent(), timeout=60)
            versions = {"ordo": 0, "direct": 0}
            counter = 0
            size = len(encode(insert_intent(0)))

            def one_commit(side: str = "ordo") -> float:
                nonlocal counter
                intent = insert_intent(counter, partition="w", read_version=versions[side])
                counter += 1
                started = time.perf_counter()
                decision = (client if side == "ordo" else direct_client).commit(intent, timeout=30)
                elapsed = time.perf_counter() - started
                if not decision.accepted:
                    raise RuntimeError(f"commit rejected: {decision.reason} {decision.message}")
                versions[side] = decision.id_version or versions[side]
                return elapsed

            relay_process.active.set()
            for _ in range(warmup):
                one_commit()
                one_commit("direct")
                raw.round_trip(size)
                floor.round_trip(size)
            relay_process.active.clear()
            raw.pause()
            floor.pause()

            def ordo_side(_round: int) -> list[float]:
                return [one_commit() for _ in range(block)]

            def direct_side(_round: int) -> list[float]:
                return [one_commit("direct") for _ in range(block)]

            def raw_side(_round: int) -> list[float]:
                raw.resume()
                raw.round_trip(size)  # unmeasured: the first fetch after resuming
                samples = [raw.round_trip(size) for _ in range(block)]
                raw.pause()
                return samples

            def floor_side(_round: int) -> list[float]:
                relay_process.active.set()
                floor.resume()
                floor.round_trip(size)  # unmeasured: the first fetches after resuming
                samples = [floor.round_trip(size) for _ in range(block)]
                floor.pause()
                relay_process.active.clear()
                return samples

            runs = interleave({"ordo": ordo_side, "direct": direct_side, "raw": raw_side, "floor": floor_side}, rounds)
            direct_client.close()
            direct_arbiter.kill()  # the idle figures are of the default stack
            raw.close()
            floor.close()
            relay_process.close()
            settings = replace(settings, catalog=str(work / "catalog.db"))
            consumer, _ = start_consumer(settings, http=False, timeout=120, group=group)
            time.sleep(3)  # everything settles: the arbiter and the client pause after their idle delays
            idle = idle_cpu(
                {"broker": broker.pid or 0, "arbiter": arbiter.pid, "consumer": consumer.pid, "client": os.getpid()},
                idle_seconds,
            )
        finally:
            raw.close()
            floor.close()
            relay_process.close()
            client.close()
            direct_client.close()
    return runs, idle, settings, block, rounds, idle_seconds


def _results(kind: str) -> list[Result]:
    from ordo.kernel.settings import resolve_waits

    runs, idle, settings, block, rounds, idle_seconds = _measure(kind)
    warmup = 20
    idle_total = round(sum(idle.values()), 2)
    ordo = [x * 1000 for block_ in runs["ordo"] for x in block_]
    raw_ms = [x * 1000 for block_ in runs["raw"] for x in block_]
    floor_ms = [x * 1000 for block_ in runs["floor"] for x in block_]
    direct_ms = [x * 1000 for block_ in runs["direct"] for x in block_]
    stats: dict[str, dict[str, float]] = {}
    for name, values in (("ordo", ordo), ("raw", raw_ms), ("floor", floor_ms), ("direct", direct_ms)):
        stats[name] = {q: round(percentile(values, p), 2) for q, p in (("p50", 50), ("p90", 90), ("p99", 99))}
        stats[name]["max"] = round(max(values), 2)
    block_p50 = {
        name: [round(percentile([x * 1000 for x in b], 50), 2) for b in runs[name]]
        for name in ("ordo", "raw", "floor", "direct")
    }
    label = broker_label(kind)
    waits = resolve_waits(settings, kind)
    common = {
        "samples": {
            "broker": kind,
            "commits": len(ordo),
            "round_trips": len(raw_ms),
            "block": block,
            **stats,
            "block_p50_ms": block_p50,
            "latency_samples_ms": {
                "ordo": [round(x, 3) for x in ordo],
                "raw": [round(x, 3) for x in raw_ms],
                "floor": [round(x, 3) for x in floor_ms],
                "direct": [round(x, 3) for x in direct_ms],
            },
            "idle_cpu_percent": idle,
        },
        "machine": machine(),
        "notes": f"{label}; pooled over {rounds} alternating blocks of {block} after {warmup} warm-up commits; "
        "ordo arbiter subprocess; raw round trip at fetch.wait.max.ms=1, "
        "linger.ms=0, acks=all, idempotent, read_committed; floor = the same hops through a transactional relay "
        "process without ordo (read at fetch.wait.max.ms=1, one Kafka transaction per record, linger.ms=5); "
        f"ordo at its defaults for this broker: fetch waits arbiter busy {waits.busy} ms / idle "
        f"{waits.idle} ms, commit client {waits.client} ms, consumer "
        f"{waits.consumer} ms; idle CPU over {idle_seconds} s",
    }
    p50, p99 = stats["ordo"]["p50"], stats["ordo"]["p99"]
    r50 = ratio(p50, stats["raw"]["p50"])
    f50 = ratio(p50, stats["floor"]["p50"])
    return [
        Result(
            BENCHMARK,
            f"p50 commit() to decision [{label}]",
            "ms",
            p50,
            peer="raw produce->consume round trip",
            peer_value=stats["raw"]["p50"],
            ratio=r50,
            target="ratio <= 3 (raw at the broker's best)",
            met=(r50 or 99) <= 3,
            **common,
        ),
        Result(
            BENCHMARK,
            f"p50 commit() to decision, vs the same hops without ordo [{label}]",
            "ms",
            p50,
            peer="transactional relay round trip (floor)",
            peer_value=stats["floor"]["p50"],
            ratio=f50,
            target="ratio <= 1.2",
            met=(f50 or 99) <= 1.2,
            **{**common, "samples": {"broker": kind, "floor": stats["floor"], "raw": stats["raw"]}},
        ),
        Result(
            BENCHMARK,
            f"p99 commit() to decision [{label}]",
            "ms",
            p99,
            peer="raw produce->consume round trip",
            peer_value=stats["raw"]["p99"],
            ratio=ratio(p99, stats["raw"]["p99"]),
            target="<= 10 ms",
            met=p99 <= 10,
            **{**common, "samples": {"broker": kind, "ordo": stats["ordo"], "raw": stats["raw"]}},
        ),
        Result(
            BENCHMARK,
            f"p50 commit() to decision, decisions without Kafka transactions [{label}]",
            "ms",
            stats["direct"]["p50"],
            peer="raw produce->consume round trip",
            peer_value=stats["raw"]["p50"],
            ratio=ratio(stats["direct"]["p50"], stats["raw"]["p50"]),
            target="ratio <= 3 (raw at the broker's best)",
            met=(ratio(stats["direct"]["p50"], stats["raw"]["p50"]) or 99) <= 3,
            **{**common, "samples": {"broker": kind, "direct": stats["direct"], "raw": stats["raw"]}},
        ),
        Result(
            BENCHMARK,
            f"p99 commit() to decision, decisions without Kafka transactions [{label}]",
            "ms",
            stats["direct"]["p99"],
            peer="raw produce->consume round trip",
            peer_value=stats["raw"]["p99"],
            ratio=ratio(stats["direct"]["p99"], stats["raw"]["p99"]),
            target="<= 10 ms",
            met=stats["direct"]["p99"] <= 10,
            **{**common, "samples": {"broker": kind, "direct": stats["direct"], "raw": stats["raw"]}},
        ),
        Result(
            BENCHMARK,
            f"idle stack CPU (broker, arbiter, consumer, idle client) [{label}]",
            "% of a core",
            idle_total,
            target="< 5 % (ordo's processes; the broker's own share listed apart)",
            met=round(idle_total - idle.get("broker", 0.0), 2) < 5,
            **{**common, "samples": {"broker": kind, "idle_cpu_percent": idle, "seconds": idle_seconds}},
        ),
    ]


def run() -> list[Result]:
    results: list[Result] = []
    for kind in brokers():
        results.extend(_results(kind))
    return results


if __name__ == "__main__":
    os.environ.setdefault("BENCH_PROFILE", "quick")
    from bench.common import table

    print(table(run()))
