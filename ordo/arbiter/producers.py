"""The arbiter's producers: one transactional producer per owned table, taken under the table's tenure.

Fencing is per table: each owned table has its own transactional producer
(transactional id ``<prefix>.arbiter.table.<table>``, ``table_transactional_id``)
and its decisions are produced only through it. ``take`` initialises it, which
fences whichever arbiter owned the table before -- whatever its ``--shard``
setting -- and ends its open transaction. Every Kafka error that means "a newer
owner fenced this producer" becomes a ``TableFencedError`` naming the table.

In a fleet the group may take a table away at any moment (the membership is
served from a thread of its own). Each producer is taken under the table's
*tenure* (``Ownership.tenure``), and ``serves`` says whether the table is still
held under it: a table lost or revoked, even one assigned back since, is no
longer this producer's to serve (``TableLostError``). Initialising a producer
is bounded (``TAKE_TIMEOUT``, attempts of ``INIT_ATTEMPT`` seconds with the
tenure checked between them).
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

log = logging.getLogger("ordo.arbiter")
kafka_log = logging.getLogger("ordo.kafka")  # librdkafka's own log lines

KAFKA_TIMEOUT = 30.0
TAKE_CONCURRENCY = 16  # tables whose producers are initialised at once when many appear (start-up)
TAKE_TIMEOUT = KAFKA_TIMEOUT  # seconds to initialise a table's producer before the table counts as unservable
INIT_ATTEMPT = 5.0  # seconds one init_transactions waits (it may wait for the previous owner's transaction to end)


class TableFencedError(ArbiterFencedError):
    """Raised when a newer owner fenced this arbiter's producer of ``table`` (None: one of the open transactions), or
    its transaction could not be ended in time."""

    def __init__(self, message: str, table: str | None) -> None:
        super().__init__(message)
        self.table = table


class TableLostError(TableFencedError):
    """The group took ``table`` from this fleet member (revoked or lost) while it was serving it: its producer is
    dropped and its transaction left to the new owner, never retried."""


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


class TableProducers:
    """The transactional producer of each owned table, the tenure it was taken under, and the newest record of
    each decisions topic."""

    def __init__(
        self,
        settings: Settings,
        *,
        fleet: bool,
        ownership: Callable[[], str],
        stop: threading.Event,
        tenure: Callable[[str], int | None] = lambda table: 0,
    ) -> None:
        """``fleet``: fencing drops a table (the group's choice) instead of ending the arbiter; ``ownership``
        describes what this arbiter owns, for messages; ``tenure`` says under which assignment it holds a table
        now (``Ownership.tenure``; None: not at all)."""
        self.settings = settings
        self.prefix = settings.topic_prefix
        self.fleet = fleet
        self.producers: dict[str, Any] = {}  # by table name
        self.tenures: dict[str, int] = {}  # by table name: the tenure its producer was taken under
        # Per decisions topic, the newest record known to be in the log: (offset, bytes). Set by rebuilds
        # and by delivery reports; a checkpoint is written only for a state whose chain is that record's hash.
        self.last_record: dict[str, tuple[int, bytes]] = {}
        self._describe = ownership
        self._stop = stop
        self._tenure = tenure

    def serves(self, table: str) -> bool:
        """True while ``table``'s producer was taken under the tenure the table is held under now."""
        taken = self.tenures.get(table)
        return taken is not None and taken == self._tenure(table)

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

    def _init_transactions(self, producer: Any, what: str, table: str | None = None, tenure: int | None = None) -> None:
        """``init_transactions`` (retrying what is retriable): fences the previous holder of the producer's id.

        For a table: within ``TAKE_TIMEOUT``, and only while the table is held under ``tenure``."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + TAKE_TIMEOUT
        while True:
            try:
                producer.init_transactions(KAFKA_TIMEOUT if table is None else INIT_ATTEMPT)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if is_fenced(error) and table is not None:
                    raise self.fenced(error, table) from exc
                if is_fenced(error):
                    raise ArbiterFencedError(f"arbiter cannot initialise the producer of {what}: {error}") from exc
                if not error.retriable() or self._stop.is_set():
                    raise BrokerUnavailableError(f"cannot initialise transactions of {what}: {error}") from exc
                if table is not None and self._tenure(table) != tenure:
                    raise TableLostError(
                        f"table {table} was taken away while its producer was initialised", table
                    ) from exc
                if table is not None and time.monotonic() >= deadline:
                    raise BrokerUnavailableError(
                        f"cannot initialise transactions of {what} within {TAKE_TIMEOUT:g} s: {error}"
                    ) from exc
                log.warning("init_transactions of %s failed (%s); retrying", what, error)

    def take(self, table: str) -> None:
        """Own ``table``: initialise its transactional producer, fencing whichever arbiter owned it before."""
        if table in self.producers:
            return
        tenure = self._tenure(table)
        if tenure is None:
            raise TableLostError(f"table {table} is no longer assigned to this arbiter", table)
        producer = self._new_producer(table_transactional_id(self.prefix, table))
        self._init_transactions(producer, f"table {table}", table, tenure)
        if self._tenure(table) != tenure:  # revoked or lost meanwhile: not ours to serve
            raise TableLostError(f"table {table} was taken away while its producer was initialised", table)
        self.tenures[table] = tenure
        self.producers[table] = self._writer(table, producer)

    def _writer(self, table: str, fence: Any) -> Any:
        """The producer that writes ``table``'s decisions, given ``fence``, whose ``init_transactions`` fenced the
        previous owner: ``fence`` itself (a sink without transactions writes with another)."""
        return fence

    def take_all(self, tables: list[str]) -> dict[str, BaseException]:
        """Take ``tables`` concurrently (each ``init_transactions`` is a broker round trip or more); the failures
        by table (the others are taken)."""
        if len(tables) < 2:
            return {}  # ``take`` does it
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(TAKE_CONCURRENCY, len(tables)), thread_name_prefix="take") as pool:
            futures = {name: pool.submit(self.take, name) for name in tables}
        return {name: error for name, future in futures.items() if (error := future.exception()) is not None}

    def drop(self, table: str) -> None:
        """Forget ``table``'s producer (an open transaction of it is the broker's or the new owner's to end)."""
        self.tenures.pop(table, None)
        self.last_record.pop(decisions_topic(self.prefix, table), None)
        producer = self.producers.pop(table, None)
        if producer is not None:
            try:
                producer.flush(0)
            except Exception:  # fenced: nothing of ours is pending that matters
                pass

    def loaded(self, table: str, topic: str, last: tuple[int, bytes] | None, log_end: int) -> None:
        """``table``'s state was loaded from its log ``topic``: ``last`` is the newest record folded; ``log_end``
        the log's end offset when it was read (-1: not asked; ``StateLoader`` asks only for ``DirectSink``)."""
        if last is not None:
            self.last_record[topic] = last
        else:
            self.last_record.pop(topic, None)

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

    def fenced(self, error: Any, table: str | None = None) -> TableFencedError:
        """The error to raise for Kafka ``error`` that fenced ``table``'s producer (None: one of the open ones)."""
        where = f"table {table}" if table is not None else "one of its tables"
        if self.fleet and table is not None and not self.serves(table):
            return TableLostError(f"fenced on {where}, which the group took away ({error.str()})", table)
        return self.refusal(
            table,
            fleet=f"fenced on {where} by a newer producer of the table ({error.str()})",
            static=f"was fenced on {where} by a newer arbiter owning it (same or overlapping --shard setting; "
            f"{error.str()})",
        )

    def refusal(self, table: str | None, *, fleet: str, static: str) -> TableFencedError:
        """The error that ends serving ``table``: a fleet member gives the table up (``fleet`` says why); a static
        arbiter exits (``static`` says why)."""
        if self.fleet:
            return TableFencedError(fleet, table)
        return TableFencedError(f"arbiter ({self._describe()}) {static}; exiting without deciding anything more", table)


__all__ = [
    "KAFKA_TIMEOUT",
    "TableFencedError",
    "TableLostError",
    "TableProducers",
    "is_fenced",
    "on_kafka_error",
    "table_transactional_id",
    "transactional_id",
]
