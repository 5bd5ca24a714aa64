"""The arbiter's state loader: a table's state from its checkpoint and the tail of its decisions log.

The decisions log is read with ``kernel.logread.read_to_end`` (read_committed,
gaps re-read, up to the end) through one kept consumer; each record passes the
signature check (``schemas.signing.ChainVerifier``: only records a trusted
signature vouches for are folded) and then ``arbiter.core.fold_record``: the
one fold of a decisions log (``schemas.decisionlog``) and ``apply``.

A checkpoint (``arbiter.checkpoint``) is used when the record at its log offset
is there, hashes to its chain and answers its last intent offset: then only the
records after it are folded. Otherwise -- the file is damaged or foreign, the log
is shorter, the record differs -- it is discarded for a full replay.

Tansu (the embedded broker) does not hide aborted records from read_committed
readers. That is safe here: the loader folds exactly what every reader sees,
so a decision that landed in an aborted transaction is, on Tansu, simply part
of the history (and on Kafka it is hidden and the intent decided again).
See docs/tansu.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ordo.arbiter import checkpoint as checkpoints
from ordo.arbiter.core import TableState, fold_record, new_state
from ordo.arbiter.intents import consumer_config
from ordo.arbiter.metrics import ArbiterMetrics
from ordo.kernel.errors import BrokerUnavailableError, OrdoError
from ordo.kernel.logread import GapChecker, LogReadError, decisions_follow, read_to_end
from ordo.kernel.settings import Settings
from ordo.schemas import CommitDecision, chain_hash, decode
from ordo.schemas.decisionlog import BrokenLogError, LogProblem
from ordo.schemas.signing import ChainVerifier, Trust, signature_of

log = logging.getLogger("ordo.arbiter")

KAFKA_TIMEOUT = 30.0


def rebuild_reader(settings: Settings, metrics: ArbiterMetrics) -> tuple[Any, GapChecker]:
    """The kept consumer, and its gap checker, that ``StateLoader`` reads every decisions log with."""
    from confluent_kafka import Consumer

    consumer = Consumer(consumer_config(settings, "rebuild"))
    checker = GapChecker(
        consumer_config(settings, "rebuild-reread"),
        transactional=True,
        consumer=consumer,
        name="arbiter rebuild",
        stats=metrics.decision_gaps,
        follows=decisions_follow,  # a decision skipped inside a transaction breaks the hash chain: re-read
    )
    return consumer, checker


class ArbiterStateError(OrdoError):
    """Raised when a decision that keeps the log's invariants cannot be folded into state (a bug in the core).

    A log that breaks an invariant raises ``schemas.decisionlog.BrokenLogError`` instead."""


class Stopped(Exception):
    """Internal: ``stop()`` was called while a table's state was being loaded (no partial state is handed out)."""


@dataclass(slots=True)
class OwnedTable:
    """A table this arbiter decides: its topics and its state."""

    name: str
    intents: str
    decisions: str
    state: TableState
    checkpointed: int = 0  # state.decisions covered by the newest checkpoint written or loaded
    log_end: int = -1  # the decisions log's end offset before the last load began (-1: not asked)
    origin: str = ""  # how the state was loaded (for the log)


@dataclass
class _Fold:
    state: TableState
    last: tuple[int, bytes] | None = None  # the newest record folded: (offset, bytes)
    records: int = 0  # records of the log read after the checkpoint (or from the start)
    end: int = -1  # the offset after the last record read


def checkpoint_mismatch(checkpoint: checkpoints.Checkpoint, offset: int, value: bytes | None) -> str | None:
    """Why the decisions-log record at ``offset`` proves ``checkpoint`` is not a fold of this log, or None."""
    state = checkpoint.state
    if offset != checkpoint.log_offset:
        return f"the log has no record at offset {checkpoint.log_offset} (next record at {offset})"
    if value is None or chain_hash(value) != state.chain:
        return f"the record at offset {offset} is not the one the checkpoint folded last (hash differs)"
    try:
        decision = decode(value)
    except Exception as exc:
        return f"the record at offset {offset} is not a decision: {exc}"
    if not isinstance(decision, CommitDecision) or decision.intent_offset != state.last_intent_offset:
        return f"the record at offset {offset} does not answer intent offset {state.last_intent_offset}"
    return None


