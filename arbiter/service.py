"""The arbiter's Kafka loop: the thin adapter around the pure core (``arbiter.core``).

Exactly once, per table: every intent record gets one decision, written to the
table's decisions topic inside a Kafka transaction. The decisions log is also
the progress marker: the arbiter resumes each table's intents at the offset
after the last decided intent, so no consumer-group offsets are needed and a
crash can neither lose nor repeat a decision.

Fencing is per table: each owned table has its own transactional producer
(transactional id ``<prefix>.arbiter.table.<table>``, see
``table_transactional_id``) and its decisions are produced only through it. A
table is taken in a fixed order (``ArbiterService._take``): its producer is
initialised first, which fences whichever arbiter owned the table before --
whatever its ``--shard`` setting -- and ends its open transaction; only then is
state rebuilt from the decisions log, so the rebuild sees everything the older
owner will ever have written. Two arbiters whose shard settings overlap (0/1
and 1/2, 0/2 and 2/3) therefore fence each other on exactly the tables both
own: the one that took a table later wins it; the other is fenced at its next
decision for that table and exits (code 3). One Kafka transaction per table
and batch: a batch that touched several tables commits each table's
transaction in turn.

An arbiter fleet (``group`` / ``ORDO_ARBITER_GROUP`` / ``ordo arbiter --fleet``)
replaces the static shard by a Kafka consumer group: a membership consumer
subscribes to the intents topics by pattern with the cooperative-sticky
assignor and never fetches (its partitions stay paused); its assignment is the
set of tables this arbiter owns. A table assigned is taken as above (its
producer fences the previous owner, then the rebuild); a table revoked is
committed and dropped; a table lost (session expired) or fenced is dropped
without committing -- the new owner's ``init_transactions`` aborted or will
abort it -- and is not taken again until the group assigns it anew. Intents
are still read through ``assign()`` at the rebuilt resume offset: the
decisions log, not the group's committed offsets, is the progress marker.
Why a previous owner can never publish a decision for a table it lost is in
docs/scaling.md ("Fencing").

Tansu (the embedded broker) does not hide aborted records from read_committed
readers. That is safe here: the arbiter rebuilds from exactly what every reader
sees, so a decision that landed in an aborted transaction is, on Tansu, simply
part of the history (and on Kafka it is hidden and the intent decided again).
See docs/tansu.md.

Checkpoints (``arbiter.checkpoint``) make a restart cheap: each table's state
is written to ``settings.state_dir`` every ``checkpoint_every`` decisions (at
most every ``checkpoint_interval`` seconds, from a forked child so the loop
never waits for the disk), after a long rebuild and on a clean stop. A restart
loads the checkpoint, checks it against the record at its log offset and folds
only the records after it; a checkpoint that fails any check is discarded for
a full replay.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from arbiter import checkpoint as checkpoints
from arbiter.core import GENESIS_HASH, TableState, apply, evaluate_record, fold_record, new_state, reject_malformed
from arbiter.prom import ArbiterPrometheus
from kernel.admin import DECISIONS_CONFIG, create_topics, existing_topics
from kernel.errors import ArbiterFencedError, BrokerUnavailableError, OrdoError
from kernel.keys import arbiter_signer, reader_trust
from kernel.logread import GapChecker, GapStats, warm_metadata
from kernel.settings import Settings
from schemas import (
    CommitDecision,
    Outcome,
    chain_hash,
    decisions_topic,
    decode,
    encode,
    intents_pattern,
    parse_topic,
)
from schemas.decisionlog import BrokenLogError, LogProblem
from schemas.signing import SIGNATURE_HEADER, ChainVerifier, Signer, Trust, signature_of

log = logging.getLogger("ordo.arbiter")
kafka_log = logging.getLogger("ordo.kafka")  # librdkafka's own log lines

DEFAULT_BATCH_CAP = 5000
DEFAULT_CHECKPOINT_EVERY = 10_000
DEFAULT_CHECKPOINT_INTERVAL = 10.0
# A checkpoint child may use at most 1/CHECKPOINT_DUTY of the time between two checkpoints.
CHECKPOINT_DUTY = 5
KAFKA_TIMEOUT = 30.0
LAG_INTERVAL = 1.0  # seconds between updates of the intents-lag gauges
IDLE_AFTER = 1.0  # seconds without an intent before the intents consumer unassigns and the doorbell watches
TAKE_CONCURRENCY = 16  # tables whose producers are initialised at once when many appear (start-up)
READY_MESSAGE = "arbiter ready"


class ArbiterStateError(OrdoError):
    """Raised when a decision that keeps the log's invariants cannot be folded into state (a bug in the core).

    A log that breaks an invariant raises ``schemas.decisionlog.BrokenLogError`` instead."""


class TableFencedError(ArbiterFencedError):
    """Raised when a newer owner fenced this arbiter's producer of ``table`` (None: one of the open transactions)."""

    def __init__(self, message: str, table: str | None) -> None:
        super().__init__(message)
        self.table = table


def shard_of(table: str, shards: int) -> int:
    """The shard that owns ``table``: ``crc32(table) % shards`` (stable across processes and versions)."""
    return zlib.crc32(table.encode()) % shards


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``I/N`` (0 <= I < N) into ``(I, N)``."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"shard must look like I/N (e.g. 0/1), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard {text!r}: need 0 <= I < N")
    return index, count


def default_group(settings: Settings) -> str:
    """The arbiter fleet's consumer group: ``ORDO_ARBITER_GROUP``, else ``<prefix>.arbiters``."""
    return settings.arbiter_group or f"{settings.topic_prefix}.arbiters"


def transactional_id(prefix: str, shard: tuple[int, int]) -> str:
    """The per-shard transactional id of arbiters before per-table fencing; only fenced at start-up now."""
    return f"{prefix}.arbiter.{shard[0]}-of-{shard[1]}"


def table_transactional_id(prefix: str, table: str) -> str:
    """The transactional id of ``table``'s decisions: whoever initialises it last owns the table."""
    return f"{prefix}.arbiter.table.{table}"


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


@dataclass(slots=True)
class _Table:
    name: str
    intents: str
    decisions: str
    state: TableState
    checkpointed: int = 0  # state.decisions covered by the newest checkpoint written or loaded
    origin: str = ""  # how the state was rebuilt (for the log)


@dataclass(slots=True)
class _Checkpointer:
    """A forked child writing checkpoints."""

    pid: int
    started: float
    tables: list[str]


class _Rebuild(Exception):
    """Internal: the open transaction must be aborted and state rebuilt."""


