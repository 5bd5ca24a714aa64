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

In a fleet the group may take a table away while its transaction is open (the
membership is served from a thread of its own). Each producer is taken under
the table's *tenure* (``Ownership.tenure``); a table whose tenure changed is
no longer this arbiter's to serve (``serves``): its transaction is never
retried (a commit is tried once, an abort not at all) and its producer is
dropped at once, the transaction left for the new owner's
``init_transactions`` to end. Every retry is bounded: one ``commit_timeout``
for a batch's commits or aborts, ``TAKE_TIMEOUT`` for initialising a producer,
attempts of ``END_ATTEMPT`` / ``INIT_ATTEMPT`` seconds with the tenure checked
between them. A fleet member's table that fails anyway is dropped and listed
in ``failed`` (a ``TableLostError`` when the group took it, else a
``TableFencedError``: a table it holds but cannot serve); a static arbiter
raises instead and exits.
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
TAKE_TIMEOUT = KAFKA_TIMEOUT  # seconds to initialise a table's producer before the table counts as unservable
END_ATTEMPT = 1.0  # seconds one commit or abort waits before the table's tenure is checked again
INIT_ATTEMPT = 5.0  # the same for init_transactions (it may wait for the previous owner's transaction to end)


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
        tenure: Callable[[str], int | None] = lambda table: 0,
    ) -> None:
        """``fleet``: fencing drops a table (the group's choice) instead of ending the arbiter; ``ownership``
        describes what this arbiter owns, for messages; ``tenure`` says under which assignment it holds a table
        now (``Ownership.tenure``; None: not at all)."""
        self.settings = settings
        self.prefix = settings.topic_prefix
        self.fleet = fleet
        self.commit_timeout = commit_timeout
        self.signer: Signer | None = None
        self.producers: dict[str, Any] = {}  # by table name
        self.tenures: dict[str, int] = {}  # by table name: the tenure its producer was taken under
        self.open: set[str] = set()  # tables whose transaction is open (begun, not yet ended)
        self.failed: list[tuple[str, TableFencedError]] = []  # fleet: tables dropped by a failure, for the caller
        self._decisions: dict[str, int] = {}  # decisions in each open transaction
        self.started = 0.0  # perf_counter when the first open transaction began
        # Per decisions topic, the newest record known to be in the log: (offset, bytes). Set by rebuilds
        # and by delivery reports; a checkpoint is written only for a state whose chain is that record's hash.
        self.last_record: dict[str, tuple[int, bytes]] = {}
        self._held: dict[str, tuple[str, bytes, bytes | None]] = {}  # table -> (decisions topic, record, key)
        self._describe = ownership
        self._stop = stop
        self._tenure = tenure

    @property
    def in_txn(self) -> bool:
        """True while a table's transaction is open."""
        return bool(self.open)

    @property
    def records(self) -> int:
        """Decisions in the open transactions."""
        return sum(self._decisions.values())

    def serves(self, table: str) -> bool:
        """True while ``table``'s producer was taken under the tenure the table is held under now."""
        taken = self.tenures.get(table)
        return taken is not None and taken == self._tenure(table)

    def take_failed(self) -> list[tuple[str, TableFencedError]]:
        """The tables dropped since the last call because they failed, with why (fleet only)."""
        failed, self.failed = self.failed, []
        return failed

    def _fail(self, table: str, error: TableFencedError) -> None:
        self.failed.append((table, error))
        self.drop(table)

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
        self.tenures[table] = tenure
        self.producers[table] = producer

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
        """Forget ``table``'s producer and open transaction (the broker or the new owner aborts it)."""
        self._held.pop(table, None)
        self._decisions.pop(table, None)
        self.open.discard(table)
        self.tenures.pop(table, None)
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
        if self.fleet and table is not None and not self.serves(table):
            return TableLostError(f"fenced on {where}, which the group took away ({error.str()})", table)
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
        self._decisions[table] = self._decisions.get(table, 0) + 1

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
        """Produce each table's held decision signed, then commit each open transaction; the decisions committed.

        One ``commit_timeout`` for the whole batch. In a fleet a table that fails is dropped and listed in
        ``failed``, and the others are committed all the same."""
        if not self.open:
            return 0
        signer = self.signer
        for name, (topic, data, key) in list(self._held.items()):
            try:
                self._produce(name, topic, data, key, signer.header(name, data) if signer is not None else None)
            except TableFencedError as exc:
                if not self.fleet:
                    raise
                self._fail(name, exc)
        self._held.clear()
        deadline = time.monotonic() + self.commit_timeout
        records = 0
        for name in sorted(self.open):
            try:
                self.end(name, commit=True, deadline=deadline)
            except TableFencedError as exc:
                if not self.fleet:
                    raise
                self._fail(name, exc)
                continue
            self.open.discard(name)  # committed: never aborted nor rebuilt by a later failure
            records += self._decisions.pop(name, 0)
        return records

    def abort(self) -> set[str]:
        """Abort every open transaction within one ``commit_timeout``: the tables aborted.

        A table the group took away is not aborted at all (its new owner's ``init_transactions`` ends the
        transaction). In a fleet a table that fails is dropped and listed in ``failed``; a static arbiter raises
        ``TableFencedError`` instead: it must exit.
        """
        from confluent_kafka import KafkaException

        touched = set(self.open)
        self._held.clear()
        deadline = time.monotonic() + self.commit_timeout
        for name in sorted(touched):
            try:
                try:
                    self.end(name, commit=False, deadline=deadline)
                except KafkaException as exc:  # e.g. Tansu's _CONFLICT after a fenced commit timed out
                    if not self.fleet:
                        raise
                    raise self._unended(name, "abort", exc.args[0]) from exc
            except TableFencedError as exc:
                if not self.fleet:
                    raise
                self._fail(name, exc)
                touched.discard(name)
        self.open.clear()
        self._decisions.clear()
        return touched

    def end(self, table: str, commit: bool, deadline: float | None = None) -> None:
        """Commit or abort ``table``'s transaction, retrying what is retriable until ``deadline`` (monotonic;
        default ``commit_timeout`` from now), and only while this arbiter still serves the table.

        On Kafka a fenced producer's EndTxn fails at once with PRODUCER_FENCED.
        Tansu instead drops the connection, so the call only ever times out. A
        table the group took away (``serves``) is never retried, nor aborted at
        all: ``TableLostError``. A transaction that cannot be ended in time is
        taken as fenced (or the broker as gone): a static arbiter exits rather
        than guess; a fleet member gives the table up.
        """
        from confluent_kafka import KafkaException

        producer = self.producers[table]
        end = producer.commit_transaction if commit else producer.abort_transaction
        verb = "commit" if commit else "abort"
        deadline = time.monotonic() + self.commit_timeout if deadline is None else deadline
        unchecked = commit  # a commit is tried once whatever the group did meanwhile (a revoked table's may pass)
        while True:
            if not unchecked and not self.serves(table):
                raise TableLostError(
                    f"table {table} was taken away by the group; its transaction is left to the new owner", table
                )
            unchecked = False
            try:
                end(END_ATTEMPT)
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
                    raise self._unended(table, verb, error) from exc
                log.warning("%s_transaction of table %s: %s; retrying", verb, table, error)

    def _unended(self, table: str, verb: str, error: Any) -> TableFencedError:
        """The error for ``table``'s transaction that could not be ended (``verb``: commit or abort)."""
        cause = (
            f"({error.str()}): most likely fenced by a newer arbiter owning the table (Tansu drops the connection "
            "instead of answering PRODUCER_FENCED), or the broker is unreachable"
        )
        if self.fleet:
            return TableFencedError(f"could not {verb} the transaction of table {table} in time {cause}", table)
        return TableFencedError(
            f"arbiter ({self._describe()}) could not {verb} the transaction of table {table} within "
            f"{self.commit_timeout:g} s {cause}; exiting without deciding anything more",
            table,
        )


__all__ = [
    "KAFKA_TIMEOUT",
    "TableFencedError",
    "TableLostError",
    "TransactionalSink",
    "is_fenced",
    "on_kafka_error",
    "table_transactional_id",
    "transactional_id",
]
