"""The arbiter's transactional sink: each owned table's decisions, produced inside that table's Kafka transaction.

One Kafka transaction per table and batch, through the table's own producer
(``arbiter.producers``: fencing is per table): a batch that touched several
tables commits each table's transaction in turn.

The newest decision of each table in the open transaction is *held*, not
produced: it is produced signed at commit (``schemas.signing``: the signature of
a batch's last record vouches for the batch), or unsigned once a newer decision
of the same table arrives.

In a fleet the group may take a table away while its transaction is open. A
table no longer served (``TableProducers.serves``) is never retried: its commit
is tried once, its abort not at all, and its producer is dropped at once, the
transaction left for the new owner's ``init_transactions`` to end. Every retry
is bounded: one ``commit_timeout`` for a batch's commits or aborts, attempts of
``END_ATTEMPT`` seconds with the tenure checked between them. A fleet member's
table that fails anyway is dropped and listed in ``failed`` (a
``TableLostError`` when the group took it, else a ``TableFencedError``: a
table it holds but cannot serve), and the other tables are ended all the same;
a static arbiter raises instead and exits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ordo.arbiter.producers import (
    KAFKA_TIMEOUT,
    TableFencedError,
    TableLostError,
    TableProducers,
    is_fenced,
    log,
    on_kafka_error,
    table_transactional_id,
    transactional_id,
)
from ordo.kernel.settings import Settings
from ordo.schemas.signing import SIGNATURE_HEADER, Signer

END_ATTEMPT = 1.0  # seconds one commit or abort waits before the table's tenure is checked again


class TransactionalSink(TableProducers):
    """Each owned table's open transaction: begin, produce (holding the last record), commit, abort."""

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
        """``commit_timeout``: how long a batch's transactions may take to end; the rest as ``TableProducers``."""
        super().__init__(settings, fleet=fleet, ownership=ownership, stop=stop, tenure=tenure)
        self.commit_timeout = commit_timeout
        self.signer: Signer | None = None
        self.open: set[str] = set()  # tables whose transaction is open (begun, not yet ended)
        self.failed: list[tuple[str, TableFencedError]] = []  # fleet: tables dropped by a failure, for the caller
        self._decisions: dict[str, int] = {}  # decisions in each open transaction
        self.started = 0.0  # perf_counter when the first open transaction began
        self._held: dict[str, tuple[str, bytes, bytes | None]] = {}  # table -> (decisions topic, record, key)

    @property
    def in_txn(self) -> bool:
        """True while a table's transaction is open."""
        return bool(self.open)

    @property
    def records(self) -> int:
        """Decisions in the open transactions."""
        return sum(self._decisions.values())

    def take_failed(self) -> list[tuple[str, TableFencedError]]:
        """The tables dropped since the last call because they failed, with why (fleet only)."""
        failed, self.failed = self.failed, []
        return failed

    def _fail(self, table: str, error: TableFencedError) -> None:
        """Drop ``table`` after ``error``, for the caller to learn from ``failed`` (lost if no longer served)."""
        if not isinstance(error, TableLostError) and not self.serves(table):
            error = TableLostError(f"{error} (meanwhile the group took the table away)", table)
        self.failed.append((table, error))
        self.drop(table)

    def drop(self, table: str) -> None:
        """Forget ``table``'s producer and open transaction (the broker or the new owner ends it)."""
        self._held.pop(table, None)
        self._decisions.pop(table, None)
        self.open.discard(table)
        super().drop(table)

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
        """Produce one decision record, with its headers (``_headers``)."""
        from confluent_kafka import KafkaException

        producer = self.producers[table]
        headers = self._headers(table, signature)
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

    def _headers(self, table: str, signature: bytes | None) -> list[tuple[str, bytes]] | None:
        """A decision record's headers: its ``ordo-sig`` when ``signature`` is given."""
        return [(SIGNATURE_HEADER, signature)] if signature is not None else None

    def _produce_held(self) -> None:
        """Produce each table's held decision, signed: its signature vouches for the table's batch. A static
        arbiter's fenced table raises; a fleet member's is dropped and listed in ``failed``."""
        signer = self.signer
        for name, (topic, data, key) in list(self._held.items()):
            try:
                self._produce(name, topic, data, key, signer.header(name, data) if signer is not None else None)
            except TableFencedError as exc:
                if not self.fleet:
                    raise
                self._fail(name, exc)
        self._held.clear()

    def commit(self) -> int:
        """Produce each table's held decision signed, then commit each open transaction; the decisions committed.

        One ``commit_timeout`` for the whole batch. In a fleet a table that fails is dropped and listed in
        ``failed``, and the others are committed all the same."""
        if not self.open:
            return 0
        self._produce_held()
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
        return self.refusal(
            table,
            fleet=f"could not {verb} the transaction of table {table} in time {cause}",
            static=f"could not {verb} the transaction of table {table} within {self.commit_timeout:g} s {cause}",
        )


__all__ = [
    "KAFKA_TIMEOUT",
    "TableFencedError",
    "TableLostError",
    "TableProducers",
    "TransactionalSink",
    "is_fenced",
    "on_kafka_error",
    "table_transactional_id",
    "transactional_id",
]
