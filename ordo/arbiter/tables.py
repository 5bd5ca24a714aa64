"""The tables an arbiter decides: taking one (fence, load, follow), dropping one, loading one again.

A table is taken in a fixed order (``take_new``): its producer is initialised
first (``TransactionalSink.take``), which fences whichever arbiter owned the
table before and ends its open transaction; only then is its state loaded from
the decisions log (``StateLoader``), so the load sees everything the older
owner will ever have written; then its intents are read from the offset after
its last decided intent. A table whose decisions log cannot be folded is left
undecided until restart (``broken``); the others go on.

A fleet member drops a table the group took away as soon as it learns it
(``serve_group``, or a failure the sink reports: ``fail``). A table it holds
but cannot serve (``cannot_serve``) is dropped too, and the member reports not
ready until the group takes the table away or assigns it anew
(``Ownership.poll`` gives the member's tables up if the group does neither).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from ordo.arbiter.core import new_state
from ordo.arbiter.intents import IntentReader
from ordo.arbiter.loader import ArbiterStateError, OwnedTable, StateLoader, Stopped
from ordo.arbiter.metrics import ArbiterMetrics
from ordo.arbiter.ownership import Ownership
from ordo.arbiter.prom import ArbiterPrometheus
from ordo.arbiter.sink import KAFKA_TIMEOUT, TableFencedError, TableLostError, TransactionalSink
from ordo.kernel.admin import DECISIONS_CONFIG, TopicPolicy, create_topics, existing_topics, lossy_topics
from ordo.kernel.errors import BrokerUnavailableError
from ordo.kernel.logread import warm_metadata
from ordo.kernel.membership import Changes
from ordo.schemas import decisions_topic
from ordo.schemas.decisionlog import BrokenLogError

log = logging.getLogger("ordo.arbiter")


class OwnedTables:
    """The owned tables by intents topic, and what taking, dropping and reloading one involves."""

    def __init__(
        self,
        ownership: Ownership,
        sink: TransactionalSink,
        intents: IntentReader,
        metrics: ArbiterMetrics,
        prom: ArbiterPrometheus,
    ) -> None:
        self.prefix = ownership.prefix
        self.ownership = ownership
        self.sink = sink
        self.intents = intents
        self.metrics = metrics
        self.prom = prom
        self.loader: StateLoader | None = None  # set by the service's start (it needs keys and a consumer)
        self.by_topic: dict[str, OwnedTable] = {}
        self.broken: set[str] = set()  # tables whose decisions log could not be folded, or that can lose history
        self.policy = TopicPolicy()  # set by the service's start (it knows the cluster's size)

    def __iter__(self) -> Iterator[OwnedTable]:
        return iter(list(self.by_topic.values()))

    def __len__(self) -> int:
        return len(self.by_topic)

    def positions(self) -> list[tuple[str, int]]:
        """``(intents topic, resume offset)`` of every owned table."""
        return [(t.intents, t.state.next_offset) for t in self.by_topic.values()]

    def take_new(self, admin: Any, reader: Any) -> list[str]:
        """Take the tables this arbiter owns whose intents topics appeared since the last look; their names."""
        topics = existing_topics(admin, timeout=KAFKA_TIMEOUT)
        new = self.ownership.new_tables(topics, self.by_topic, self.broken)
        if not new:
            return []
        missing = {decisions_topic(self.prefix, name): DECISIONS_CONFIG for name, _ in new}
        missing = {name: cfg for name, cfg in missing.items() if name not in topics}
        if missing:
            create_topics(admin, missing, timeout=KAFKA_TIMEOUT, policy=self.policy)
        lossy = self._lossy(admin, new)
        new = [(name, topic) for name, topic in new if name not in lossy]
        if not new:
            return []
        # A consumer assigned a topic it has no metadata for waits ~1 s for
        # librdkafka's leader query; a full metadata request fills the cache now.
        warm_metadata(reader, KAFKA_TIMEOUT)
        self.intents.warm()
        failures = self.sink.take_all([name for name, _ in new if name not in self.sink.producers])
        for name, topic in new:
            table = OwnedTable(name, topic, decisions_topic(self.prefix, name), new_state(name))
            try:
                if name in failures:
                    raise failures[name]
                self.sink.take(name)  # fence the table's previous owner before reading what it wrote
                self.load(table)
            except TableLostError as exc:
                log.info("table %s not taken: %s", name, exc)
                continue
            except (TableFencedError, BrokerUnavailableError) as exc:
                if self.ownership.group is None:
                    raise
                self.cannot_serve(name, f"its producer could not be initialised: {exc}")
                continue
            except (BrokenLogError, ArbiterStateError) as exc:
                log.error(
                    "table %s left undecided until restart: %s",
                    name,
                    exc,
                    extra={"event": "table_stopped", "table": name},
                )
                self.broken.add(name)
                continue
            except Stopped:
                break
            # One table at a time: a failure on the next one leaves this one assigned.
            self.by_topic[topic] = table
            self.intents.follow(topic, table.state.next_offset)
            log.info(
                "table %s: rebuilt %d decision(s), head version %d, resuming intents at offset %d (%s)",
                name,
                table.state.decisions,
                table.state.head_version,
                table.state.next_offset,
                table.origin,
            )
        self.metrics.tables = len(self.by_topic)
        self.prom.tables.set(len(self.by_topic))
        return [name for name, _ in new]

    def _lossy(self, admin: Any, new: list[tuple[str, str]]) -> set[str]:
        """The tables of ``new`` whose topics can lose history (docs/operations.md): left undecided until restart.

        One metadata and one DescribeConfigs request for all of them.
        """
        topics = {topic: name for name, intents in new for topic in (intents, decisions_topic(self.prefix, name))}
        refused: set[str] = set()
        for topic, why in sorted(lossy_topics(admin, topics, self.policy, timeout=KAFKA_TIMEOUT).items()):
            log.error("table %s left undecided until restart: %s", topics[topic], why)
            refused.add(topics[topic])
        self.broken |= refused
        return refused

    def load(self, table: OwnedTable) -> None:
        """Load ``table``'s state from its checkpoint and decisions log (the sink learns its newest record)."""
        assert self.loader is not None, "start() first"
        began = time.monotonic()
        table.state, last = self.loader.load(table)
        self.sink.loaded(table.name, table.decisions, last, table.log_end)
        self.prom.rebuild_seconds.labels(table.name).set(time.monotonic() - began)

    def reload(self, names: set[str]) -> None:
        """Load the state of the tables ``names`` again (their transaction was aborted)."""
        for table in self:
            if table.name in names:
                try:
                    self.load(table)
                except (BrokenLogError, ArbiterStateError) as exc:
                    log.error(
                        "table %s left undecided until restart: %s",
                        table.name,
                        exc,
                        extra={"event": "table_stopped", "table": table.name},
                    )
                    self.broken.add(table.name)
                    self.drop(table.name, "its decisions log cannot be folded")

    def drop(self, name: str, why: str) -> None:
        """Stop deciding ``name``: forget its state and producer (an open transaction is the broker's to abort)."""
        topic = next((t for t, table in self.by_topic.items() if table.name == name), None)
        if topic is not None:
            del self.by_topic[topic]
            self.intents.forget(topic)
        self.sink.drop(name)
        self.metrics.tables = len(self.by_topic)
        log.info("table %s dropped: %s", name, why)

    def fail(self, name: str, error: TableFencedError) -> None:
        """The sink dropped ``name`` after ``error``: the group took it (drop it), or it cannot be served."""
        if isinstance(error, TableLostError) or self.ownership.tenure(name) is None:
            self.drop(name, f"taken away by the group ({error})")
        else:
            self.cannot_serve(name, str(error))

    def cannot_serve(self, name: str, why: str) -> None:
        """A table this member holds but cannot serve: dropped, reported (``/readyz``), not taken again until the
        group assigns it anew; the member gives its tables up if the group keeps it here (``Ownership.poll``)."""
        self.ownership.cannot_serve(name, why)
        log.error("table %s cannot be served: %s", name, why, extra={"event": "table_unserved", "table": name})
        self.drop(name, "cannot be served")
        self.report()

    def serve_group(self) -> bool:
        """Fleet: serve the group (between transactions); drop every table it revoked or lost, or assigned anew
        since it was taken (lost and back: its producer is stale); True when it changed."""
        changes = self.ownership.poll()
        if changes:
            for table in self:
                if not self.sink.serves(table.name):
                    self.drop(table.name, self._why_gone(table.name, changes))
        if changes or self.prom.health.not_serving:
            self.report()
        return bool(changes)

    @staticmethod
    def _why_gone(name: str, changes: Changes) -> str:
        if name in changes.revoked:
            return "revoked by the group"
        if name in changes.lost:
            return "lost (this arbiter left the group: paused or partitioned away)"
        return "lost and assigned anew (this arbiter left the group and joined again): taken again"

    def report(self) -> None:
        """Readiness and the unserved-tables gauge: ready only while every table this member holds is served."""
        unserved = self.ownership.not_serving()
        self.prom.health.not_serving = unserved
        self.prom.unserved.set(len(unserved))

    def update_lag(self) -> None:
        """Intents lag per table from the consumer's cached high watermarks (no broker round trip), and the
        stopped tables, for the operator."""
        lag = self.intents.lag((t.name, t.intents, t.state.next_offset) for t in self.by_topic.values())
        for name, value in lag.items():
            self.prom.lag.labels(name).set(value)
        self.metrics.lag = lag
        self.prom.health.degraded = {name: "left undecided until restart" for name in sorted(self.broken)}

    def settle(self) -> None:
        """Drop the tables the sink dropped after a failure (fleet): taken away by the group, or unservable."""
        for name, error in self.sink.take_failed():
            self.fail(name, error)


__all__ = ["OwnedTables"]
