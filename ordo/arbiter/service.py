"""The arbiter's Kafka loop: the thin adapter around the pure core (``arbiter.core``).

Exactly once, per table: every intent record gets one decision, written to the
table's decisions topic inside a Kafka transaction. The decisions log is also
the progress marker: the arbiter resumes each table's intents at the offset
after the last decided intent, so no consumer-group offsets are needed and a
crash can neither lose nor repeat a decision.

The service is made of named parts, each in its module:

* ``arbiter.ownership.Ownership``: which tables this arbiter owns (a static
  ``--shard``, or its share of a fleet's consumer group);
* ``arbiter.producers.TableProducers``: a transactional producer per owned
  table (``<prefix>.arbiter.table.<table>``: fencing is per table), taken under
  the table's tenure, fencing errors;
* ``arbiter.sink.TransactionalSink``: begin, produce, commit, abort, the held
  signed record;
* ``arbiter.loader.StateLoader``: a table's state from its checkpoint and the
  tail of its decisions log (``kernel.logread.read_to_end`` and the one fold of
  ``schemas.decisionlog``);
* ``arbiter.checkpointer.Checkpointer``: when to write checkpoints, from a
  forked child;
* ``arbiter.intents.IntentReader``: the intents logs, gaps re-read, the
  doorbell when idle;
* ``arbiter.tables.OwnedTables``: the owned tables, and taking (fence, load,
  follow), dropping and reloading one;
* ``arbiter.decider.Decider``: one intent record in, its decision out (the
  pure core's adapter);
* ``arbiter.batch.DecisionBatch``: the decisions since the last commit, held in
  their tables' transactions, and the commit that publishes them;
* this module: the loop, and the order of things.

A table is taken in a fixed order (``_take``): its producer is initialised
first, which fences whichever arbiter owned the table before and ends its open
transaction; only then is state loaded from the decisions log, so the load
sees everything the older owner will ever have written. Two arbiters whose
shard settings overlap (0/1 and 1/2, 0/2 and 2/3) therefore fence each other on
exactly the tables both own: the one that took a table later wins it; the other
is fenced at its next decision for that table and exits (code 3); a fleet
member drops the table instead. A batch that touched several tables commits
each table's transaction in turn.

A fleet member never waits on a table the group took away: the sink drops it
at its next attempt to end the transaction (``TransactionalSink.serves``) and
lists it in ``failed``, and ``OwnedTables.settle`` drops it after each step. Every
retry is bounded (one ``commit_timeout`` per batch), so one table cannot hold
the others for longer.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from ordo.arbiter.batch import DecisionBatch
from ordo.arbiter.checkpointer import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHECKPOINT_INTERVAL, Checkpointer, freeze_state
from ordo.arbiter.core import TableState
from ordo.arbiter.decider import Decider, Rebuild
from ordo.arbiter.directsink import DirectSink
from ordo.arbiter.intents import IDLE_AFTER, IntentReader, consumer_config
from ordo.arbiter.loader import ArbiterStateError, StateLoader, Stopped, rebuild_reader
from ordo.arbiter.metrics import ArbiterMetrics
from ordo.arbiter.ownership import Ownership, default_group, parse_shard, shard_of
from ordo.arbiter.prom import ArbiterPrometheus
from ordo.arbiter.sink import (
    KAFKA_TIMEOUT,
    TableFencedError,
    TableLostError,
    TransactionalSink,
    is_fenced,
    table_transactional_id,
    transactional_id,
)
from ordo.arbiter.tables import OwnedTables
from ordo.kernel.admin import existing_topics, topic_policy
from ordo.kernel.errors import ArbiterFencedError, BrokerUnavailableError
from ordo.kernel.keys import arbiter_signer, reader_trust
from ordo.kernel.ready import ARBITER_READY
from ordo.kernel.settings import Settings

log = logging.getLogger("ordo.arbiter")
kafka_log = logging.getLogger("ordo.kafka")  # librdkafka's own log lines

DEFAULT_BATCH_CAP = 5000
LAG_INTERVAL = 1.0  # seconds between updates of the intents-lag gauges
READY_MESSAGE = ARBITER_READY  # kernel.ready: the line ordo.services.stack waits for


class ArbiterService:
    """Decides the intents of every table it owns, one sequential fold per table.

    ``run()`` blocks until ``stop()`` (safe to call from a signal handler or
    another thread). It raises ``ArbiterFencedError`` when a newer arbiter with
    the same transactional id took over; it never re-initialises then, which
    would fence the newer one back.
    """

    def __init__(
        self,
        settings: Settings,
        shard: tuple[int, int] = (0, 1),
        *,
        batch_cap: int = DEFAULT_BATCH_CAP,
        discovery_interval: float = 0.5,
        metrics_interval: float = 10.0,
        poll_timeout: float = 0.05,
        idle_after: float = IDLE_AFTER,
        commit_timeout: float = KAFKA_TIMEOUT,
        state_dir: str | None = None,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        checkpoint_interval: float = DEFAULT_CHECKPOINT_INTERVAL,
        checkpoint_fork: bool | None = None,
        group: str | None = None,
        serve: bool = False,
    ) -> None:
        """``group``: share tables with every arbiter of this Kafka consumer group instead of a static ``shard``.

        ``serve``: serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``settings.arbiter_metrics_host`` and
        ``arbiter_metrics_port`` (``ordo arbiter`` does; an embedded service need not).

        ``state_dir`` (default ``settings.state_dir``; ``""`` or ``checkpoint_every=0`` turn checkpoints off)
        holds ``<prefix>/<table>.ckpt``; ``checkpoint_fork`` (default: where ``os.fork`` exists) writes
        periodic checkpoints from a child process."""
        self.ownership = Ownership(settings, shard, group)
        self.settings, self.prefix, self.shard, self.group = settings, settings.topic_prefix, shard, group
        self.batch_cap = batch_cap
        self.discovery_interval = discovery_interval
        self.metrics_interval = metrics_interval
        self.metrics = ArbiterMetrics()
        self.prom = ArbiterPrometheus(self.metrics, lambda: set(self.owned.broken) if hasattr(self, "owned") else set())
        self.serve = serve
        self.metrics_port: int | None = None  # the /metrics port once serving
        self._stop = threading.Event()
        self.sink = (TransactionalSink if settings.decisions_transactions else DirectSink)(
            settings,
            fleet=group is not None,
            ownership=self.ownership.describe,
            commit_timeout=commit_timeout,
            stop=self._stop,
            tenure=self.ownership.tenure,
        )
        self.checkpointer = Checkpointer(
            settings.state_dir if state_dir is None else state_dir,
            self.prefix,
            self.metrics,
            every=checkpoint_every,
            interval=checkpoint_interval,
            fork=checkpoint_fork,
        )
        self.intents = IntentReader(
            settings, self._positions, self.metrics, self.prom, poll_timeout=poll_timeout, idle_after=idle_after
        )
        self.owned = OwnedTables(self.ownership, self.sink, self.intents, self.metrics, self.prom)
        self.decider = Decider(self.metrics, self.prom)
        self._reader: Any = None  # the state loader's consumer, and its gap checker
        self._reader_gaps: Any = None
        self._admin: Any = None
        self._started_at = time.monotonic()
        self.batch = DecisionBatch(self.owned, self.sink, self.decider, self.metrics, self.prom)

    @property
    def transactional_id(self) -> str:
        """The per-shard transactional id this arbiter fences at start-up (arbiters of older versions used it)."""
        return transactional_id(self.prefix, self.shard)

    @property
    def tables(self) -> dict[str, TableState]:
        """The state of every table this arbiter owns, by table name (read-only use)."""
        return {t.name: t.state for t in self.owned}

    @property
    def rebalances(self) -> int:
        """Assignments the group made to this arbiter (fleet mode)."""
        return self.ownership.rebalances

    def stop(self) -> None:
        """Ask ``run()`` to commit what it decided and return."""
        self._stop.set()

    def _consumer_config(self, role: str, wait_ms: int | None = None) -> dict[str, Any]:
        return consumer_config(self.settings, role, wait_ms)

    def _producer_config(self, txn_id: str) -> dict[str, Any]:
        return self.sink.config(txn_id)

    def _positions(self) -> list[tuple[str, int]]:
        return self.owned.positions()

    # ------------------------------------------------------------------ lifecycle

    def run(self) -> None:
        """Start, then decide intents until stopped."""
        try:
            self.start()
            self._loop()
            self._guard(self._commit)
            self.checkpointer.final(self.owned, self.sink.last_record.get, self.sink.poll)
        except Stopped:
            log.info("stopped while rebuilding state; nothing more decided")
        finally:
            self.close()

    def start(self) -> None:
        """Fence older arbiters, discover tables and rebuild their state."""
        from confluent_kafka.admin import AdminClient

        # 0. Keys first: a misconfigured arbiter stops before it fences anyone.
        signer = self.sink.signer = arbiter_signer(self.settings)
        trust = reader_trust(self.settings, extra=[signer.public_raw] if signer is not None else [])
        if signer is None:
            log.warning("signatures not required and no ORDO_ARBITER_KEY: writing UNSIGNED decisions")
        if self.serve and self.settings.arbiter_metrics_port is not None:
            self.metrics_port = self.prom.serve(self.settings.arbiter_metrics_port, self.settings.arbiter_metrics_host)
        config = self.settings.kafka_config
        self._admin = AdminClient(config(logger=kafka_log, **{"client.id": f"{self.prefix}.arbiter.admin"}))
        # 1. Fence an arbiter of an older version with this shard (it used one per-shard transactional id)
        #    and end its open transaction. Each table is then taken through its own producer (``OwnedTables``).
        self.sink.fence_shard(self.shard)
        self.intents.open()
        reader = self._reader, self._reader_gaps = rebuild_reader(self.settings, self.metrics)
        self.owned.loader = StateLoader(
            reader,
            trust,
            self.metrics,
            self.checkpointer.read,
            self._stop,
            log_end=not self.settings.decisions_transactions,
        )
        self.owned.policy = topic_policy(self._admin, self.settings, timeout=KAFKA_TIMEOUT)
        self.checkpointer.remove_stale()
        if self.group is not None:
            self.ownership.join(existing_topics(self._admin, timeout=KAFKA_TIMEOUT), self._stop)
            if self._stop.is_set():
                raise Stopped()
        # 2.-4. Tables: discover, rebuild (from a checkpoint and the log's tail), assign.
        self._discover()
        self.prom.health.ready = True
        log.info(
            "%s: %s, transactional ids %s, prefix %r, %d table(s), %.3f s after start",
            READY_MESSAGE,
            self.ownership.describe(),
            table_transactional_id(self.prefix, "<table>"),
            self.prefix,
            len(self.owned),
            time.monotonic() - self._started_at,
        )

    def close(self) -> None:
        """Close the Kafka clients (an open transaction is left for the broker to abort)."""
        self.checkpointer.wait(10.0)
        self.ownership.close()  # leaves the group: the others take its tables at once
        self.intents.close()
        if self._reader is not None:
            try:
                self._reader.close()
            except Exception:  # closing is best effort
                log.debug("closing consumer failed", exc_info=True)
        if self._reader_gaps is not None:
            self._reader_gaps.close()
        self._reader = self._admin = None
        self.sink.close()
        self.prom.close()

    def _discover(self) -> None:
        """Take the tables this arbiter owns that appeared since the last look (``OwnedTables.take_new``)."""
        if self.owned.take_new(self._admin, self._reader):
            freeze_state(full=True)  # the rebuilt states are long-lived: out of the full collections' walk
            self._checkpoint(after_rebuild=True)

    def _checkpoint(self, *, after_rebuild: bool = False) -> None:
        if not self.sink.in_txn:
            self.checkpointer.maybe(
                self.owned, self.sink.last_record.get, refresh=self.sink.poll, after_rebuild=after_rebuild
            )

    # ------------------------------------------------------------------ loop

    def _loop(self) -> None:
        now = time.monotonic()
        next_discovery = now + self.discovery_interval
        next_metrics = now + self.metrics_interval
        next_lag = now + LAG_INTERVAL
        sink = self.sink
        while not self._stop.is_set():
            self.prom.health.beat()
            if self.group is not None and not sink.in_txn and self.owned.serve_group():
                next_discovery = 0.0
            now = time.monotonic()
            if now >= next_discovery:
                try:
                    self._guard(self._discover)
                except BrokerUnavailableError as exc:
                    log.warning("table discovery failed: %s; retrying", exc)
                self._checkpoint()  # also reaps a finished checkpoint writer
                next_discovery = time.monotonic() + self.discovery_interval
                if self._stop.is_set():
                    break
            if now >= next_metrics:
                self._log_metrics()
                next_metrics = now + self.metrics_interval
            elif now >= next_lag:
                self.owned.update_lag()
                next_lag = now + LAG_INTERVAL
            messages = self.intents.fetch(self.batch_cap - sink.records, sink.in_txn)
            if messages:
                self._guard(self._process, messages)
            if sink.in_txn and (not messages or sink.records >= self.batch_cap):
                self._guard(self._commit)

    def _guard(self, step: Any, *args: Any) -> None:
        """Run one loop step; on an abortable failure abort, rebuild and re-seek; on fencing raise (fleet: drop)."""
        try:
            self._step(step, *args)
        finally:
            self.owned.settle()

    def _step(self, step: Any, *args: Any) -> None:
        from confluent_kafka import KafkaException

        try:
            try:
                step(*args)
            except KafkaException as exc:
                if self.group is not None and is_fenced(exc.args[0]):
                    raise self.sink.fenced(exc.args[0]) from exc
                raise
        except TableFencedError as exc:
            if self.group is None:
                raise
            # The group or a newer owner took the table(s): drop them, abort and rebuild the others' open
            # transactions. A table named by the error is not taken again under the same assignment (``fail``);
            # when the error names none, every open one is dropped and the next discovery takes back what is ours.
            if exc.table is not None:
                self.owned.fail(exc.table, exc)
            for name in sorted(self.sink.open) if exc.table is None else []:
                self.owned.drop(name, f"fenced by its new owner ({exc})")
            if self.sink.in_txn:
                self._abort_and_rebuild()
            return
        except KafkaException as exc:
            error = exc.args[0]
            if is_fenced(error):
                raise self.sink.fenced(error) from exc
            if not (error.txn_requires_abort() or self.sink.in_txn):
                raise
            log.warning("transaction failed (%s); aborting and rebuilding", error)
            self._abort_and_rebuild()
        except Rebuild:
            self._abort_and_rebuild()

    def _process(self, messages: list[Any]) -> None:
        self.batch.process(messages)

    def _commit(self) -> None:
        """Commit the open batch (``DecisionBatch``), then maybe write checkpoints."""
        if self.batch.commit():
            self._checkpoint()

    def _abort_and_rebuild(self) -> None:
        """Abort the open transactions, rebuild the tables they touched and re-seek every table's intents."""
        self.metrics.aborts += 1
        self.prom.aborts.inc()
        touched = self.sink.abort()
        self.batch.forget()
        self.owned.settle()
        self.owned.reload(touched)
        freeze_state(full=True)
        self.intents.restart()
        log.info("rebuilt %d table(s) after an aborted transaction", len(touched))

    def _log_metrics(self) -> None:
        self.owned.update_lag()
        log.info(json.dumps({"event": "metrics", **self.metrics.snapshot()}))


