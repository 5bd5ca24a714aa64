"""The arbiter's open batch: the intents decided since the last commit, each decision held in its table's Kafka
transaction, and the commit that publishes them all (``arbiter.service`` runs the loop around it).

A batch spans every table whose intents arrived while it was open; committing it commits each table's
transaction in turn (``TransactionalSink.commit``). A table the sink could not commit (``failed``: the group took
it away) is left out of the batch's account, and an aborted batch is forgotten: its tables are rebuilt and their
intents decided again.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ordo.arbiter.decider import Decider
from ordo.arbiter.metrics import ArbiterMetrics
from ordo.arbiter.prom import ArbiterPrometheus
from ordo.arbiter.sink import TransactionalSink
from ordo.arbiter.tables import OwnedTables

log = logging.getLogger("ordo.arbiter")


class DecisionBatch:
    """The decisions since the last commit: decided (``process``), held in the sink, then committed (``commit``)."""

    def __init__(
        self,
        owned: OwnedTables,
        sink: TransactionalSink,
        decider: Decider,
        metrics: ArbiterMetrics,
        prom: ArbiterPrometheus,
    ) -> None:
        self.owned, self.sink, self.decider = owned, sink, decider
        self.metrics, self.prom = metrics, prom
        self.spans: dict[str, tuple[int, int]] = {}  # table -> first and last intent offset decided in the batch

    def process(self, messages: list[Any]) -> None:
        """Decide each intent record of an owned table not decided yet; hold its decision in the table's transaction."""
        from confluent_kafka import KafkaError

        tables = self.owned.by_topic
        sink, decider = self.sink, self.decider
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("intents consumer: %s", error)
                continue
            table = tables.get(message.topic())
            if table is None:
                continue
            offset = message.offset()
            if offset < table.state.next_offset:
                continue  # already decided (a re-fetch after a seek)
            sink.begin(table.name)
            decision, data = decider.decide(table, message, offset)
            sink.hold(table.name, table.decisions, data, decision.txn_id.encode() if decision.txn_id else None)
            decider.count(table.name, decision, offset)
            span = self.spans.get(table.name)
            self.spans[table.name] = (offset if span is None else span[0], offset)

    def commit(self) -> bool:
        """Commit each open table transaction (retrying what librdkafka says is retriable); False when none was open."""
        if not self.sink.in_txn:
            return False
        started = self.sink.started
        records = self.sink.commit()
        dropped = {name for name, _ in self.sink.failed}  # not committed: ``owned.settle`` tells the tables why
        batch, self.spans = {name: span for name, span in self.spans.items() if name not in dropped}, {}
        log_batch(records, batch, started)
        self.metrics.batches += 1
        self.metrics.batched_records += records
        self.metrics.max_batch = max(self.metrics.max_batch, records)
        self.prom.batch_seconds.observe(time.perf_counter() - started)
        self.prom.batch_size.observe(records)
        return True

    def forget(self) -> None:
        """The batch was aborted: nothing of it is committed (its tables are rebuilt and decide again)."""
        self.spans = {}


def log_batch(records: int, batch: dict[str, tuple[int, int]], started: float) -> None:
    """One structured line per committed batch, at debug: decisions, and per table the intent offsets decided."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "decision batch committed: %d decision(s) in %d table(s)",
            records,
            len(batch),
            extra={
                "event": "batch",
                "decisions": records,
                "tables": {name: {"first_offset": a, "last_offset": b} for name, (a, b) in sorted(batch.items())},
                "seconds": round(time.perf_counter() - started, 6),
            },
        )


__all__ = ["DecisionBatch", "log_batch"]
