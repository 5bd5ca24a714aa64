"""The table service's Prometheus metrics (its own registry, served on ``--metrics-port``), and the layout gauges.

The layout gauges say whether the service keeps up: ``ordo_compactor_live_files{table,partition}``
(live files of each partition of each table it owns, set whenever it plans the table) and
``ordo_compactor_backlog_files{table}``, the live files beyond one per (partition, bucket), which is what
compaction has yet to merge. The alert ``OrdoCompactionBacklogGrowing`` (deploy/prometheus/alerts.yml) fires
when a table's backlog keeps growing for 10 minutes: writers add small files faster than the service
merges them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ordo.schemas.paths import partition_path

if TYPE_CHECKING:
    from ordo.consumer.models import Snapshot


def partition_label(columns: Iterable[str], partition: dict[str, str]) -> str:
    """A partition as a label value: its path (``dt=2024-01-01/region=eu``), ``-`` for an unpartitioned table."""
    return partition_path(list(columns), partition) or "-"


class Metrics:
    """The service's counters and gauges (``ordo_compactor_*``)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        from ordo.kernel.observe import Health, register_build_info

        self.registry = CollectorRegistry()
        register_build_info(self.registry, "compactor")
        self.health = Health("compactor", stall_after=600.0)  # the loop turns every tick; rewrites run beside it
        self.rounds = Counter("ordo_compactor_rounds", "Planning rounds run", registry=self.registry)
        self.committed = Counter(
            "ordo_compactor_commits",
            "Compactions and clusterings the arbiter accepted (one per partition)",
            ["table", "operation"],
            registry=self.registry,
        )
        self.groups = Counter(
            "ordo_compactor_groups",
            "(partition, bucket) groups rewritten by accepted commits",
            ["table", "operation"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "ordo_compactor_rejections",
            "Compactions and clusterings the arbiter rejected, by reason",
            ["table", "operation", "reason"],
            registry=self.registry,
        )
        self.failed = Counter(
            "ordo_compactor_errors",
            "Rewrites that failed before a decision",
            ["table", "operation"],
            registry=self.registry,
        )
        self.abandoned = Counter(
            "ordo_compactor_abandoned",
            "Rewrites given up before their commit: the service stopped, or another member took the table",
            ["table", "operation"],
            registry=self.registry,
        )
        self.bytes_rewritten = Counter(
            "ordo_compactor_rewritten_bytes",
            "Bytes of input files replaced by accepted rewrites",
            ["table", "operation"],
            registry=self.registry,
        )
        self.batch_seconds = Histogram(
            "ordo_compactor_batch_seconds",
            "One batch of a table: its Spark job (every partition's rewrite) and its commits",
            ["operation"],
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
            registry=self.registry,
        )
        self.pending = Gauge(
            "ordo_compactor_pending", "Rewrites planned but not yet done", ["table"], registry=self.registry
        )
        self.live_files = Gauge(
            "ordo_compactor_live_files",
            "Live files of a partition of a table the service owns (as of its last plan)",
            ["table", "partition"],
            registry=self.registry,
        )
        self.backlog = Gauge(
            "ordo_compactor_backlog_files",
            "Live files beyond one per (partition, bucket) of a table the service owns: what is left to merge",
            ["table"],
            registry=self.registry,
        )
        self.tables = Gauge(
            "ordo_compactor_tables", "Tables this service compacts (its share of a fleet)", registry=self.registry
        )
        self.busy = Gauge(
            "ordo_compactor_busy_tables",
            "Tables being rewritten now (at most the parallel limit)",
            registry=self.registry,
        )
        self._partitions: dict[str, set[str]] = {}

    def observe_layout(self, table: str, snapshot: Snapshot) -> None:
        """Set the layout gauges of ``table`` from its snapshot (partitions gone since are dropped)."""
        columns = list(snapshot.metadata.partition_columns)
        files: dict[str, int] = {}
        buckets: dict[str, set[int]] = {}
        for f in snapshot.files:
            label = partition_label(columns, dict(f.partition))
            files[label] = files.get(label, 0) + 1
            buckets.setdefault(label, set()).add(f.bucket)
        for gone in self._partitions.get(table, set()) - set(files):
            self.live_files.remove(table, gone)
        for label, count in files.items():
            self.live_files.labels(table, label).set(count)
        self._partitions[table] = set(files)
        self.backlog.labels(table).set(sum(count - len(buckets[label]) for label, count in files.items()))

    def forget(self, table: str) -> None:
        """Drop ``table``'s per-table series (another member owns it now, or it is off)."""
        for label in self._partitions.pop(table, set()):
            self.live_files.remove(table, label)
        for gauge in (self.backlog, self.pending):
            try:
                gauge.remove(table)
            except KeyError:
                pass

    def samples(self) -> dict[str, float]:
        """Every non-zero sample as ``name{labels}: value`` (for logs and test messages)."""
        out = {}
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.value and not sample.name.endswith("_created"):
                    labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                    out[f"{sample.name}{{{labels}}}"] = sample.value
        return out

    def value(self, metric: Any, **labels: str) -> float:
        """Current value of one labelled counter or gauge (0 when never set)."""
        name = metric._name + ("_total" if metric._type == "counter" else "")
        got = self.registry.get_sample_value(name, labels)
        return 0.0 if got is None else got


__all__ = ["Metrics", "partition_label"]