class StateLoader:
    """Loads each table's state; ``load`` is called when a table is taken and after an aborted transaction."""

    def __init__(
        self,
        reader: tuple[Any, GapChecker],
        trust: Trust,
        metrics: ArbiterMetrics,
        read_checkpoint: Callable[[str], checkpoints.Checkpoint | None],
        stop: threading.Event,
        *,
        log_end: bool = False,
    ) -> None:
        """``reader``: the kept read_committed consumer (partition EOF on) and its gap checker. ``log_end``: note
        each log's end offset before loading it (``OwnedTable.log_end``: where ``DirectSink`` expects the next
        record)."""
        self._log_end = log_end
        self._reader = reader
        self._trust = trust
        self.metrics = metrics
        self._read_checkpoint = read_checkpoint
        self._stop = stop

    def load(self, table: OwnedTable) -> tuple[TableState, tuple[int, bytes] | None]:
        """Fold ``table``'s decisions log (up to its end) into state; also the newest record folded.

        Sets ``table.checkpointed`` and ``table.origin``. Raises ``BrokenLogError``
        for a log that breaks an invariant, ``Stopped`` when stopped meanwhile.
        """
        began = time.monotonic()
        end = self._end(table.decisions) if self._log_end else -1
        checkpoint = self._checkpoint(table)
        folded = self._fold(table, checkpoint) if checkpoint is not None else None
        if folded is None:
            table.checkpointed = 0
            folded = self._fold(table, None)
            assert folded is not None
        # The end is the watermark asked before the read, or the read's end when that is further: Tansu answers
        # the base offset of the log's last record batch + 1, short of the end when that batch holds several
        # records (a log written without transactions; with them the last batch is a one-record marker).
        table.log_end = max(end, folded.end) if self._log_end else -1
        elapsed = time.monotonic() - began
        if table.checkpointed:
            assert checkpoint is not None
            table.origin = (
                f"checkpoint of {table.checkpointed} decision(s) at log offset {checkpoint.log_offset} "
                f"+ {folded.records} record(s) of the log, {elapsed:.3f} s"
            )
        else:
            table.origin = f"{folded.records} record(s) of the log, no checkpoint, {elapsed:.3f} s"
        return folded.state, folded.last

    def _checkpoint(self, table: OwnedTable) -> checkpoints.Checkpoint | None:
        """The table's checkpoint when its file is usable and the log can hold its record."""
        checkpoint = self._read_checkpoint(table.name)
        if checkpoint is None:
            return None
        # Tansu answers a fetch beyond the log end with nothing (no OFFSET_OUT_OF_RANGE), so look first.
        problem = self._offset_problem(table.decisions, checkpoint.log_offset)
        if problem is not None:
            self._reject(table, checkpoint, problem)
            return None
        return checkpoint

    def _reject(self, table: OwnedTable, checkpoint: checkpoints.Checkpoint, reason: str) -> None:
        log.warning(
            "table %s: checkpoint at log offset %d not used (%s); full replay",
            table.name,
            checkpoint.log_offset,
            reason,
        )
        self.metrics.checkpoints_rejected += 1

    def _end(self, topic: str) -> int:
        """The end offset of ``topic`` (its high watermark), or -1 when the broker does not answer."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            return int(self._reader[0].get_watermark_offsets(TopicPartition(topic, 0), timeout=KAFKA_TIMEOUT)[1])
        except KafkaException as exc:
            log.warning("cannot read the end of %s (%s): its next batch is checked against the log", topic, exc)
            return -1

    def _offset_problem(self, topic: str, offset: int) -> str | None:
        """Why the decisions log cannot hold a record at ``offset`` (outside its watermarks), or None."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            low, high = self._reader[0].get_watermark_offsets(TopicPartition(topic, 0), timeout=KAFKA_TIMEOUT)
        except KafkaException as exc:
            return f"cannot read the log's watermarks: {exc.args[0]}"
        if offset >= high > low:
            # Tansu answers the base offset of the log's last record batch + 1, short of the end when that batch
            # holds several records (a log written without transactions): read the last batch from there.
            high = max(high, self._read_end(topic, high - 1))
        if not low <= offset < high:
            return f"the log holds offsets {low} to {high - 1} only"
        return None

    def _read_end(self, topic: str, start: int) -> int:
        """The offset after the last record of ``topic`` from ``start`` on (``start`` itself when none)."""
        end = start
        try:
            for message in read_to_end(
                {}, topic, start=start, transactional=True, timeout=KAFKA_TIMEOUT, reader=self._reader
            ):
                end = message.offset() + 1
        except LogReadError as exc:
            log.warning("cannot read the end of %s (%s)", topic, exc)
        return end

    def _fold(self, table: OwnedTable, checkpoint: checkpoints.Checkpoint | None) -> _Fold | None:
        """Read the log from the checkpoint's record (or the start) and fold it; None when the log disproves it."""
        state = checkpoint.state if checkpoint is not None else new_state(table.name)
        result = _Fold(state)
        # Only records a trusted signature vouches for are folded (the checkpoint's state was verified when folded).
        verifier: ChainVerifier[tuple[int, bytes]] = ChainVerifier(table.name, self._trust, anchor=state.chain)
        unproven = checkpoint
        start = checkpoint.log_offset if checkpoint is not None else 0
        try:
            for message in read_to_end(
                {},
                table.decisions,
                start=start,
                transactional=True,
                timeout=KAFKA_TIMEOUT,
                reader=self._reader,
                stop=self._stop.is_set,
            ):
                offset, value = message.offset(), message.value()
                result.end = offset + 1
                if unproven is not None:
                    problem = checkpoint_mismatch(unproven, offset, value)
                    if problem is not None:
                        self._reject(table, unproven, problem)
                        return None
                    unproven = None
                    result.last = (offset, value)
                    table.checkpointed = state.decisions
                    self.metrics.checkpoints_loaded += 1
                    continue
                released, refused = verifier.push(offset, value, signature_of(message.headers()), (offset, value))
                for refusal in refused:
                    self.metrics.refused_unsigned += 1
                    log.error(
                        "table %s: decision at offset %d not folded: %s",
                        table.name,
                        refusal.offset,
                        refusal.reason,
                        extra={"event": "refused", "table": table.name, "offset": refusal.offset},
                    )
                for at, record in released:
                    if self._fold_record(state, record, at):
                        result.last = (at, record)
                    result.records += 1
        except LogReadError as exc:
            raise BrokerUnavailableError(str(exc)) from exc
        if self._stop.is_set():
            raise Stopped()  # never hand out a partial state
        if unproven is not None:
            self._reject(table, unproven, f"the log ends before offset {unproven.log_offset}")
            return None
        unvouched = verifier.unvouched()
        self.metrics.refused_unsigned += len(unvouched)
        for refusal in unvouched[:20]:
            log.warning(
                "table %s: decision at offset %d not folded: %s (an aborted batch or a forger)",
                table.name,
                refusal.offset,
                refusal.reason,
                extra={"event": "refused", "table": table.name, "offset": refusal.offset},
            )
        return result

    def _fold_record(self, state: TableState, data: bytes, offset: int) -> bool:
        """Fold one decision record into ``state``; False when it is skipped (a later decision for an intent).

        A record that breaks the log's invariants refuses the table, a chain
        break too (docs/architecture.md, "Reading a decisions log").
        """
        try:
            fold_record(state, data, offset)
        except BrokenLogError as exc:
            if exc.kind.skippable:
                # A second decision for an intent already decided: never written by a
                # fenced arbiter on Kafka; kept out of the state whatever the broker.
                self.metrics.skipped_duplicates += 1
                log.warning(
                    "table %s: skipping decision at offset %d: %s",
                    state.table,
                    offset,
                    exc,
                    extra={"event": "skipped", "table": state.table, "offset": offset},
                )
                return False
            if exc.kind is LogProblem.CHAIN:
                self.metrics.chain_breaks += 1
            raise
        except Exception as exc:  # the record kept every invariant, yet ``apply`` failed: a bug
            raise ArbiterStateError(
                f"decision at offset {offset} of the decisions log cannot be folded: {type(exc).__name__}: {exc}"
            ) from exc
        return True


__all__ = [
    "ArbiterStateError",
    "OwnedTable",
    "StateLoader",
    "Stopped",
    "checkpoint_mismatch",
    "rebuild_reader",
]
