"""The arbiter's direct sink: each owned table's decisions, produced without a Kafka transaction.

``ORDO_DECISIONS_TRANSACTIONS=false`` (a prototype, issue 29; docs/architecture.md, "Decisions without Kafka
transactions"). Same interface as ``TransactionalSink``: ``begin``, ``hold``, ``commit``, ``abort``. Each table
is written by an idempotent ``acks=all`` producer with no transactional id; a batch is its records produced in
order, the last one signed, then a flush. No AddPartitions, no EndTxn, no markers: readers see a record as
soon as it is replicated.

What fences a twin (another arbiter writing the same table) is where the records land. Each table has an
*expected* offset: the log's end noted before its state was loaded (``loaded``), then the offset after this
arbiter's last record. A batch delivered at exactly the expected offset and the ones after had no other writer
in between, so it links to the head every reader holds. Otherwise the sink reads the log back from the expected
offset: a record it did not write with a higher ``ordo-epoch`` header (the time its writer took the table)
means a newer owner, and the table is given up (``TableFencedError``: a static arbiter exits, a fleet member
drops it); anything else (an older twin, a forger, a failed delivery) makes the sink ask for the table to be
rebuilt from the log (``Rebuild``), whose loader applies the readers' rule (first vouched record wins).
"""

from __future__ import annotations

import struct
import time
from typing import Any

from ordo.arbiter.decider import Rebuild
from ordo.arbiter.producers import (
    log,
    table_transactional_id,
)
from ordo.arbiter.sink import TransactionalSink
from ordo.schemas import decisions_topic
from ordo.schemas.signing import EPOCH_HEADER, SIGNATURE_HEADER, epoch_of


