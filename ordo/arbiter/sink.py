"""The arbiter's transactional sink: each owned table's decisions, produced inside that table's Kafka transaction.

Fencing is per table: each owned table has its own transactional producer
(transactional id ``<prefix>.arbiter.table.<table>``, ``table_transactional_id``)
and its decisions are produced only through it. ``take`` initialises it, which
fences whichever arbiter owned the table before -- whatever its ``--shard``
setting -- and ends its open transaction. One Kafka transaction per table and
batch: a batch that touched several tables commits each table's transaction in
turn.

The newest decision of each table in the open transaction is *held*, not
produced: it is produced signed at commit (``schemas.signing``: the signature of
a batch's last record vouches for the batch), or unsigned once a newer decision
of the same table arrives. Every Kafka error that means "a newer owner fenced
this producer" becomes a ``TableFencedError`` naming the table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ordo.kernel.errors import ArbiterFencedError, BrokerUnavailableError
from ordo.kernel.settings import Settings
from ordo.schemas import decisions_topic
from ordo.schemas.signing import SIGNATURE_HEADER, Signer

log = logging.getLogger("ordo.arbiter")
kafka_log = logging.getLogger("ordo.kafka")  # librdkafka's own log lines

KAFKA_TIMEOUT = 30.0
TAKE_CONCURRENCY = 16  # tables whose producers are initialised at once when many appear (start-up)


class TableFencedError(ArbiterFencedError):
    """Raised when a newer owner fenced this arbiter's producer of ``table`` (None: one of the open transactions)."""

    def __init__(self, message: str, table: str | None) -> None:
        super().__init__(message)
        self.table = table


def transactional_id(prefix: str, shard: tuple[int, int]) -> str:
    """The per-shard transactional id of arbiters before per-table fencing; only fenced at start-up now."""
    return f"{prefix}.arbiter.{shard[0]}-of-{shard[1]}"


def table_transactional_id(prefix: str, table: str) -> str:
    """The transactional id of ``table``'s decisions: whoever initialises it last owns the table."""
    return f"{prefix}.arbiter.table.{table}"


def is_fenced(error: Any) -> bool:
    """True when a Kafka error means the producer was fenced (or hit another fatal error)."""
    from confluent_kafka import KafkaError

    # _FATAL: what produce() raises once the producer hit a fatal error (fencing is the usual one).
    return error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError._FATAL,
    )


def on_kafka_error(error: Any) -> None:
    """librdkafka's error callback of every arbiter client: fatal errors logged, the rest retried by it."""
    from confluent_kafka import KafkaError

    if error.fatal():
        log.error("fatal Kafka error: %s", error)
    elif error.code() == KafkaError._ALL_BROKERS_DOWN:
        log.warning("Kafka: %s (retrying)", error.str())
    else:
        log.debug("Kafka error: %s", error)