def run_arbiter(
    settings: Settings,
    shard: tuple[int, int] = (0, 1),
    commit_timeout: float = KAFKA_TIMEOUT,
    *,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    checkpoint_interval: float = DEFAULT_CHECKPOINT_INTERVAL,
    group: str | None = None,
) -> int:
    """Run an arbiter in the foreground until SIGINT/SIGTERM (``ordo arbiter``); returns the exit code."""
    import signal

    service = ArbiterService(
        settings,
        shard,
        commit_timeout=commit_timeout,
        checkpoint_every=checkpoint_every,
        checkpoint_interval=checkpoint_interval,
        group=group,
        serve=True,
    )

    def _on_signal(signum: int, frame: object) -> None:
        service.stop()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        service.run()
    except ArbiterFencedError as exc:
        log.error("%s", exc)
        return 3
    except BrokerUnavailableError as exc:
        log.error("broker unavailable: %s", exc)
        return 2
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("arbiter stopped: %s", json.dumps(service.metrics.snapshot()))
    return 0


__all__ = [
    "ArbiterMetrics",
    "ArbiterService",
    "ArbiterStateError",
    "TableFencedError",
    "TableLostError",
    "default_group",
    "parse_shard",
    "run_arbiter",
    "shard_of",
    "table_transactional_id",
    "transactional_id",
]