class DirectSink(TransactionalSink):
    """Each owned table's batch: produced by an idempotent producer, checked by where it landed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As ``TransactionalSink``."""
        super().__init__(*args, **kwargs)
        self.epochs: dict[str, int] = {}  # table -> when this arbiter took it, ns (a later owner's is higher)
        self.expected: dict[str, int] = {}  # table -> the offset its next record must land at
        self._delivered: dict[str, list[int]] = {}  # decisions topic -> offsets delivered in this batch
        self._undelivered: set[str] = set()  # decisions topics with a failed delivery in this batch
        self.twins = 0  # batches that met another writer's records

    def _writer(self, table: str, fence: Any) -> Any:
        """An idempotent producer of no transactional id, with this arbiter's epoch for ``table``: ``fence`` (the
        table's transactional id, whose ``init_transactions`` fenced a transactional owner) writes nothing."""
        from confluent_kafka import Producer

        fence.flush(0)  # the epoch bump stays with the coordinator
        config = self.config(table_transactional_id(self.prefix, table))
        del config["transactional.id"]
        config["client.id"] = f"{config['client.id']}.direct"
        self.epochs[table] = time.time_ns()
        return Producer(config)

    def loaded(self, table: str, topic: str, last: tuple[int, bytes] | None, log_end: int) -> None:
        """``table``'s state was loaded from its log, which ended at ``log_end`` (-1: not known) when read."""
        super().loaded(table, topic, last, log_end)
        if log_end >= 0:
            self.expected[table] = log_end
        else:  # not known: the next batch is read back and the table rebuilt
            self.expected.pop(table, None)

    def drop(self, table: str) -> None:
        """Forget ``table`` (its expected offset too)."""
        self.expected.pop(table, None)
        self.epochs.pop(table, None)
        super().drop(table)

    def begin(self, table: str) -> None:
        """Open ``table``'s batch (no Kafka call)."""
        if table in self.open:
            return
        if not self.open:
            self.started = time.perf_counter()
        self.open.add(table)

    def _headers(self, table: str, signature: bytes | None) -> list[tuple[str, bytes]] | None:
        """This sink's ``ordo-epoch`` header, after the ``ordo-sig`` when signed."""
        headers = [(EPOCH_HEADER, struct.pack(">Q", self.epochs[table]))]
        if signature is not None:
            headers.insert(0, (SIGNATURE_HEADER, signature))
        return headers

    def _on_delivery(self, error: Any, message: Any) -> None:
        """Delivery report: note where each record landed (or that one did not)."""
        super()._on_delivery(error, message)
        if error is None:
            self._delivered.setdefault(message.topic(), []).append(message.offset())
        else:
            self._undelivered.add(message.topic())

    def commit(self) -> int:
        """Produce each table's held decision signed, flush, and check where each table's batch landed.

        Returns the decisions written where expected. A table whose batch met another writer is given up
        (``TableFencedError``, a newer twin) or kept open for ``abort`` and ``Rebuild`` is raised."""
        if not self.open:
            return 0
        self._produce_held()
        deadline = time.monotonic() + self.commit_timeout
        for name in sorted(self.open):
            self.producers[name].flush(max(0.0, deadline - time.monotonic()))
        records, suspects = 0, []
        for name in sorted(self.open):
            topic = decisions_topic(self.prefix, name)
            count = self._decisions.get(name, 0)
            offsets = sorted(self._delivered.pop(topic, []))
            expected = self.expected.get(name)
            if topic in self._undelivered or expected is None or offsets != list(range(expected, expected + count)):
                suspects.append((name, topic, expected, offsets))
                continue
            self.expected[name] = expected + count
            self.open.discard(name)
            records += self._decisions.pop(name, 0)
        self._undelivered.clear()
        self._delivered.clear()
        if suspects:
            self.twins += 1
            for name, topic, expected, offsets in suspects:
                self._check_twin(name, topic, expected, offsets)
            if self.open:
                raise Rebuild()
        return records

    def _check_twin(self, table: str, topic: str, expected: int | None, offsets: list[int]) -> None:
        """``table``'s batch did not land where expected: step down for a newer writer, else leave it to rebuild."""
        from ordo.kernel.logread import LogReadError, read_to_end

        ours, epoch = set(offsets), self.epochs.get(table, 0)
        newest = None
        start = expected if expected is not None else (min(offsets) if offsets else 0)
        config = self.settings.kafka_config(**{"isolation.level": "read_committed", "group.id": f"{self.prefix}.twin"})
        try:
            for message in read_to_end(config, topic, start=start, transactional=True, timeout=self.commit_timeout):
                if message.offset() in ours:
                    continue
                theirs = epoch_of(message.headers())
                if theirs is not None and (newest is None or theirs > newest):
                    newest = theirs
        except LogReadError as exc:  # not read back: the rebuild reads the log (and fails loudly if it cannot)
            log.warning("table %s: cannot read the log back (%s)", table, exc)
        log.warning(
            "table %s: batch of %d record(s) landed at %s, expected from offset %s: another writer wrote the "
            "log (newest epoch %s, ours %d)",
            table,
            len(offsets),
            f"{offsets[0]}..{offsets[-1]}" if offsets else "nowhere",
            expected,
            newest,
            epoch,
            extra={"event": "twin", "table": table},
        )
        if newest is not None and newest > epoch:
            error = self.refusal(
                table,
                fleet=f"fenced on table {table} by a newer writer of its decisions log (epoch {newest}): stepping down",
                static=f"was fenced on table {table} by a newer arbiter writing its decisions log (epoch {newest} > "
                f"{epoch}): stepping down",
            )
            if not self.fleet:
                raise error
            self._fail(table, error)

    def abort(self) -> set[str]:
        """Forget the open batches (what was produced is in the log or never will be): the tables to rebuild.

        Pending deliveries are waited for first, so the rebuild reads what this arbiter wrote."""
        touched = set(self.open)
        self._held.clear()
        deadline = time.monotonic() + self.commit_timeout
        for name in sorted(touched):
            producer = self.producers.get(name)
            if producer is not None:
                producer.flush(max(0.0, deadline - time.monotonic()))
        self._delivered.clear()
        self._undelivered.clear()
        self.open.clear()
        self._decisions.clear()
        return touched


__all__ = ["EPOCH_HEADER", "DirectSink", "epoch_of"]
