"""The arbiter's decider: one intent record in, its decision out and folded into the table's state.

The thin adapter of the pure core (``arbiter.core``): ``evaluate_record`` (bytes
in, decision out, never raises for bad input), ``encode``, then ``apply`` of the
arbiter's own decision -- never re-checked against the log's invariants, which
hold by construction (the live path stays as fast as the core). A core that
raises anyway (a bug) does not stop the table: a crash while deciding becomes a
``MALFORMED_INTENT`` rejection of that record; a crash while applying poisons
the record, the transaction is aborted and the state rebuilt (``Rebuild``), and
the record is then rejected the same way.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from ordo.arbiter.core import apply, evaluate_record, reject_malformed
from ordo.arbiter.loader import OwnedTable
from ordo.arbiter.metrics import ArbiterMetrics
from ordo.arbiter.prom import ArbiterPrometheus
from ordo.schemas import CommitDecision, Outcome, encode

log = logging.getLogger("ordo.arbiter")


class Rebuild(Exception):
    """Internal: the open transaction must be aborted and state rebuilt."""


class Decider:
    """Decides intent records of owned tables and counts the decisions."""

    def __init__(self, metrics: ArbiterMetrics, prom: ArbiterPrometheus) -> None:
        self.metrics = metrics
        self.prom = prom
        self._poisoned: set[tuple[str, int]] = set()  # intent records whose decision crashed ``apply``

    def decide(self, table: OwnedTable, message: Any, offset: int) -> tuple[CommitDecision, bytes]:
        """The decision for the intent record ``message`` at ``offset``, and its bytes, folded into ``table.state``."""
        started = time.perf_counter()
        decision, data = self._evaluate(table, message, offset)
        self.prom.decide_seconds.observe(time.perf_counter() - started)
        try:
            apply(table.state, decision, data)  # the arbiter's own decision: folded without re-checking it
        except Exception:
            log.exception(
                "table %s: applying the decision for intent offset %d failed (a bug)",
                table.name,
                offset,
                extra={"event": "internal_error", "table": table.name, "offset": offset},
            )
            self.metrics.internal_errors += 1
            self._poisoned.add((table.intents, offset))
            raise Rebuild() from None
        return decision, data

    def _evaluate(self, table: OwnedTable, message: Any, offset: int) -> tuple[CommitDecision, bytes]:
        state = table.state
        if not self._poisoned or (table.intents, offset) not in self._poisoned:
            try:
                decision = evaluate_record(state, message.value(), message.timestamp()[1], offset)
                return decision, encode(decision)
            except Exception as exc:
                log.exception(
                    "table %s: deciding intent offset %d raised (a bug)",
                    table.name,
                    offset,
                    extra={"event": "internal_error", "table": table.name, "offset": offset},
                )
                self.metrics.internal_errors += 1
                error = f"internal error while deciding: {type(exc).__name__}: {exc}"
        else:
            error = "internal error while applying the decision for this intent"
        decision = reject_malformed(state, offset, error)
        return decision, encode(decision)

    def count(self, table: str, decision: CommitDecision, offset: int) -> None:
        """Count a decision added to its table's transaction (and log a rejection)."""
        metrics = self.metrics
        metrics.decided += 1
        self.prom.decided(table, decision.outcome.value, decision.reason or "")
        if decision.outcome is Outcome.ACCEPTED:
            metrics.accepted += 1
            return
        metrics.rejected[decision.reason or "UNKNOWN"] += 1
        log.info(
            json.dumps(
                {
                    "event": "rejected",
                    "txn_id": decision.txn_id,
                    "table": table,
                    "reason": decision.reason,
                    "message": decision.message,
                    "offset": offset,
                }
            )
        )


__all__ = ["Decider", "Rebuild"]
