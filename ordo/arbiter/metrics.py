"""The arbiter's counters (``ArbiterService.metrics``): logged as a JSON line and kept by each part that counts."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ordo.kernel.logread import GapStats


@dataclass
class ArbiterMetrics:
    """Counters of one arbiter process (``ArbiterService.metrics``)."""

    decided: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    batched_records: int = 0
    max_batch: int = 0
    aborts: int = 0
    internal_errors: int = 0
    skipped_duplicates: int = 0
    sleeps: int = 0  # times the intents consumer paused for want of work (the doorbell watched instead)
    chain_breaks: int = 0
    refused_unsigned: int = 0  # decisions-log records no trusted signature vouched for (never folded)
    tables: int = 0
    checkpoints_written: int = 0
    checkpoint_failures: int = 0
    checkpoints_loaded: int = 0
    checkpoints_rejected: int = 0
    lag: dict[str, int] = field(default_factory=dict)
    intent_gaps: GapStats = field(default_factory=GapStats)  # re-reads of the intents logs (kernel.logread)
    decision_gaps: GapStats = field(default_factory=GapStats)  # re-reads while rebuilding from decisions logs

    @property
    def mean_batch(self) -> float:
        """Mean number of decisions per Kafka transaction."""
        return self.batched_records / self.batches if self.batches else 0.0

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return {
            "decided": self.decided,
            "accepted": self.accepted,
            "rejected": dict(self.rejected),
            "batches": self.batches,
            "mean_batch": round(self.mean_batch, 1),
            "max_batch": self.max_batch,
            "aborts": self.aborts,
            "internal_errors": self.internal_errors,
            "skipped_duplicates": self.skipped_duplicates,
            "sleeps": self.sleeps,
            "chain_breaks": self.chain_breaks,
            "refused_unsigned": self.refused_unsigned,
            "tables": self.tables,
            "checkpoints_written": self.checkpoints_written,
            "checkpoint_failures": self.checkpoint_failures,
            "checkpoints_loaded": self.checkpoints_loaded,
            "checkpoints_rejected": self.checkpoints_rejected,
            "lag": dict(self.lag),
            "intent_gaps": self.intent_gaps.snapshot(),
            "decision_gaps": self.decision_gaps.snapshot(),
        }


__all__ = ["ArbiterMetrics"]