class TransactionalSink:
    """One transactional producer per owned table; begin, produce (holding the last record), commit, abort."""

    def __init__(
        self,
        settings: Settings,
        *,
        fleet: bool,
        ownership: Callable[[], str],
        commit_timeout: float,
        stop: threading.Event,
    ) -> None:
        """``fleet``: fencing drops a table (the group's choice) instead of ending the arbiter; ``ownership``
        describes what this arbiter owns, for messages."""
        self.settings = settings
        self.prefix = settings.topic_prefix
        self.fleet = fleet
        self.commit_timeout = commit_timeout
        self.signer: Signer | None = None
        self.producers: dict[str, Any] = {}  # by table name
        self.open: set[str] = set()  # tables whose transaction is open (begun, not yet ended)
        self.records = 0  # decisions in the open transactions
        self.started = 0.0  # perf_counter when the first open transaction began
        # Per decisions topic, the newest record known to be in the log: (offset, bytes). Set by rebuilds
        # and by delivery reports; a checkpoint is written only for a state whose chain is that record's hash.
        self.last_record: dict[str, tuple[int, bytes]] = {}
        self._held: dict[str, tuple[str, bytes, bytes | None]] = {}  # table -> (decisions topic, record, key)
        self._describe = ownership
        self._stop = stop

    @property
    def in_txn(self) -> bool:
        """True while a table's transaction is open."""
        return bool(self.open)

    # ------------------------------------------------------------------ producers

    def config(self, txn_id: str) -> dict[str, Any]:
        """The transactional producer of ``txn_id`` (its ``client.id`` names it)."""
        return self.settings.kafka_config(
            **{
                "transactional.id": txn_id,
                "client.id": f"{txn_id}.producer",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,  # commit_transaction flushes at once: no wait added, fewer wake-ups per batch
                "allow.auto.create.topics": False,
                "error_cb": on_kafka_error,
                "on_delivery": self._on_delivery,
                "logger": kafka_log,
            }
        )

    def _new_producer(self, txn_id: str) -> Any:
        from confluent_kafka import Producer

        return Producer(self.config(txn_id))

    def fence_shard(self, shard: tuple[int, int]) -> None:
        """Fence an arbiter of an older version with this shard (it used one per-shard transactional id)."""
        legacy = self._new_producer(transactional_id(self.prefix, shard))
        self._init_transactions(legacy, f"shard {shard[0]}/{shard[1]}")
        legacy.flush(1.0)

    def _init_transactions(self, producer: Any, what: str) -> None:
        """``init_transactions`` (retrying what is retriable): fences the previous holder of the producer's id."""
        from confluent_kafka import KafkaException

        while True:
            try:
                producer.init_transactions(KAFKA_TIMEOUT)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if is_fenced(error):
                    raise ArbiterFencedError(f"arbiter cannot initialise the producer of {what}: {error}") from exc
                if not error.retriable() or self._stop.is_set():
                    raise BrokerUnavailableError(f"cannot initialise transactions of {what}: {error}") from exc
                log.warning("init_transactions of %s failed (%s); retrying", what, error)

    def take(self, table: str) -> None:
        """Own ``table``: initialise its transactional producer, fencing whichever arbiter owned it before."""
        if table in self.producers:
            return
        producer = self._new_producer(table_transactional_id(self.prefix, table))
        self._init_transactions(producer, f"table {table}")
        self.producers[table] = producer

    def take_all(self, tables: list[str]) -> None:
        """Take ``tables`` concurrently (each ``init_transactions`` is a broker round trip or more)."""
        if len(tables) < 2:
            return  # ``take`` does it
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(TAKE_CONCURRENCY, len(tables)), thread_name_prefix="take") as pool:
            for future in [pool.submit(self.take, name) for name in tables]:
                future.result()  # the first failure propagates; tables taken already stay taken

    def drop(self, table: str) -> None:
        """Forget ``table``'s producer and open transaction (the broker or the new owner aborts it)."""
        self._held.pop(table, None)
        if table in self.open:
            self.open.discard(table)
            if not self.open:
                self.records = 0
        self.last_record.pop(decisions_topic(self.prefix, table), None)
        producer = self.producers.pop(table, None)
        if producer is not None:
            try:
                producer.flush(0)
            except Exception:  # fenced: nothing of ours is pending that matters
                pass

    def poll(self) -> None:
        """Serve pending delivery reports (they update ``last_record``)."""
        for producer in self.producers.values():
            producer.poll(0)

    def close(self) -> None:
        """Flush every producer (an open transaction is left for the broker to abort)."""
        for producer in self.producers.values():
            try:
                producer.flush(1.0)
            except Exception:  # a fenced producer refuses even that; nothing of ours is lost
                log.debug("flushing a producer failed", exc_info=True)
        self.producers.clear()

    def _on_delivery(self, error: Any, message: Any) -> None:
        """Delivery report of a decision: remember the newest record of each decisions topic."""
        if error is None:
            self.last_record[message.topic()] = (message.offset(), message.value())

    # ------------------------------------------------------------------ transactions

    def fenced(self, error: Any, table: str | None = None) -> TableFencedError:
        """The error to raise for Kafka ``error`` that fenced ``table``'s producer (None: one of the open ones)."""
        where = f"table {table}" if table is not None else f"one of tables {sorted(self.open)}"
        if self.fleet:
            return TableFencedError(f"fenced on {where} by its new owner ({error.str()})", table)
        return TableFencedError(
            f"arbiter ({self._describe()}) was fenced on {where} by a newer arbiter owning it "
            f"(same or overlapping --shard setting; {error.str()}); exiting without deciding anything more",
            table,
        )

    def begin(self, table: str) -> None:
        """Open ``table``'s transaction for this batch (once per batch)."""
        from confluent_kafka import KafkaException

        if table in self.open:
            return
        try:
            self.producers[table].begin_transaction()
        except KafkaException as exc:
            if is_fenced(exc.args[0]):
                raise self.fenced(exc.args[0], table) from exc
            raise
        if not self.open:
            self.started = time.perf_counter()
        self.open.add(table)

    def hold(self, table: str, topic: str, data: bytes, key: bytes | None) -> None:
        """Add a decision to ``table``'s open transaction: held until a newer one comes or the commit."""
        previous = self._held.get(table)
        if previous is not None:
            self._produce(table, *previous)
        self._held[table] = (topic, data, key)
        self.records += 1

    def _produce(self, table: str, topic: str, data: bytes, key: bytes | None, signature: bytes | None = None) -> None:
        """Produce one decision record, with its ``ordo-sig`` header when ``signature`` is given."""
        from confluent_kafka import KafkaException

        producer = self.producers[table]
        headers = [(SIGNATURE_HEADER, signature)] if signature is not None else None
        while True:
            try:
                producer.produce(topic, data, key, headers=headers)
                return
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                if is_fenced(exc.args[0]):
                    raise self.fenced(exc.args[0], table) from exc
                raise

    def commit(self) -> int:
        """Produce each table's held decision signed, then commit each open transaction; the decisions committed."""
        if not self.open:
            return 0
        signer = self.signer
        for name, (topic, data, key) in self._held.items():
            self._produce(name, topic, data, key, signer.header(name, data) if signer is not None else None)
        self._held.clear()
        for name in sorted(self.open):
            self.end(name, commit=True)
            self.open.discard(name)  # committed: never aborted nor rebuilt by a later failure
        records, self.records = self.records, 0
        return records

    def abort(self) -> tuple[set[str], list[tuple[str, TableFencedError]]]:
        """Abort every open transaction: the tables aborted, and those found fenced meanwhile (fleet only).

        A static arbiter raises ``TableFencedError`` instead: it must exit.
        """
        touched = set(self.open)
        fenced: list[tuple[str, TableFencedError]] = []
        self._held.clear()
        for name in sorted(touched):
            try:
                self.end(name, commit=False)
            except TableFencedError as exc:
                if not self.fleet:
                    raise
                fenced.append((name, exc))
                touched.discard(name)
        self.open.clear()
        self.records = 0
        return touched, fenced

    def end(self, table: str, commit: bool) -> None:
        """Commit or abort ``table``'s transaction, retrying what is retriable for at most ``commit_timeout`` s.

        On Kafka a fenced producer's EndTxn fails at once with PRODUCER_FENCED.
        Tansu instead drops the connection, so the call only ever times out: a
        transaction that cannot be ended within the budget is taken as fenced
        (or the broker as gone) and the arbiter exits rather than guess.
        """
        from confluent_kafka import KafkaException

        producer = self.producers[table]
        end = producer.commit_transaction if commit else producer.abort_transaction
        verb = "commit" if commit else "abort"
        deadline = time.monotonic() + self.commit_timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                end(max(0.1, min(5.0, remaining)))
                return
            except KafkaException as exc:
                error = exc.args[0]
                if is_fenced(error):
                    raise self.fenced(error, table) from exc
                if commit and error.txn_requires_abort():
                    raise
                if not error.retriable():
                    raise
                if time.monotonic() >= deadline:
                    raise TableFencedError(
                        f"arbiter ({self._describe()}) could not {verb} the transaction of table "
                        f"{table} within {self.commit_timeout:g} s ({error.str()}): most likely fenced by a newer "
                        "arbiter owning the table (Tansu drops the connection instead of answering PRODUCER_FENCED), "
                        "or the broker is unreachable; exiting without deciding anything more",
                        table,
                    ) from exc
                log.warning("%s_transaction: %s; retrying", verb, error)


__all__ = [
    "KAFKA_TIMEOUT",
    "TableFencedError",
    "TransactionalSink",
    "is_fenced",
    "on_kafka_error",
    "table_transactional_id",
    "transactional_id",
]
