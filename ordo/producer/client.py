"""The Spark-free commit client: publish a ``CommitIntent``, wait for its ``CommitDecision``.

How the answer is found: before a table's first intent is published, the
client notes the end of the table's decisions topic; one background reader per
table then follows the decisions topic (read_committed, ``assign()``, no
consumer group) from there and hands each decision to the future waiting for
its ``intent_offset`` (the offset the broker gave the intent). A repeated
``txn_id`` is answered by a decision with ``duplicate_of`` set: that is still
the answer. A decision may be read before the broker's delivery report for
its intent arrives; it is held until then. A decision counts only once a
trusted arbiter signature vouches for it (``schemas.signing``: the signed
record closes its batch, in the same transaction); a forged or unsigned one is
never taken as the answer.

Every gap in the decisions log that is not a transaction marker is re-read
(``kernel.logread``: Tansu's fetch can skip a stored record), and so is a jump
of one offset whose two records do not chain (``prev_hash``): a decision
skipped inside a transaction, which the offsets alone take for a marker (and
which cost the decisions before it in the batch their signature). And because the
arbiter's fetch of the intents log can skip one too, an intent whose decision
is overdue (``resubmit_after`` seconds, doubling each time) is published again,
the same bytes under the same txn id: the arbiter answers a repeat with the
first decision (``duplicate_of`` set, the original outcome and versions), and
whichever decision comes first answers the commit. Nothing is resubmitted once
a decision is known.

A table's topics are made or checked before its first intent, and the end of
its decisions log read, by ``producer.topics.TableTopics``; ``read_decisions``
reads a table's history. Writers do not call ``commit`` themselves: they go
through the one commit path, ``producer.commit``.

Kafka clients are created on first use, never in ``__init__``.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from ordo.kernel.admin import fetch_waits
from ordo.kernel.errors import BrokerUnavailableError, CommitTimeoutError, OrdoError
from ordo.kernel.logread import GapChecker, GapStats, decisions_follow, read_to_end, warm_metadata
from ordo.kernel.settings import Settings, load_settings
from ordo.producer.topics import TableTopics
from ordo.schemas import CommitDecision, CommitIntent, decisions_topic, decode, encode, intents_topic
from ordo.schemas.signing import GENESIS_HASH as GENESIS
from ordo.schemas.signing import ChainVerifier, Trust, signature_of

log = logging.getLogger("ordo.producer")

CONNECT_TIMEOUT = 10.0
READER_POLL = 0.05
PAUSE_AFTER = 0.5  # a decision reader with nothing in flight this long unassigns until the next intent
MAX_RESUBMIT_INTERVAL = 60.0


class ClientClosedError(OrdoError):
    """Raised for a commit still waiting when its ``CommitClient`` was closed."""


@dataclass(eq=False)
class _Pending:
    """One published intent waiting for its decision."""

    txn_id: str
    future: Future[CommitDecision]
    deadline: float
    timeout: float
    offset: int | None = None
    published_at: float = field(default_factory=time.monotonic)
    topic: str = ""
    data: bytes = b""
    next_resubmit: float = float("inf")  # when the decision is overdue (set once the intent is delivered)
    resubmits: int = 0


class _DecisionReader:
    """Follows one table's decisions topic and resolves the futures of that table."""

    def __init__(self, client: CommitClient, table: str, start: int) -> None:
        self.client = client
        self.table = table
        self.topic = decisions_topic(client.prefix, table)
        self.start = start
        self._lock = threading.Lock()
        self._undelivered: set[_Pending] = set()
        self._waiting: dict[int, _Pending] = {}
        self._early: dict[int, CommitDecision] = {}  # decisions read before their intent's delivery report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ordo-decisions-{table}", daemon=True)
        self._consumer: Any = None
        # Only authentic records count; the chain's continuity is the consumer's concern: unanchored.
        self._verifier: ChainVerifier[bytes] = ChainVerifier(table, client._reader_trust(), anchored=False)
        self._gaps: GapChecker | None = None
        self._paused = False
        self._idle_since: float | None = None  # when the last commit in flight was answered
        self.pauses = 0  # how often the reader stopped fetching for want of work

    def config(self) -> dict[str, Any]:
        """The decision reader's librdkafka configuration (``client.id`` names its role)."""
        return self.client.settings.kafka_config(
            **{
                "group.id": f"{self.client.prefix}.commit-client",  # never joined: assign() only
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                # Tansu answers an empty fetch only after the full wait: the short wait while a
                # commit is in flight; with nothing in flight the partition is paused (no fetches).
                "fetch.wait.max.ms": fetch_waits(self.client.settings).client,
                "enable.partition.eof": True,  # an end past the last record read is a gap to re-read
                "allow.auto.create.topics": False,
                "client.id": self.client.settings.client_name("decisions"),
            }
        )

    def begin(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        config = self.config()
        self._consumer = Consumer(config)
        self._gaps = GapChecker(
            config,
            transactional=True,
            consumer=self._consumer,
            name=f"commit client {self.topic}",
            keep_eof=False,
            stats=self.client.gap_stats,
            follows=decisions_follow,  # a decision skipped inside a transaction breaks the hash chain
        )
        warm_metadata(self._consumer, CONNECT_TIMEOUT)
        self._consumer.assign([TopicPartition(self.topic, 0, self.start)])
        self._gaps.expect(self.topic, self.start)
        self._thread.start()

    # ---------------------------------------------------------------- producer side

    def add(self, pending: _Pending) -> None:
        with self._lock:
            self._undelivered.add(pending)
            self._idle_since = None
            if self._paused:
                self._set_paused(False)

    def _set_paused(self, paused: bool) -> None:
        """Stop or restart fetching the decisions topic (under ``_lock``).

        By unassigning and assigning again at the next expected offset: librdkafka's
        ``resume()`` takes up to a second to fetch again, ``assign()`` about a millisecond.
        """
        from confluent_kafka import TopicPartition

        assert self._gaps is not None
        if paused:
            self._consumer.unassign()
            self.pauses += 1
        else:
            expected = self._gaps.expected(self.topic)
            start = self.start if expected is None else expected
            self._consumer.assign([TopicPartition(self.topic, 0, start)])
        self._paused = paused

    def _maybe_pause(self, now: float) -> None:
        """Stop fetching once nothing has been in flight for ``PAUSE_AFTER`` seconds (the idle cost is then nil)."""
        with self._lock:
            if self._paused or self._waiting or self._undelivered:
                self._idle_since = None
                return
            if self._idle_since is None:
                self._idle_since = now
            elif now - self._idle_since >= PAUSE_AFTER:
                self._set_paused(True)

    def delivered(self, pending: _Pending, error: Any, offset: int | None, repeat: bool = False) -> None:
        """Delivery report of ``pending``'s intent or of a ``repeat`` of it (called on the producer's poll thread)."""
        with self._lock:
            self._undelivered.discard(pending)
            record = None
            if repeat and (error is not None or offset is None or pending.future.done()):
                if error is not None:
                    log.warning("resubmitting txn %s for table %s failed: %s", pending.txn_id, self.table, error)
                return  # the first copy is still waiting (or answered)
            if error is None and offset is not None:
                if pending.offset is None:
                    pending.offset = offset
                    pending.next_resubmit = time.monotonic() + self.client.resubmit_after
                record = self._early.pop(offset, None)
                if record is None:
                    self._waiting[offset] = pending
                    return
        # Futures are completed outside the lock: their callbacks may submit again.
        if record is not None:
            _resolve(pending.future, record)
        else:
            _fail(
                pending.future,
                BrokerUnavailableError(
                    f"intent {pending.txn_id} for table {self.table} was not accepted by the broker: {error}"
                ),
            )

    # ---------------------------------------------------------------- reader thread

    def _run(self) -> None:
        consumer = self._consumer
        gaps = self._gaps
        assert gaps is not None
        next_expiry = 0.0
        try:
            while not self._stop.is_set():
                first = consumer.poll(READER_POLL)  # consume() would wait out its timeout at low load
                messages = [] if first is None else [first, *consumer.consume(num_messages=1000, timeout=0)]
                for message in gaps.check(messages):
                    if message.error() is not None:
                        continue  # unknown-topic and transport errors retry on their own
                    released, refused = self._verifier.push(
                        message.offset(), message.value(), signature_of(message.headers()), message.value()
                    )
                    for refusal in refused:
                        log.warning("%s offset %d refused: %s", self.topic, refusal.offset, refusal.reason)
                    for value in released:
                        # The codec's own model path: cheaper than a dict plus pydantic validation.
                        try:
                            decision = decode(value)
                        except Exception as exc:
                            log.warning("%s: a signed record is not a valid decision: %s", self.topic, exc)
                            continue
                        if isinstance(decision, CommitDecision):
                            self._match(decision)
                now = time.monotonic()
                if now >= next_expiry:
                    self._expire(now)
                    self._maybe_pause(now)
                    next_expiry = now + 0.1
        except Exception:  # a reader must not die silently: fail what it serves
            log.exception("decision reader for %s failed", self.topic)
            self._fail_all(OrdoError(f"the decision reader for table {self.table} failed; see the log"))
        finally:
            gaps.close()
            consumer.close()

    def _match(self, record: CommitDecision) -> None:
        offset = record.intent_offset
        with self._lock:
            pending = self._waiting.pop(offset, None)
            if pending is None:
                if self._undelivered:
                    self._early.setdefault(offset, record)  # the first decision for an offset is the answer
                else:
                    self._early.clear()  # every intent of ours is matched or waiting: the rest are others'
                return
        _resolve(pending.future, record)

    def _expire(self, now: float) -> None:
        expired: list[_Pending] = []
        overdue: list[_Pending] = []
        with self._lock:
            for offset, pending in list(self._waiting.items()):
                if pending.deadline <= now or pending.future.done():
                    del self._waiting[offset]
                    if pending not in expired:
                        expired.append(pending)
                elif pending.next_resubmit <= now and pending.offset == offset:
                    pending.resubmits += 1
                    interval = self.client.resubmit_after * 2**pending.resubmits
                    pending.next_resubmit = now + min(interval, MAX_RESUBMIT_INTERVAL)
                    self._undelivered.add(pending)
                    overdue.append(pending)
            for pending in list(self._undelivered):
                if pending.deadline <= now or pending.future.done():
                    self._undelivered.discard(pending)
                    expired.append(pending)
        hidden: int | None = None
        if any(not p.future.done() and p.offset is not None for p in expired):
            hidden = self.hidden_record()
        for pending in expired:
            if not pending.future.done():
                _fail(pending.future, self.client._timeout_error(self.table, pending, hidden))
        for pending in overdue:
            self.client._resubmit(self, pending)

    def hidden_record(self) -> int | None:
        """The offset of a record stored where this reader waits that read_committed readers are not given, or None.

        Asked when a decision is overdue. Such a record means a transaction is
        open in the decisions log: an arbiter stalled mid-commit, or a *hanging*
        transaction the broker never ends (Kafka before KIP-890's defence;
        Tansu, docs/tansu.md); every read_committed reader stops there. A
        short-lived read_uncommitted consumer looks at the next expected offset.
        """
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        assert self._gaps is not None
        expected = self._gaps.expected(self.topic)
        start = self.start if expected is None else expected
        config = self.config()
        config.update({"isolation.level": "read_uncommitted", "client.id": self.client.settings.client_name("probe")})
        probe = Consumer(config)
        try:
            probe.assign([TopicPartition(self.topic, 0, start)])
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                message = probe.poll(0.2)
                if message is None:
                    continue
                error = message.error()
                if error is None:
                    offset = message.offset()
                    return offset if offset is not None and offset >= start else None
                if error.code() == KafkaError._PARTITION_EOF:
                    return None
            return None
        except Exception as exc:  # a diagnosis only: never hide the timeout behind it
            log.warning("probing %s for a hidden record failed: %s", self.topic, exc)
            return None
        finally:
            probe.close()

    def _fail_all(self, error: OrdoError) -> None:
        with self._lock:
            pendings = [*self._waiting.values(), *self._undelivered]
            self._waiting.clear()
            self._undelivered.clear()
        for pending in pendings:
            _fail(pending.future, error)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self._fail_all(ClientClosedError(f"CommitClient closed while waiting for decisions of table {self.table}"))


def _resolve(future: Future[CommitDecision], decision: CommitDecision) -> None:
    if future.done():
        return
    try:
        future.set_result(decision)
    except Exception:  # lost a race with expiry
        pass


def _fail(future: Future[CommitDecision], error: BaseException) -> None:
    if not future.done():
        try:
            future.set_exception(error)
        except Exception:  # lost a race with a result
            pass


class CommitClient:
    """Publishes commit intents and waits for the arbiter's decisions; a context manager.

    ``bootstrap_servers`` and ``topic_prefix`` override ``settings`` (default:
    ``load_settings()``, i.e. the ``ORDO_*`` environment). ``connect_timeout``
    bounds the first contact with the broker; ``resubmit_after`` (default
    ``settings.resubmit_after``) is how long a decision may take before the
    intent is published again (same bytes, same txn id; the wait doubles). Thread-safe: many threads may
    ``commit()`` and ``submit()`` at once.
    """

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        topic_prefix: str | None = None,
        *,
        settings: Settings | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        resubmit_after: float | None = None,
    ) -> None:
        base = settings if settings is not None else load_settings()
        self.settings = base.with_overrides(
            bootstrap_servers=bootstrap_servers, topic_prefix=topic_prefix, resubmit_after=resubmit_after
        )
        if not self.settings.resubmit_after > 0:
            raise ValueError(f"resubmit_after must be > 0 seconds, got {self.settings.resubmit_after}")
        self.resubmit_after = self.settings.resubmit_after
        self.resubmits = 0  # intents published again because their decision was overdue
        self.gap_stats = GapStats()  # re-reads of the decisions logs (kernel.logread)
        if not self.settings.bootstrap_servers:
            raise BrokerUnavailableError(
                "no Kafka broker configured: pass bootstrap_servers= or set ORDO_BOOTSTRAP_SERVERS"
            )
        self._lock = threading.RLock()
        self._producer: Any = None
        self._admin: Any = None
        self._poller: threading.Thread | None = None
        self._readers: dict[str, _DecisionReader] = {}
        self._topics: TableTopics | None = None  # made with the admin client, on first use
        self._closed = threading.Event()
        self._trust: Trust | None = None
        self.connect_timeout = connect_timeout

    @property
    def prefix(self) -> str:
        """The topic prefix this client publishes under."""
        return self.settings.topic_prefix

    @property
    def bootstrap_servers(self) -> str:
        """The Kafka bootstrap servers."""
        return self.settings.bootstrap_servers or ""

    # ------------------------------------------------------------------ public API

    def commit(self, intent: CommitIntent, timeout: float = 30.0) -> CommitDecision:
        """Publish ``intent`` and wait for its decision (accepted or rejected).

        Raises ``CommitTimeoutError`` when no decision arrives within ``timeout``
        seconds (typically: no arbiter running for this prefix) and
        ``BrokerUnavailableError`` when the broker cannot be reached.
        """
        future = self.submit(intent, timeout=timeout)
        try:
            return future.result(timeout=timeout + 10.0)  # the reader expires it at ``timeout``
        except FutureTimeoutError:
            raise CommitTimeoutError(self._timeout_message(intent.table, intent.txn_id, timeout)) from None

    def submit(self, intent: CommitIntent, timeout: float = 30.0) -> Future[CommitDecision]:
        """Publish ``intent`` and return a future of its decision; many may be in flight.

        The future fails with ``CommitTimeoutError`` after ``timeout`` seconds
        without a decision. Intents submitted from one thread are published in
        submission order.
        """
        if not isinstance(intent, CommitIntent):
            raise TypeError(f"submit() needs a CommitIntent, got {type(intent).__name__}")
        data = encode(intent)
        with self._lock:
            self._check_open()
            self._connect()
            assert self._topics is not None
            self._topics.ensure(intent)
            reader = self._reader_for(intent.table)
        future: Future[CommitDecision] = Future()
        future.set_running_or_notify_cancel()
        topic = intents_topic(self.prefix, intent.table)
        pending = _Pending(intent.txn_id, future, time.monotonic() + timeout, timeout, topic=topic, data=data)
        reader.add(pending)

        def on_delivery(error: Any, message: Any) -> None:
            reader.delivered(pending, error, message.offset() if error is None else None)

        self._produce(topic, data, intent.txn_id.encode(), on_delivery)
        return future

    def _resubmit(self, reader: _DecisionReader, pending: _Pending) -> None:
        """Publish ``pending``'s intent again (its decision is overdue); the first decision of either answers."""
        if self._closed.is_set() or self._producer is None or pending.future.done():
            reader.delivered(pending, None, None, repeat=True)
            return
        self.resubmits += 1
        log.info(
            "no decision for txn %s (table %s, intent offset %s) after %.1f s; publishing it again (#%d)",
            pending.txn_id,
            reader.table,
            pending.offset,
            time.monotonic() - pending.published_at,
            pending.resubmits,
        )

        def on_delivery(error: Any, message: Any) -> None:
            reader.delivered(pending, error, message.offset() if error is None else None, repeat=True)

        self._produce(pending.topic, pending.data, pending.txn_id.encode(), on_delivery)

    def publish_raw(self, table: str, value: bytes | None, key: bytes | None = None, timeout: float = 30.0) -> int:
        """Put arbitrary bytes on ``table``'s intents topic (creating it if missing); return the record's offset.

        For tests, fuzzing and tools: the arbiter must answer anything found there.
        """
        with self._lock:
            self._check_open()
            self._connect()
            assert self._topics is not None
            topic = self._topics.ensure_intents(table)
        result: Future[int] = Future()

        def on_delivery(error: Any, message: Any) -> None:
            if error is not None:
                result.set_exception(BrokerUnavailableError(f"publishing to {topic} failed: {error}"))
            else:
                result.set_result(message.offset())

        self._produce(topic, value, key, on_delivery)
        self._producer.flush(timeout)
        try:
            return result.result(timeout=timeout)
        except FutureTimeoutError:
            raise BrokerUnavailableError(f"publishing to {topic} was not acknowledged within {timeout} s") from None

    def decisions(self, table: str, start: int = 0, timeout: float = 30.0) -> list[CommitDecision]:
        """Every decision of ``table`` from log offset ``start`` to the current end (read_committed).

        The history, in log order: a tool's and a test's view of it. Only decisions a trusted
        signature vouches for are returned (``schemas.signing``); refused records are logged.
        """
        with self._lock:
            self._check_open()
            self._connect()
        assert self._topics is not None
        topic = decisions_topic(self.prefix, table)
        if not self._topics.exists(topic):
            return []
        return read_decisions(self.settings, table, start, self._reader_trust(), self.gap_stats, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Flush what was published, stop the readers (failing futures still waiting) and close."""
        if self._closed.is_set():
            return
        with self._lock:
            if self._producer is not None:
                self._producer.flush(timeout)
            self._closed.set()
            readers = list(self._readers.values())
            self._readers.clear()
        for reader in readers:
            reader.close()
        if self._poller is not None:
            self._poller.join(timeout=5.0)
        self._producer = None
        self._admin = None
        self._topics = None  # it holds the admin client too: kept, librdkafka would go on reconnecting to the broker

    def __enter__(self) -> CommitClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise ClientClosedError("this CommitClient is closed")

    def _connect(self) -> None:
        """Create the producer and admin client on first use and check that the broker answers."""
        if self._producer is not None:
            return
        from confluent_kafka import KafkaException, Producer
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.settings.kafka_config(**{"client.id": self.settings.client_name("admin")}))
        try:
            admin.list_topics(timeout=self.connect_timeout)
        except KafkaException as exc:
            raise BrokerUnavailableError(
                f"cannot reach the Kafka broker at {self.bootstrap_servers} (is it running?): {exc.args[0].str()}"
            ) from exc
        self._reader_trust()  # a signing misconfiguration fails here, before anything is published
        self._admin = admin
        self._topics = TableTopics(admin, self.settings)
        self._producer = Producer(
            self.settings.kafka_config(
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 0,  # a commit waits on this record; under load batches form while requests are in flight
                    "allow.auto.create.topics": False,
                    "client.id": self.settings.client_name("producer"),
                }
            )
        )
        self._poller = threading.Thread(target=self._poll_loop, name="ordo-commit-client-poll", daemon=True)
        self._poller.start()

    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            producer = self._producer
            if producer is None:
                return
            producer.poll(0.05)

    def _produce(self, topic: str, value: bytes | None, key: bytes | None, on_delivery: Any) -> None:
        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=on_delivery)
                return
            except BufferError:
                time.sleep(0.01)  # the local queue is full; the poller drains it

    def _reader_trust(self) -> Trust:
        """The keys a decision must be signed with (``ORDO_TRUSTED_KEYS``), loaded once."""
        if self._trust is None:
            from ordo.kernel.keys import reader_trust

            self._trust = reader_trust(self.settings)
        return self._trust

    def _reader_for(self, table: str) -> _DecisionReader:
        reader = self._readers.get(table)
        if reader is None:
            assert self._topics is not None
            reader = _DecisionReader(self, table, self._topics.end_offset(decisions_topic(self.prefix, table)))
            reader.begin()
            self._readers[table] = reader
        return reader

    def _timeout_message(
        self, table: str, txn_id: str, timeout: float, delivered: bool = True, hidden: int | None = None
    ) -> str:
        if not delivered:
            return (
                f"intent {txn_id} for table {table} (prefix {self.prefix!r}) was not acknowledged by the broker "
                f"at {self.bootstrap_servers} within {timeout:g} s"
            )
        if hidden is not None:
            return (
                f"no decision for txn {txn_id} on table {table} (prefix {self.prefix!r}) within {timeout:g} s: "
                f"{decisions_topic(self.prefix, table)} holds records from offset {hidden} on that read_committed "
                "readers are not given, so a transaction is open there (an arbiter stalled mid-commit, or a hanging "
                "transaction the broker never ends; see 'A decisions log stops' in docs/operations.md)"
            )
        return (
            f"no decision for txn {txn_id} on table {table} (prefix {self.prefix!r}) within {timeout:g} s; "
            f"is an arbiter running for prefix {self.prefix!r} (ordo arbiter)?"
        )

    def _timeout_error(self, table: str, pending: _Pending, hidden: int | None = None) -> CommitTimeoutError:
        return CommitTimeoutError(
            self._timeout_message(table, pending.txn_id, pending.timeout, pending.offset is not None, hidden)
        )


def read_decisions(
    settings: Settings, table: str, start: int, trust: Trust, stats: GapStats, timeout: float
) -> list[CommitDecision]:
    """The decisions of ``table`` from ``start`` to the end of its log that ``trust`` vouches for, in log order
    (``CommitClient.decisions``); ``CommitTimeoutError`` when the log cannot be read to its end."""
    from ordo.kernel.logread import LogReadError

    topic = decisions_topic(settings.topic_prefix, table)
    config = settings.kafka_config(
        **{
            "group.id": f"{settings.topic_prefix}.commit-client",
            "client.id": settings.client_name("history"),
            "isolation.level": "read_committed",
        }
    )
    result: list[CommitDecision] = []
    verifier: ChainVerifier[bytes] = ChainVerifier(table, trust, anchor=None if start else GENESIS)
    try:
        for message in read_to_end(
            config, topic, start=start, transactional=True, timeout=timeout, stats=stats, follows=decisions_follow
        ):
            value = message.value() or b""
            released, refused = verifier.push(message.offset(), value, signature_of(message.headers()), value)
            for refusal in refused:
                log.warning("%s offset %d refused: %s", topic, refusal.offset, refusal.reason)
            for record in released:
                decision = decode(record)
                if not isinstance(decision, CommitDecision):
                    raise OrdoError(f"{topic} holds a signed {type(decision).__name__}")
                result.append(decision)
    except LogReadError as exc:
        raise CommitTimeoutError(str(exc)) from exc
    for refusal in verifier.unvouched():
        log.warning("%s offset %d refused: %s", topic, refusal.offset, refusal.reason)
    return result


__all__ = ["ClientClosedError", "CommitClient", "read_decisions"]