class _Stopped(Exception):
    """Internal: ``stop()`` was called while a table's state was being rebuilt."""


def _checkpoint_mismatch(checkpoint: checkpoints.Checkpoint, offset: int, value: bytes | None) -> str | None:
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


def _die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this (forked) process when the thread that forked it ends."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _is_fenced(error: Any) -> bool:
    from confluent_kafka import KafkaError

    # _FATAL: what produce() raises once the producer hit a fatal error (fencing is the usual one).
    return error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError._FATAL,
    )


class ArbiterService:
    """Decides the intents of every table of one shard, one sequential fold per table.

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
    ) -> None:
        """``group``: share tables with every arbiter of this Kafka consumer group instead of a static ``shard``.

        ``state_dir`` (default ``settings.state_dir``; ``""`` or ``checkpoint_every=0`` turn checkpoints off)
        holds ``<prefix>/<table>.ckpt``; ``checkpoint_fork`` (default: where ``os.fork`` exists) writes
        periodic checkpoints from a child process."""
        if not 0 <= shard[0] < shard[1]:
            raise ValueError(f"invalid shard {shard}: need 0 <= index < count")
        if group is not None and shard != (0, 1):
            raise ValueError("an arbiter of a group owns what the group assigns it: give a group or a shard, not both")
        self.group = group
        self.settings = settings
        self.prefix = settings.topic_prefix
        self.shard = shard
        self.batch_cap = batch_cap
        self.discovery_interval = discovery_interval
        self.metrics_interval = metrics_interval
        self.poll_timeout = poll_timeout
        self.idle_after = idle_after
        self.commit_timeout = commit_timeout
        self.state_dir = settings.state_dir if state_dir is None else state_dir
        self.checkpoint_every = checkpoint_every
        self.checkpoint_interval = checkpoint_interval
        self.checkpoint_fork = hasattr(os, "fork") if checkpoint_fork is None else checkpoint_fork
        self.checkpoints = bool(self.state_dir) and checkpoint_every > 0 and checkpoints.supported()
        if bool(self.state_dir) and checkpoint_every > 0 and not self.checkpoints:
            log.warning("checkpoints disabled: the arbiter core's state has fields arbiter.checkpoint does not know")
        self.metrics = ArbiterMetrics()
        self.prom = ArbiterPrometheus()
        self.metrics_port: int | None = None  # the /metrics port once serving
        self._batch_started = 0.0
        self._pattern = re.compile(intents_pattern(self.prefix))
        self._stop = threading.Event()
        self._tables: dict[str, _Table] = {}  # by intents topic
        self._broken: set[str] = set()  # tables whose decisions log could not be folded
        self._poisoned: set[tuple[str, int]] = set()  # intent records whose decision crashed ``apply``
        self._producers: dict[str, Any] = {}  # one transactional producer per owned table, by table name
        self._consumer: Any = None
        self._reader: Any = None
        self._doorbell: Any = None  # while idle: the only fetcher of the intents logs, with the long wait
        self._idle = False
        self._last_work = time.monotonic()
        self._gaps: Any = None  # GapChecker of the intents consumer
        self._reader_gaps: Any = None  # GapChecker of the rebuild reader
        self._admin: Any = None
        self._in_txn = False
        self._txn_tables: set[str] = set()  # tables whose transaction is open (begun, not yet ended)
        self._txn_records = 0
        self._signer: Signer | None = None
        self._trust: Trust | None = None
        # Per decisions topic, the newest decision of the open transaction, not produced yet: it is
        # produced signed at commit (or unsigned, once a newer decision of the same table arrives).
        self._held: dict[str, tuple[str, bytes, bytes | None]] = {}  # table -> (decisions topic, record, key)
        # Per decisions topic, the newest record known to be in the log: (offset, bytes). Set by rebuilds
        # and by delivery reports; a checkpoint is written only for a state whose chain is that record's hash.
        self._last_record: dict[str, tuple[int, bytes]] = {}
        self._checkpointer: _Checkpointer | None = None
        self._next_checkpoint = 0.0
        self._checkpoint_cost = 0.0
        self._started_at = time.monotonic()
        self._membership: Any = None  # the group mode's consumer: its assignment is what this arbiter owns
        self._assigned: set[str] = set()  # tables the group assigned to this arbiter
        self._lost: set[str] = set()  # assigned tables fenced away: not taken again until assigned anew
        self._rebalanced = False  # the assignment changed: discover now
        self._first_assignment = False
        self.rebalances = 0

    @property
    def transactional_id(self) -> str:
        """The per-shard transactional id this arbiter fences at start-up (arbiters of older versions used it)."""
        return transactional_id(self.prefix, self.shard)

    @property
    def tables(self) -> dict[str, TableState]:
        """The state of every table this arbiter owns, by table name (read-only use)."""
        return {t.name: t.state for t in self._tables.values()}

    def stop(self) -> None:
        """Ask ``run()`` to commit what it decided and return."""
        self._stop.set()

    # ------------------------------------------------------------------ lifecycle

    def run(self) -> None:
        """Start, then decide intents until stopped."""
        try:
            self.start()
            self._loop()
            self._guard(self._commit)
            self._final_checkpoint()
        except _Stopped:
            log.info("stopped while rebuilding state; nothing more decided")
        finally:
            self.close()

    def start(self) -> None:
        """Fence older arbiters, discover tables and rebuild their state."""
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        config = self.settings.kafka_config
        # 0. Keys first: a misconfigured arbiter stops before it fences anyone.
        self._signer = arbiter_signer(self.settings)
        own = [self._signer.public_raw] if self._signer is not None else []
        self._trust = reader_trust(self.settings, extra=own)
        if self._signer is None:
            log.warning("signatures not required and no ORDO_ARBITER_KEY: writing UNSIGNED decisions")
        if self.settings.arbiter_metrics_port:
            self.metrics_port = self.prom.serve(self.settings.arbiter_metrics_port, self.settings.arbiter_metrics_host)
        self._admin = AdminClient(config(logger=kafka_log, **{"client.id": f"{self.prefix}.arbiter.admin"}))
        # 1. Fence an arbiter of an older version with this shard (it used one per-shard
        #    transactional id) and end its open transaction. Each table is then taken
        #    through its own producer (``_take``) before its state is rebuilt.
        legacy = self._new_producer(self.transactional_id)
        self._init_transactions(legacy, f"shard {self.shard[0]}/{self.shard[1]}")
        legacy.flush(1.0)
        del legacy
        self._consumer = Consumer(self._consumer_config("intents"))
        self._reader = Consumer(self._consumer_config("rebuild"))
        self._doorbell = Consumer(self._consumer_config("doorbell", self.settings.fetch_wait_idle_ms))
        # Every record the consumers skip is re-read (Tansu skips some under concurrent appends; docs/tansu.md).
        self._gaps = GapChecker(
            self._consumer_config("intents-reread"),
            transactional=False,
            consumer=self._consumer,
            name="arbiter intents",
            keep_eof=False,
            stats=self.metrics.intent_gaps,
        )
        self._reader_gaps = GapChecker(
            self._consumer_config("rebuild-reread"),
            transactional=True,
            consumer=self._reader,
            name="arbiter rebuild",
            stats=self.metrics.decision_gaps,
        )
        if self.checkpoints:
            checkpoints.remove_stale_temporaries(os.path.join(self.state_dir, self.prefix))
        if self.group is not None:
            self._join_group()
        # 2.-4. Tables: discover, rebuild (from a checkpoint and the log's tail), assign.
        self._discover()
        log.info(
            "%s: %s, transactional ids %s, prefix %r, %d table(s), %.3f s after start",
            READY_MESSAGE,
            self._ownership(),
            table_transactional_id(self.prefix, "<table>"),
            self.prefix,
            len(self._tables),
            time.monotonic() - self._started_at,
        )

    def _ownership(self) -> str:
        if self.group is not None:
            return f"group {self.group!r}"
        return f"shard {self.shard[0]}/{self.shard[1]}"

    # ------------------------------------------------------------------ group membership

    def _join_group(self) -> None:
        """Subscribe the membership consumer and wait for the group's first assignment (on Tansu: seconds)."""
        from confluent_kafka import Consumer

        passthrough = self.settings.kafka  # ORDO_KAFKA__SESSION_TIMEOUT_MS etc. tune the handover
        self._membership = Consumer(
            self.settings.kafka_config(
                **{
                    "group.id": self.group,
                    "partition.assignment.strategy": "cooperative-sticky",
                    "enable.auto.commit": False,  # progress is the decisions log, never the group's offsets
                    "enable.auto.offset.store": False,
                    # A killed member's tables move after this (6 s: Kafka's default group.min.session.timeout.ms).
                    "session.timeout.ms": passthrough.get("session.timeout.ms", 6000),
                    "heartbeat.interval.ms": passthrough.get("heartbeat.interval.ms", 1000),
                    "max.poll.interval.ms": 300_000,
                    "topic.metadata.refresh.interval.ms": 1000,  # new intents topics join the pattern within ~1 s
                    "allow.auto.create.topics": False,
                    "logger": kafka_log,
                }
            )
        )
        self._membership.subscribe(
            [intents_pattern(self.prefix)],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        # librdkafka joins only once the pattern matches a topic: with none yet there is nothing to wait for.
        if not any(self._pattern.match(t) for t in existing_topics(self._admin, timeout=KAFKA_TIMEOUT)):
            return
        deadline = time.monotonic() + 120.0
        while not self._first_assignment:
            if self._stop.is_set():
                raise _Stopped()
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(f"no assignment from arbiter group {self.group!r} within 120 s")
            self._membership.poll(0.1)

    def _tables_of(self, partitions: list[Any]) -> list[str]:
        names = []
        for tp in partitions:
            parsed = parse_topic(self.prefix, tp.topic)
            if parsed is not None and parsed[1] == "intents":
                names.append(parsed[0])
        return sorted(names)

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        """Group callback: the tables in ``partitions`` are this arbiter's now (taken by the next discovery)."""
        self._first_assignment = True
        if partitions:
            consumer.pause(partitions)  # membership only: intents are read by the assign()-based consumer
        names = self._tables_of(partitions)
        self._assigned.update(names)
        self._lost.difference_update(names)
        self._rebalanced = True
        self.rebalances += 1
        if names:
            log.info("group %s assigned table(s) %s", self.group, ", ".join(names))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        """Group callback: finish the open transactions, then drop the revoked tables."""
        names = self._tables_of(partitions)
        if not names:
            return
        if self._in_txn and self._txn_tables & set(names):
            try:
                self._guard(self._commit)
            except ArbiterFencedError:  # static mode raises; here a fenced table is dropped by ``_guard``
                pass
        for name in names:
            self._drop(name, "revoked by the group")
        log.info("group %s revoked table(s) %s", self.group, ", ".join(names))

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        """Group callback: this member was expelled; its tables may already be decided elsewhere: drop, never commit."""
        names = self._tables_of(partitions)
        open_tables = set(self._txn_tables)
        for name in names:
            self._drop(name, "lost (this arbiter left the group: paused or partitioned away)")
        if open_tables - set(names):
            self._abort_and_rebuild()
        log.warning("group %s: lost table(s) %s", self.group, ", ".join(names))

    def _drop(self, name: str, why: str) -> None:
        """Stop deciding ``name``: forget its state and producer (an open transaction is the broker's to abort)."""
        from confluent_kafka import TopicPartition

        self._assigned.discard(name)
        self._held.pop(name, None)
        if name in self._txn_tables:
            self._txn_tables.discard(name)
            if not self._txn_tables:
                self._in_txn = False
                self._txn_records = 0
        topic = next((t for t, table in self._tables.items() if table.name == name), None)
        if topic is not None:
            table = self._tables.pop(topic)
            self._last_record.pop(table.decisions, None)
            self._gaps.forget(topic)
            try:
                self._consumer.incremental_unassign([TopicPartition(topic, 0)])
            except Exception:  # not assigned
                log.debug("unassign %s failed", topic, exc_info=True)
        producer = self._producers.pop(name, None)
        if producer is not None:
            try:
                producer.flush(0)
            except Exception:  # fenced: nothing of ours is pending that matters
                pass
        self.metrics.tables = len(self._tables)
        log.info("table %s dropped: %s", name, why)

    def _poll_membership(self) -> None:
        """Serve the group (heartbeats run in librdkafka; rebalance callbacks run here, between batches)."""
        if self._membership is not None:
            self._membership.poll(0)

    def close(self) -> None:
        """Close the Kafka clients (an open transaction is left for the broker to abort)."""
        self._wait_checkpointer(10.0)
        if self._membership is not None:
            try:
                self._membership.close()  # leaves the group: the others take its tables at once
            except Exception:
                log.debug("closing the membership consumer failed", exc_info=True)
            self._membership = None
        for client in (self._consumer, self._reader, self._doorbell):
            if client is not None:
                try:
                    client.close()
                except Exception:  # closing is best effort
                    log.debug("closing consumer failed", exc_info=True)
        for checker in (self._gaps, self._reader_gaps):
            if checker is not None:
                checker.close()
        self._consumer = self._reader = self._doorbell = self._admin = None
        for producer in self._producers.values():
            try:
                producer.flush(1.0)
            except Exception:  # a fenced producer refuses even that; nothing of ours is lost
                log.debug("flushing a producer failed", exc_info=True)
        self._producers.clear()
        self.prom.close()

    def _new_producer(self, txn_id: str) -> Any:
        from confluent_kafka import Producer

        return Producer(self._producer_config(txn_id))

    def _producer_config(self, txn_id: str) -> dict[str, Any]:
        """The transactional producer of ``txn_id`` (its ``client.id`` names it)."""
        return self.settings.kafka_config(
            **{
                "transactional.id": txn_id,
                "client.id": f"{txn_id}.producer",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,  # commit_transaction flushes at once: no wait added, fewer wake-ups per batch
                "allow.auto.create.topics": False,
                "error_cb": self._on_kafka_error,
                "on_delivery": self._on_delivery,
                "logger": kafka_log,
            }
        )

    def _init_transactions(self, producer: Any, what: str) -> None:
        """``init_transactions`` (retrying what is retriable): fences the previous holder of the producer's id."""
        from confluent_kafka import KafkaException

        while True:
            try:
                producer.init_transactions(KAFKA_TIMEOUT)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if _is_fenced(error):
                    raise ArbiterFencedError(f"arbiter cannot initialise the producer of {what}: {error}") from exc
                if not error.retriable() or self._stop.is_set():
                    raise BrokerUnavailableError(f"cannot initialise transactions of {what}: {error}") from exc
                log.warning("init_transactions of %s failed (%s); retrying", what, error)

    def _take_all(self, tables: list[str]) -> None:
        """Take ``tables`` concurrently (each ``init_transactions`` is a broker round trip or more)."""
        if len(tables) < 2:
            return  # ``_take`` below does it
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(TAKE_CONCURRENCY, len(tables)), thread_name_prefix="take") as pool:
            for future in [pool.submit(self._take, name) for name in tables]:
                future.result()  # the first failure propagates; tables taken already stay taken

    def _take(self, table: str) -> None:
        """Own ``table``: initialise its transactional producer, fencing whichever arbiter owned it before."""
        if table in self._producers:
            return
        producer = self._new_producer(table_transactional_id(self.prefix, table))
        self._init_transactions(producer, f"table {table}")
        self._producers[table] = producer

    def _on_delivery(self, error: Any, message: Any) -> None:
        """Delivery report of a decision: remember the newest record of each decisions topic."""
        if error is None:
            self._last_record[message.topic()] = (message.offset(), message.value())

    def _on_kafka_error(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        if error.fatal():
            log.error("fatal Kafka error: %s", error)
        elif error.code() == KafkaError._ALL_BROKERS_DOWN:
            log.warning("Kafka: %s (retrying)", error.str())
        else:
            log.debug("Kafka error: %s", error)

    # ------------------------------------------------------------------ tables

    def _owns(self, table: str) -> bool:
        if self.group is not None:
            return table in self._assigned and table not in self._lost
        return shard_of(table, self.shard[1]) == self.shard[0]

    def _discover(self) -> list[str]:
        """Pick up intents topics of this shard that appeared since the last look."""
        from confluent_kafka import TopicPartition

        topics = existing_topics(self._admin, timeout=KAFKA_TIMEOUT)
        new: list[tuple[str, str]] = []
        for topic in sorted(topics):
            if topic in self._tables or not self._pattern.match(topic):
                continue
            parsed = parse_topic(self.prefix, topic)
            if parsed is None or parsed[1] != "intents" or parsed[0] in self._broken or not self._owns(parsed[0]):
                continue
            new.append((parsed[0], topic))
        if not new:
            return []
        missing = {decisions_topic(self.prefix, name): DECISIONS_CONFIG for name, _ in new}
        missing = {name: cfg for name, cfg in missing.items() if name not in topics}
        if missing:
            create_topics(self._admin, missing, timeout=KAFKA_TIMEOUT)
        # A consumer assigned a topic it has no metadata for waits ~1 s for
        # librdkafka's leader query; a full metadata request fills the cache now.
        for consumer in (self._reader, self._consumer, self._doorbell):
            warm_metadata(consumer, KAFKA_TIMEOUT)
        self._take_all([name for name, _ in new if name not in self._producers])
        for name, topic in new:
            table = _Table(name, topic, decisions_topic(self.prefix, name), new_state(name))
            try:
                self._take(name)  # fence the table's previous owner before reading what it wrote
                rebuild_started = time.monotonic()
                table.state = self._load_state(table)
                self.prom.rebuild_seconds.labels(name).set(time.monotonic() - rebuild_started)
            except (BrokenLogError, ArbiterStateError) as exc:
                log.error("table %s left undecided until restart: %s", name, exc)
                self._broken.add(name)
                continue
            except _Stopped:
                break
            # One table at a time: a failure on the next one leaves this one assigned.
            self._tables[topic] = table
            self._consumer.incremental_assign([TopicPartition(topic, 0, table.state.next_offset)])
            self._gaps.expect(topic, table.state.next_offset)
            log.info(
                "table %s: rebuilt %d decision(s), head version %d, resuming intents at offset %d (%s)",
                name,
                table.state.decisions,
                table.state.head_version,
                table.state.next_offset,
                table.origin,
            )
        self.metrics.tables = len(self._tables)
        self.prom.tables.set(len(self._tables))
        if self._idle:
            self._wake()  # a new table: fetch everything with the short wait again
        self._maybe_checkpoint(after_rebuild=True)
        return [name for name, _ in new]

    def _load_state(self, table: _Table) -> TableState:
        """Fold the table's decisions log (read_committed, up to its end) into state.

        Starts from the table's checkpoint when one is usable: the record at the
        checkpoint's log offset must be there and hash to the checkpoint's chain
        (see ``arbiter.checkpoint``); otherwise from the beginning of the log.
        """
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        began = time.monotonic()
        pending = self._read_checkpoint(table)
        state = new_state(table.name)
        table.checkpointed = 0
        last: tuple[int, bytes] | None = None
        folded = 0
        from_checkpoint = -1
        reader = self._reader
        if pending is not None:
            # Tansu answers a fetch beyond the log end with nothing (no OFFSET_OUT_OF_RANGE), so look first.
            problem = self._offset_problem(table, pending.log_offset)
            if problem is not None:
                log.warning(
                    "table %s: checkpoint at log offset %d not used (%s); full replay",
                    table.name,
                    pending.log_offset,
                    problem,
                )
                self.metrics.checkpoints_rejected += 1
                pending = None
        reader.assign([TopicPartition(table.decisions, 0, pending.log_offset if pending else OFFSET_BEGINNING)])
        gaps = self._reader_gaps
        gaps.expect(table.decisions, pending.log_offset if pending else 0)
        deadline = time.monotonic() + KAFKA_TIMEOUT
        assert self._trust is not None, "start() first"
        # Only records a trusted signature vouches for are folded (schemas.signing).
        verifier: ChainVerifier[tuple[int, bytes]] = ChainVerifier(table.name, self._trust)

        def replay_all(reason: str) -> None:
            nonlocal pending, state, last, folded, from_checkpoint
            assert pending is not None
            log.warning(
                "table %s: checkpoint at log offset %d not used (%s); full replay",
                table.name,
                pending.log_offset,
                reason,
            )
            self.metrics.checkpoints_rejected += 1
            pending, state, last, folded = None, new_state(table.name), None, 0
            table.checkpointed = 0
            from_checkpoint = -1
            verifier.reset(GENESIS_HASH)
            reader.unassign()  # drops what was fetched for the old position
            reader.assign([TopicPartition(table.decisions, 0, OFFSET_BEGINNING)])
            gaps.expect(table.decisions, 0)

        try:
            while True:
                first = reader.poll(0.5)
                messages = [] if first is None else [first, *reader.consume(num_messages=10_000, timeout=0)]
                for message in gaps.check(messages):
                    if message.topic() != table.decisions:
                        continue
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            if pending is not None:
                                replay_all(f"the log ends at offset {message.offset()}")
                                break
                            unvouched = verifier.unvouched()
                            self.metrics.refused_unsigned += len(unvouched)
                            for refusal in unvouched[:20]:
                                log.warning(
                                    "table %s: decision at offset %d not folded: %s (an aborted batch or a forger)",
                                    table.name,
                                    refusal.offset,
                                    refusal.reason,
                                )
                            return self._loaded(table, state, last, folded, began, from_checkpoint)
                        if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                            continue  # just created; metadata still propagating
                        log.warning("reading %s: %s", table.decisions, error)
                        continue
                    value, offset = message.value(), message.offset()
                    deadline = time.monotonic() + KAFKA_TIMEOUT
                    if pending is not None:
                        problem = _checkpoint_mismatch(pending, offset, value)
                        if problem is not None:
                            replay_all(problem)
                            break
                        state, last = pending.state, (offset, value)
                        verifier.reset(state.chain)  # the checkpoint's state was verified when it was folded
                        table.checkpointed = state.decisions
                        from_checkpoint = offset
                        self.metrics.checkpoints_loaded += 1
                        pending = None
                        continue
                    released, refused = verifier.push(offset, value, signature_of(message.headers()), (offset, value))
                    for refusal in refused:
                        self.metrics.refused_unsigned += 1
                        log.error(
                            "table %s: decision at offset %d not folded: %s", table.name, refusal.offset, refusal.reason
                        )
                    for at, record in released:
                        if self._fold(state, record, at):
                            last = (at, record)
                        folded += 1
                if self._stop.is_set():
                    raise _Stopped()  # never hand out a partial state
                if time.monotonic() > deadline:
                    raise BrokerUnavailableError(f"no end of {table.decisions} within {KAFKA_TIMEOUT:.0f} s")
        finally:
            reader.unassign()
            gaps.forget(table.decisions)

    def _loaded(
        self,
        table: _Table,
        state: TableState,
        last: tuple[int, bytes] | None,
        folded: int,
        began: float,
        from_checkpoint: int,
    ) -> TableState:
        if last is not None:
            self._last_record[table.decisions] = last
        else:
            self._last_record.pop(table.decisions, None)
        elapsed = time.monotonic() - began
        if table.checkpointed:
            table.origin = (
                f"checkpoint of {table.checkpointed} decision(s) at log offset {from_checkpoint} "
                f"+ {folded} record(s) of the log, {elapsed:.3f} s"
            )
        else:
            table.origin = f"{folded} record(s) of the log, no checkpoint, {elapsed:.3f} s"
        return state

    def _offset_problem(self, table: _Table, offset: int) -> str | None:
        """Why the decisions log cannot hold a record at ``offset`` (outside its watermarks), or None."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            low, high = self._reader.get_watermark_offsets(TopicPartition(table.decisions, 0), timeout=KAFKA_TIMEOUT)
        except KafkaException as exc:
            return f"cannot read the log's watermarks: {exc.args[0]}"
        if not low <= offset < high:
            return f"the log holds offsets {low} to {high - 1} only"
        return None

    def _read_checkpoint(self, table: _Table) -> checkpoints.Checkpoint | None:
        """The table's checkpoint if the file is intact and fits this code, else None (the reason is logged)."""
        if not self.checkpoints:
            return None
        path = self._checkpoint_path(table.name)
        if not path.exists():
            return None
        try:
            return checkpoints.read_checkpoint(path, table.name)
        except checkpoints.CheckpointError as exc:
            log.warning("table %s: checkpoint %s not used (%s); full replay", table.name, path, exc)
            self.metrics.checkpoints_rejected += 1
            return None

    def _checkpoint_path(self, table: str) -> Any:
        return checkpoints.checkpoint_path(self.state_dir, self.prefix, table)

    def _fold(self, state: TableState, data: bytes | None, offset: int) -> bool:
        """Fold one decision record into ``state``; False when it is skipped (a later decision for an intent).

        A record that breaks the log's invariants (``schemas.decisionlog``) refuses the table: a chain break
        too (see docs/architecture.md, "Reading a decisions log").
        """
        try:
            fold_record(state, data, offset)
        except BrokenLogError as exc:
            if exc.kind.skippable:
                # A second decision for an intent already decided: never written by a
                # fenced arbiter on Kafka; kept out of the state whatever the broker.
                self.metrics.skipped_duplicates += 1
                log.warning("table %s: skipping decision at offset %d: %s", state.table, offset, exc)
                return False
            if exc.kind is LogProblem.CHAIN:
                self.metrics.chain_breaks += 1
            raise
        except Exception as exc:  # the record kept every invariant, yet ``apply`` failed: a bug
            raise ArbiterStateError(
                f"decision at offset {offset} of the decisions log cannot be folded: {type(exc).__name__}: {exc}"
            ) from exc
        return True

    # ------------------------------------------------------------------ loop

    def _loop(self) -> None:
        now = time.monotonic()
        next_discovery = now + self.discovery_interval
        next_metrics = now + self.metrics_interval
        next_lag = now + LAG_INTERVAL
        consumer = self._consumer
        while not self._stop.is_set():
            if self._membership is not None and not self._in_txn:
                self._poll_membership()
                if self._rebalanced:
                    self._rebalanced = False
                    next_discovery = 0.0
                consumer = self._consumer
            now = time.monotonic()
            if now >= next_discovery:
                try:
                    self._guard(self._discover)
                except BrokerUnavailableError as exc:
                    log.warning("table discovery failed: %s; retrying", exc)
                consumer = self._consumer
                self._maybe_checkpoint()  # also reaps a finished checkpoint writer
                next_discovery = time.monotonic() + self.discovery_interval
                if self._stop.is_set():
                    break
            if now >= next_metrics:
                self._log_metrics()
                next_metrics = now + self.metrics_interval
            elif now >= next_lag:
                self._update_lag()
                next_lag = now + LAG_INTERVAL
            messages = self._next_messages(consumer, self.batch_cap - self._txn_records)
            if messages:
                self._last_work = now
                self._guard(self._process, messages)
                consumer = self._consumer
            elif not self._in_txn and not self._idle and now - self._last_work >= self.idle_after:
                self._sleep()
            if self._in_txn and (not messages or self._txn_records >= self.batch_cap):
                self._guard(self._commit)
                consumer = self._consumer

    def _next_messages(self, consumer: Any, room: int) -> list[Any]:
        """What is fetched already, up to ``room``; when idle, wait up to ``poll_timeout`` for the first record.

        ``consume(n, timeout)`` waits until it has ``n`` records or the timeout
        passed, which would add the whole timeout to every decision at low load;
        ``poll`` returns with the first record. Records the fetch skipped are
        re-read and put back in place (``kernel.logread``).
        """
        if self._in_txn:
            return self._gaps.check(consumer.consume(num_messages=room, timeout=0))
        if self._idle:
            ring = self._doorbell.poll(self.poll_timeout)
            if ring is None or ring.error() is not None:
                return []
            self._wake()
            first = consumer.poll(self.poll_timeout)
        else:
            first = consumer.poll(self.poll_timeout)
        if first is None:
            return []
        return self._gaps.check([first, *consumer.consume(num_messages=room - 1, timeout=0)] if room > 1 else [first])

    def _sleep(self) -> None:
        """Idle: unassign the intents consumer and let the doorbell (long fetch wait) watch the logs from there.

        Tansu answers an empty fetch only after the full ``fetch.wait.max.ms``:
        the short wait that keeps decisions fast costs the broker a fetch per
        millisecond per idle consumer. The doorbell's records are never decided;
        the first one wakes the intents consumer, assigned again where it was
        (``assign()`` fetches within a millisecond; librdkafka's ``resume()``
        can take a second), which reads it with gaps checked.
        """
        from confluent_kafka import TopicPartition

        if not self._tables:
            return
        start = []
        for t in self._tables.values():
            expected = self._gaps.expected(t.intents)
            start.append(TopicPartition(t.intents, 0, t.state.next_offset if expected is None else expected))
        self._consumer.unassign()
        self._doorbell.assign(start)
        self._idle = True
        self.metrics.sleeps += 1
        self.prom.sleeps.inc()

    def _wake(self) -> None:
        """Work arrived (or a table): stop the doorbell, assign the intents consumer again where it stopped."""
        from confluent_kafka import TopicPartition

        self._doorbell.unassign()
        start = []
        for t in self._tables.values():
            expected = self._gaps.expected(t.intents)
            start.append(TopicPartition(t.intents, 0, t.state.next_offset if expected is None else expected))
        self._consumer.assign(start)
        self._idle = False
        self._last_work = time.monotonic()

    def _guard(self, step: Any, *args: Any) -> None:
        """Run one loop step; on an abortable failure abort, rebuild and re-seek; on fencing raise."""
        from confluent_kafka import KafkaException

        try:
            try:
                step(*args)
            except KafkaException as exc:
                if self.group is not None and _is_fenced(exc.args[0]):
                    raise self._fenced(exc.args[0]) from exc
                raise
        except TableFencedError as exc:
            if self.group is None:
                raise
            # A newer owner took the table(s): drop them, abort and rebuild the others' open transactions.
            # A table named by the error is not taken again until the group assigns it anew; when the
            # error names none, every open one is dropped and the next discovery takes back what is ours.
            lost = [exc.table] if exc.table is not None else sorted(self._txn_tables)
            for name in lost:
                if exc.table is not None:
                    self._lost.add(name)
                self._drop(name, f"fenced by its new owner ({exc})")
            if self._txn_tables:
                self._abort_and_rebuild()
            return
        except KafkaException as exc:
            error = exc.args[0]
            if _is_fenced(error):
                raise self._fenced(error) from exc
            if not (error.txn_requires_abort() or self._in_txn):
                raise
            log.warning("transaction failed (%s); aborting and rebuilding", error)
            self._abort_and_rebuild()
        except _Rebuild:
            self._abort_and_rebuild()

    def _fenced(self, error: Any, table: str | None = None) -> TableFencedError:
        where = f"table {table}" if table is not None else f"one of tables {sorted(self._txn_tables)}"
        if self.group is not None:
            return TableFencedError(f"fenced on {where} by its new owner ({error.str()})", table)
        return TableFencedError(
            f"arbiter (shard {self.shard[0]}/{self.shard[1]}) was fenced on {where} by a newer arbiter owning it "
            f"(same or overlapping --shard setting; {error.str()}); exiting without deciding anything more",
            table,
        )

    def _process(self, messages: list[Any]) -> None:
        from confluent_kafka import KafkaError

        tables = self._tables
        producers = self._producers
        open_tables = self._txn_tables
        metrics = self.metrics
        prom = self.prom
        clock = time.perf_counter
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("intents consumer: %s", error)
                continue
            table = tables.get(message.topic())
            if table is None:
                continue
            state = table.state
            offset = message.offset()
            if offset < state.next_offset:
                continue  # already decided (a re-fetch after a seek)
            producer = producers[table.name]
            if table.name not in open_tables:
                self._begin(table.name, producer)
            started = clock()
            decision, data = self._decide(table, message, offset)
            prom.decide_seconds.observe(clock() - started)
            try:
                apply(state, decision, data)
            except Exception:
                log.exception("table %s: applying the decision for intent offset %d failed (a bug)", table.name, offset)
                metrics.internal_errors += 1
                self._poisoned.add((table.intents, offset))
                raise _Rebuild() from None
            key = decision.txn_id.encode() if decision.txn_id else None
            previous = self._held.get(table.name)
            if previous is not None:
                self._produce(table.name, producer, previous[0], previous[1], previous[2])
            self._held[table.name] = (table.decisions, data, key)
            self._txn_records += 1
            metrics.decided += 1
            prom.decided(table.name, decision.outcome.value, decision.reason or "")
            if decision.outcome is Outcome.ACCEPTED:
                metrics.accepted += 1
            else:
                metrics.rejected[decision.reason or "UNKNOWN"] += 1
                log.info(
                    json.dumps(
                        {
                            "event": "rejected",
                            "txn_id": decision.txn_id,
                            "table": table.name,
                            "reason": decision.reason,
                            "message": decision.message,
                            "offset": offset,
                        }
                    )
                )

    def _release_held(self) -> None:
        """Produce each table's last decision of the transaction, signed: it vouches for the batch before it."""
        signer = self._signer
        for name, (topic, data, key) in self._held.items():
            signature = signer.header(name, data) if signer is not None else None
            self._produce(name, self._producers[name], topic, data, key, signature)
        self._held.clear()

    def _decide(self, table: _Table, message: Any, offset: int) -> tuple[CommitDecision, bytes]:
        state = table.state
        if not self._poisoned or (table.intents, offset) not in self._poisoned:
            try:
                decision = evaluate_record(state, message.value(), message.timestamp()[1], offset)
                return decision, encode(decision)
            except Exception as exc:
                log.exception("table %s: deciding intent offset %d raised (a bug)", table.name, offset)
                self.metrics.internal_errors += 1
                error = f"internal error while deciding: {type(exc).__name__}: {exc}"
        else:
            error = "internal error while applying the decision for this intent"
        decision = reject_malformed(state, offset, error)
        return decision, encode(decision)

    def _begin(self, table: str, producer: Any) -> None:
        from confluent_kafka import KafkaException

        try:
            producer.begin_transaction()
        except KafkaException as exc:
            if _is_fenced(exc.args[0]):
                raise self._fenced(exc.args[0], table) from exc
            raise
        self._txn_tables.add(table)
        if not self._in_txn:
            self._batch_started = time.perf_counter()
        self._in_txn = True

    def _produce(
        self, table: str, producer: Any, topic: str, data: bytes, key: bytes | None, signature: bytes | None = None
    ) -> None:
        """Produce one decision record, with its ``ordo-sig`` header when ``signature`` is given."""
        from confluent_kafka import KafkaException

        headers = [(SIGNATURE_HEADER, signature)] if signature is not None else None
        while True:
            try:
                producer.produce(topic, data, key, headers=headers)
                return
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                if _is_fenced(exc.args[0]):
                    raise self._fenced(exc.args[0], table) from exc
                raise

    def _commit(self) -> None:
        """Commit each open table transaction (retrying what librdkafka says is retriable)."""

        if not self._in_txn:
            return
        self._release_held()
        for name in sorted(self._txn_tables):
            self._end_transaction(name, commit=True)
            self._txn_tables.discard(name)  # committed: never aborted nor rebuilt by a later failure
        records = self._txn_records
        self.metrics.batches += 1
        self.metrics.batched_records += records
        self.metrics.max_batch = max(self.metrics.max_batch, records)
        self.prom.batch_seconds.observe(time.perf_counter() - self._batch_started)
        self.prom.batch_size.observe(records)
        self._in_txn = False
        self._txn_tables.clear()
        self._txn_records = 0
        self._maybe_checkpoint()

    def _end_transaction(self, table: str, commit: bool) -> None:
        """Commit or abort ``table``'s transaction, retrying what is retriable for at most ``commit_timeout`` s.

        On Kafka a fenced producer's EndTxn fails at once with PRODUCER_FENCED.
        Tansu instead drops the connection, so the call only ever times out: a
        transaction that cannot be ended within the budget is taken as fenced
        (or the broker as gone) and the arbiter exits rather than guess.
        """
        from confluent_kafka import KafkaException

        producer = self._producers[table]
        end = producer.commit_transaction if commit else producer.abort_transaction
        verb = "commit" if commit else "abort"
        deadline = time.monotonic() + self.commit_timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                end(max(0.1, min(5.0, remaining)))
                return
            except KafkaException as exc:
                error = exc.args[0]
                if _is_fenced(error):
                    raise self._fenced(error, table) from exc
                if commit and error.txn_requires_abort():
                    raise
                if not error.retriable():
                    raise
                if time.monotonic() >= deadline:
                    raise TableFencedError(
                        f"arbiter ({self._ownership()}) could not {verb} the transaction of table "
                        f"{table} within {self.commit_timeout:g} s ({error.str()}): most likely fenced by a newer "
                        "arbiter owning the table (Tansu drops the connection instead of answering PRODUCER_FENCED), "
                        "or the broker is unreachable; exiting without deciding anything more",
                        table,
                    ) from exc
                log.warning("%s_transaction: %s; retrying", verb, error)

    def _abort_and_rebuild(self) -> None:
        """Abort the open transaction, rebuild the tables it touched and re-seek every table's intents."""
        from confluent_kafka import Consumer, TopicPartition

        self.metrics.aborts += 1
        self.prom.aborts.inc()
        if self._idle:
            self._doorbell.unassign()
            self._idle = False
        touched = set(self._txn_tables)
        self._held.clear()
        for name in sorted(touched):
            try:
                self._end_transaction(name, commit=False)
            except TableFencedError as exc:
                if self.group is None:
                    raise
                self._lost.add(name)
                self._drop(name, f"fenced by its new owner ({exc})")
                touched.discard(name)
        self._in_txn = False
        self._txn_tables.clear()
        self._txn_records = 0
        for table in self._tables.values():
            if table.name in touched:
                rebuild_started = time.monotonic()
                table.state = self._load_state(table)
                self.prom.rebuild_seconds.labels(table.name).set(time.monotonic() - rebuild_started)
        # The intents consumer may hold prefetched records past the rebuilt
        # positions; a fresh one assigned at each table's resume offset is simplest.
        old = self._consumer
        self._consumer = Consumer(self._consumer_config("intents"))
        warm_metadata(self._consumer, KAFKA_TIMEOUT)
        self._consumer.incremental_assign(
            [TopicPartition(t.intents, 0, t.state.next_offset) for t in self._tables.values()]
        )
        self._gaps.attach(self._consumer)
        for t in self._tables.values():
            self._gaps.expect(t.intents, t.state.next_offset)
        old.close()
        log.info("rebuilt %d table(s) after an aborted transaction", len(touched))

    # ------------------------------------------------------------------ checkpoints

    def _maybe_checkpoint(self, *, after_rebuild: bool = False, final: bool = False) -> None:
        """Write checkpoints of the tables that are due; never raises (a checkpoint is only a cache).

        Due: at least ``checkpoint_every`` decisions since the table's last
        checkpoint (``min(checkpoint_every, 1000)`` on a clean stop), and the
        newest record known to be in its decisions log is the one the state
        folded last, so the checkpoint's log offset is exact. Periodic writes
        happen from a forked child at most every ``checkpoint_interval``
        seconds (and at most 1/``CHECKPOINT_DUTY`` of the time); a clean stop
        writes synchronously.
        """
        if not self.checkpoints or self._in_txn:
            return
        try:
            self._reap_checkpointer()
            if self._checkpointer is not None:
                return
            now = time.monotonic()
            if not (after_rebuild or final) and now < self._next_checkpoint:
                return
            threshold = min(self.checkpoint_every, 1000) if final else self.checkpoint_every
            for producer in self._producers.values():
                producer.poll(0)  # serve pending delivery reports
            jobs: list[tuple[Any, int, TableState]] = []
            for table in self._tables.values():
                state = table.state
                if state.decisions - table.checkpointed < threshold:
                    continue
                last = self._last_record.get(table.decisions)
                if last is None or chain_hash(last[1]) != state.chain:
                    continue
                jobs.append((self._checkpoint_path(table.name), last[0], state))
                table.checkpointed = state.decisions
            if not jobs:
                return
            if self.checkpoint_fork and not final:
                self._fork_checkpointer(jobs)
            else:
                self._write_checkpoints(jobs)
        except Exception:
            self.metrics.checkpoint_failures += 1
            log.exception("writing checkpoints failed (the decisions log is unaffected)")

    def _write_checkpoints(self, jobs: list[tuple[Any, int, TableState]]) -> None:
        began = time.monotonic()
        size = 0
        for path, offset, state in jobs:
            size += checkpoints.write_checkpoint(path, offset, state)
        elapsed = time.monotonic() - began
        self.metrics.checkpoints_written += len(jobs)
        self._schedule_next(elapsed)
        log.info("checkpoint: %d table(s), %d bytes, %.3f s", len(jobs), size, elapsed)

    def _fork_checkpointer(self, jobs: list[tuple[Any, int, TableState]]) -> None:
        """Write ``jobs`` from a forked child: it sees a copy-on-write snapshot of the states, the loop goes on."""
        pid = os.fork()
        if pid == 0:  # the child: write, report failures on stderr, exit without running any cleanup
            code = 0
            try:
                _die_with_parent()
                os.closerange(3, 65536)  # let go of the parent's Kafka sockets: only files are written here
                for path, offset, state in jobs:
                    checkpoints.write_checkpoint(path, offset, state)
            except BaseException as exc:
                code = 1
                try:
                    os.write(2, f"checkpoint writer failed: {type(exc).__name__}: {exc}\n".encode())
                except Exception:
                    pass
            os._exit(code)
        self._checkpointer = _Checkpointer(pid, time.monotonic(), [str(path) for path, _, _ in jobs])

    def _reap_checkpointer(self, block: bool = False) -> None:
        child = self._checkpointer
        if child is None:
            return
        try:
            pid, status = os.waitpid(child.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status = child.pid, 1 << 8
        if pid == 0:
            return
        self._checkpointer = None
        elapsed = time.monotonic() - child.started
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            self.metrics.checkpoints_written += len(child.tables)
            log.info("checkpoint: %d table(s) written in %.3f s by pid %d", len(child.tables), elapsed, child.pid)
        else:
            self.metrics.checkpoint_failures += 1
            log.warning(
                "checkpoint writer pid %d failed (exit %s); the next one is due after more decisions", child.pid, code
            )
        self._schedule_next(elapsed)

    def _schedule_next(self, cost: float) -> None:
        self._checkpoint_cost = cost
        self._next_checkpoint = time.monotonic() + max(self.checkpoint_interval, CHECKPOINT_DUTY * cost)

    def _wait_checkpointer(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a running checkpoint child."""
        deadline = time.monotonic() + timeout
        while self._checkpointer is not None and time.monotonic() < deadline:
            self._reap_checkpointer()
            if self._checkpointer is not None:
                time.sleep(0.02)

    def _final_checkpoint(self) -> None:
        """On a clean stop: let a running child finish, then write what changed since (synchronously)."""
        if not self.checkpoints:
            return
        self._wait_checkpointer(60.0)
        self._maybe_checkpoint(final=True)

    def _consumer_config(self, role: str, wait_ms: int | None = None) -> dict[str, Any]:
        """A consumer of ``role`` (its ``client.id``), fetching with the short wait unless ``wait_ms`` says."""
        return self.settings.kafka_config(
            **{
                "group.id": f"{self.prefix}.arbiter",
                "client.id": f"{self.prefix}.arbiter.{role}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": self.settings.fetch_wait_busy_ms if wait_ms is None else wait_ms,
                "enable.partition.eof": True,  # an end beyond the last record read is a gap (kernel.logread)
                "error_cb": self._on_kafka_error,
                "logger": kafka_log,
            }
        )

    # ------------------------------------------------------------------ metrics

    def _log_metrics(self) -> None:
        self._update_lag()
        log.info(json.dumps({"event": "metrics", **self.metrics.snapshot()}))

    def _update_lag(self) -> None:
        """Intents lag per table from the consumer's cached high watermarks (no broker round trip)."""
        from confluent_kafka import TopicPartition

        lag: dict[str, int] = {}
        for table in self._tables.values():
            try:
                _, high = self._consumer.get_watermark_offsets(TopicPartition(table.intents, 0), cached=True)
            except Exception:
                continue
            if high is not None and high >= 0:
                lag[table.name] = max(0, high - table.state.next_offset)
                self.prom.lag.labels(table.name).set(lag[table.name])
        self.metrics.lag = lag
        self.prom.intent_rereads.set(self.metrics.intent_gaps.rereads)


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
    "default_group",
    "parse_shard",
    "run_arbiter",
    "shard_of",
    "table_transactional_id",
    "transactional_id",
]
