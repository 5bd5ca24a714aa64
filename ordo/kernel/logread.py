"""Reading single-partition logs without losing a record the broker skipped.

The gap rule: a reader of a partition with read_committed is handed
consecutive offsets, except where the log holds something no reader sees:
transaction control markers (one offset at the end of each transaction) and
aborted records (on Kafka; Tansu returns them). So

* in a log written by transactional producers only (the decisions logs: the
  arbiter's transactional producer), a jump of exactly one offset right after
  a record is a commit or abort marker and is normal;
* every other jump (any jump in the intents logs, written by idempotent
  non-transactional producers; a jump of more than one in a decisions log; an
  end-of-partition event beyond the next expected offset) is unexplained and
  is **re-read** before the reader goes on;
* in a chained log (the decisions logs: ``prev_hash``), a jump of one that
  the chain says is no marker (``follows``: the two records do not link) is
  re-read too: a record skipped inside a transaction looks like a marker to
  the offsets alone (issue 32).

A re-read fetches the partition again from the expected offset up to the
offset already seen, with a short-lived second consumer of the same
configuration (a fetch below a stored record returns at once; ~6 ms on Tansu
including the new connection, against ~14 ms for re-assigning a kept consumer
and ~23 ms for a seek of the checked one). The records it finds are delivered, in
order, before the one already seen; the gap is accepted (a *proven gap*) only
when a re-read returns nothing between. A hole inside a re-read is re-read in
turn; a re-read that does not reach the offset already seen is repeated, and
after ``attempts`` failures the reader logs an error, moves the consumer back
to the expected offset and holds the partition's later records back, so the
gap is re-read on the next fetch: a record is never skipped silently.

Tansu 0.6.0 needs this: a consumer fetching while several producers append to
the same partition occasionally skips a stored record (docs/tansu.md).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ordo.schemas.errors import OrdoError

log = logging.getLogger("ordo.logread")

REREAD_TIMEOUT = 10.0
REREAD_ATTEMPTS = 3
_serial = itertools.count(1)


@dataclass
class GapStats:
    """Counters of one ``GapChecker``."""

    rereads: int = 0  # fetches of a gap's range
    recovered: int = 0  # records a re-read found that the live fetch had skipped
    proven_gaps: int = 0  # gaps a re-read proved empty (markers, aborted records)
    unresolved: int = 0  # gaps still unexplained after ``attempts`` re-reads (the partition is held back)

    def snapshot(self) -> dict[str, int]:
        """A JSON-ready copy."""
        return {
            "rereads": self.rereads,
            "recovered": self.recovered,
            "proven_gaps": self.proven_gaps,
            "unresolved": self.unresolved,
        }


@dataclass(slots=True)
class _Position:
    expected: int  # the offset the next record should have
    after_record: bool  # the offset before ``expected`` held a record (so a marker may follow)
    last: Any = None  # the last record delivered (``follows`` checks the next one against it)


class _Unresolved(Exception):
    """Internal: a re-read did not reach the offset already seen within ``attempts`` tries."""


class GapChecker:
    """Checks what a consumer hands out against the gap rule and fills unexplained jumps by re-reading.

    ``config`` is the librdkafka configuration of the checked consumer (its
    isolation level matters: the re-reader uses the same); ``transactional``
    says whether a topic is written by transactional producers only (a bool for
    all topics, or a function of the topic name). ``consumer`` is the checked
    consumer, moved back to the expected offset when a gap stays unexplained;
    replace it with ``attach()``. ``keep_eof=False`` drops end-of-partition
    events after checking them; ``stats`` shares counters with the caller. Call ``expect()`` whenever the consumer is
    assigned or seeks, ``forget()`` when a partition is unassigned, and pass
    every batch through ``check()``.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        transactional: bool | Callable[[str], bool],
        consumer: Any = None,
        name: str = "reader",
        attempts: int = REREAD_ATTEMPTS,
        reread_timeout: float = REREAD_TIMEOUT,
        keep_eof: bool = True,
        stats: GapStats | None = None,
        follows: Callable[[Any, Any], bool] | None = None,
    ) -> None:
        self.config = {k: v for k, v in config.items() if k not in ("error_cb", "logger", "stats_cb")}
        self._transactional = transactional
        self._follows = follows
        self.consumer = consumer
        self.name = name
        self.attempts = attempts
        self.reread_timeout = reread_timeout
        self.keep_eof = keep_eof
        self.stats = stats if stats is not None else GapStats()
        self._positions: dict[tuple[str, int], _Position] = {}
        self._rereader: Any = None

    # ------------------------------------------------------------------ positions

    def attach(self, consumer: Any) -> None:
        """Check ``consumer`` from now on (every partition must be ``expect()``-ed again)."""
        self.consumer = consumer
        self._positions.clear()

    def expect(self, topic: str, offset: int, partition: int = 0, *, after_record: bool = False) -> None:
        """The consumer was assigned (or moved) to ``offset`` of ``topic``; a negative offset means the start (0).

        ``after_record``: the offset before ``offset`` is known to hold a record
        (so a transaction marker may follow without a re-read).
        """
        self._positions[(topic, partition)] = _Position(max(offset, 0), after_record and offset > 0)

    def forget(self, topic: str, partition: int = 0) -> None:
        """Stop checking ``topic`` (unassigned)."""
        self._positions.pop((topic, partition), None)

    def expected(self, topic: str, partition: int = 0) -> int | None:
        """The offset the next record of ``topic`` should have, or None when not checked."""
        position = self._positions.get((topic, partition))
        return None if position is None else position.expected

    def _allowed(self, topic: str, after_record: bool, last: Any = None) -> int:
        """The offsets that may lie unseen after the expected one: one (a transaction marker) right after a
        record of a transactional log, unless that record was written without a transaction (``ordo-epoch``)."""
        if not after_record:
            return 0
        transactional = self._transactional
        if callable(transactional):
            transactional = transactional(topic)
        return 1 if transactional and not _untransacted(last) else 0

    # ------------------------------------------------------------------ checking

    def check(self, messages: list[Any]) -> list[Any]:
        """``messages`` with every record the consumer skipped put back in its place.

        Errors pass through, end-of-partition events after their own check.
        Records below the expected offset were delivered already and are
        dropped (call ``expect()`` after moving a consumer back on purpose). A
        partition whose gap stays unexplained has its later messages of this
        batch dropped and the consumer moved back to the gap.
        """
        from confluent_kafka import KafkaError

        positions = self._positions
        out: list[Any] = []
        held: set[tuple[str, int]] | None = None
        for message in messages:
            error = message.error()
            key = (message.topic(), message.partition())
            if held is not None and key in held:
                continue
            position = positions.get(key)
            if error is not None:
                if position is not None and error.code() == KafkaError._PARTITION_EOF:
                    end = message.offset()
                    allowed = self._allowed(key[0], position.after_record, position.last)
                    if end is not None and end > position.expected + allowed:
                        if not self._fill(key, position, end, out):
                            held = (held or set()) | {key}
                            continue
                    if end is not None and end > position.expected:
                        position.expected, position.after_record = end, False
                    if not self.keep_eof:
                        continue
                out.append(message)
                continue
            offset = message.offset()
            if position is None:
                positions[key] = _Position(offset + 1, True, message)  # never expect()-ed: checked from here on
                out.append(message)
                continue
            expected = position.expected
            if offset == expected:
                position.expected = offset + 1
                position.after_record = True
                position.last = message
                out.append(message)
                continue
            if offset < expected:
                continue  # delivered already (a re-fetch after moving back to a gap)
            if offset - expected > self._allowed(key[0], position.after_record, position.last):
                if not self._fill(key, position, offset, out):
                    held = (held or set()) | {key}
                    continue
            elif self._chain_broken(position, message):
                if not self._fill(key, position, offset, out, begin=position.last.offset() + 1, after_record=True):
                    held = (held or set()) | {key}
                    continue
            position.expected = offset + 1
            position.after_record = True
            position.last = message
            out.append(message)
        return out

    def _chain_broken(self, position: _Position, message: Any) -> bool:
        """True when offsets lie between the last record delivered and ``message`` and the chain says one is missing."""
        last = position.last
        if self._follows is None or last is None or message.offset() <= last.offset() + 1:
            return False
        return not self._follows(last, message)

    def _fill(
        self,
        key: tuple[str, int],
        position: _Position,
        seen: int,
        out: list[Any],
        *,
        begin: int | None = None,
        after_record: bool | None = None,
    ) -> bool:
        """Re-read ``[begin, seen)`` (from ``position.expected`` unless told) into ``out``; False when that failed
        (the partition is held)."""
        topic, partition = key
        if begin is None:
            begin = position.expected
        if after_record is None:
            after_record = position.after_record
        try:
            found = self._reread(topic, partition, begin, seen, after_record)
        except _Unresolved as exc:
            self.close()
            self.stats.unresolved += 1
            log.error(
                "%s: %s offsets %d..%d were skipped by the fetch and %s; holding the partition back and "
                "re-reading from offset %d later",
                self.name,
                topic,
                begin,
                seen - 1,
                exc,
                begin,
                extra={"event": "unresolved_gap", "topic": topic, "offset": begin},
            )
            self._seek_back(topic, partition, begin)
            position.expected, position.after_record = begin, after_record  # the records from there come again
            return False
        self.close()  # a short-lived re-reader: cheaper than re-assigning a kept one (~6 ms vs ~14 ms on Tansu)
        if found:
            self.stats.recovered += len(found)
            log.info(
                "%s: the fetch of %s skipped %d stored record(s) (offsets %s) before offset %d; re-read and delivered",
                self.name,
                topic,
                len(found),
                ",".join(str(m.offset()) for m in found),
                seen,
            )
            out.extend(found)
            position.expected = found[-1].offset() + 1
            position.after_record = True
            position.last = found[-1]
        return True

    def _reread(self, topic: str, partition: int, begin: int, end: int, after_record: bool) -> list[Any]:
        """The records in ``[begin, end)``, in order, every hole in them proven by a further re-read."""
        problem = "no re-read reached it"
        for _ in range(self.attempts):
            self.stats.rereads += 1
            records, reached = self._fetch(topic, partition, begin, end)
            if not reached:
                problem = f"re-reads did not reach offset {end} ({reached!r})"
                continue
            if not records:
                self.stats.proven_gaps += 1
                return []
            result: list[Any] = []
            cursor, after = begin, after_record
            for record in [*records, None]:
                offset = end if record is None else record.offset()
                if offset - cursor > self._allowed(topic, after):
                    result.extend(self._reread(topic, partition, cursor, offset, after))  # a narrower range
                if record is not None:
                    result.append(record)
                    cursor, after = offset + 1, True
            return result
        raise _Unresolved(problem)

    def _fetch(self, topic: str, partition: int, begin: int, end: int) -> tuple[list[Any], bool]:
        """Fetch ``[begin, end)`` with the re-reader; returns the records and whether offset ``end`` was reached."""
        from confluent_kafka import KafkaError, TopicPartition

        reader = self._reader()
        records: list[Any] = []
        reader.assign([TopicPartition(topic, partition, begin)])
        try:
            deadline = time.monotonic() + self.reread_timeout
            while time.monotonic() < deadline:
                message = reader.poll(0.1)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if (message.offset() or 0) >= end:
                            return records, True
                        return records, False  # the end before the offset already seen: try again
                    if error.fatal():
                        return records, False
                    continue
                offset = message.offset()
                if offset >= end:
                    return records, True
                if offset >= begin and (not records or offset > records[-1].offset()):
                    records.append(message)
            return records, False
        finally:
            reader.unassign()

    def _reader(self) -> Any:
        if self._rereader is None:
            from confluent_kafka import Consumer

            config = dict(self.config)
            config.update(
                {
                    "group.id": f"{config.get('group.id', 'ordo')}.reread-{next(_serial)}",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 10,
                    "client.id": f"{config.get('client.id', 'ordo')}.reread",
                }
            )
            self._rereader = Consumer(config)
        return self._rereader

    def _seek_back(self, topic: str, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition

        if self.consumer is None:
            return
        try:
            self.consumer.seek(TopicPartition(topic, partition, offset))
        except Exception as exc:  # not fetching yet: re-assign at the offset instead
            log.warning("%s: seek %s to %d failed (%s); re-assigning", self.name, topic, offset, exc)
            try:
                self.consumer.incremental_unassign([TopicPartition(topic, partition)])
                self.consumer.incremental_assign([TopicPartition(topic, partition, offset)])
            except Exception:
                log.exception("%s: cannot move %s back to offset %d", self.name, topic, offset)

    def close(self) -> None:
        """Close the re-reader if one is open (the checked consumer belongs to the caller)."""
        if self._rereader is not None:
            try:
                self._rereader.close()
            except Exception:
                log.debug("closing the re-reader failed", exc_info=True)
            self._rereader = None


def _untransacted(message: Any) -> bool:
    """True when ``message`` was written without a Kafka transaction (its ``ordo-epoch`` header): no marker
    follows it, so the offset after it holds a record (a decisions log of ``ORDO_DECISIONS_TRANSACTIONS=false``)."""
    if message is None:
        return False
    from ordo.schemas.signing import EPOCH_HEADER

    return any(name == EPOCH_HEADER for name, _ in message.headers() or ())


def decisions_follow(previous: Any, message: Any) -> bool:
    """``GapChecker``'s ``follows`` for a decisions log: ``message``'s ``prev_hash`` is the hash of ``previous``."""
    from ordo.schemas.signing import links_to

    return links_to(message.value(), previous.value())


class LogReadError(OrdoError):
    """Raised when a log cannot be read to its end (timeout or a fatal client error)."""


def warm_metadata(consumer: Any, timeout: float = 10.0) -> None:
    """Load all topics' metadata into ``consumer`` so ``assign()`` starts fetching at once.

    Without it librdkafka's first leader query for a new topic waits about a
    second. All topics, never one by name: naming one creates it on Tansu. A
    failure is only logged: ``assign()`` retries on its own.
    """
    from confluent_kafka import KafkaException

    try:
        consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        log.warning("metadata request failed (assign() will retry): %s", exc)


def read_to_end(
    config: Mapping[str, Any],
    topic: str,
    *,
    start: int = 0,
    transactional: bool,
    timeout: float = 30.0,
    partition: int = 0,
    stats: GapStats | None = None,
    reader: tuple[Any, GapChecker] | None = None,
    stop: Callable[[], bool] | None = None,
    follows: Callable[[Any, Any], bool] | None = None,
) -> Iterator[Any]:
    """Every record of ``topic`` from offset ``start`` to the end of the partition, gaps checked.

    A short-lived consumer of ``config`` (forced: ``assign()`` only,
    end-of-partition events on) reads until the end-of-partition event; the
    end is the last stable offset under read_committed. ``timeout`` bounds the
    wait for each next batch. ``stats`` (optional) adds this read's re-reads.
    Yields confluent_kafka messages (never errors).

    ``reader``: a kept ``(consumer, checker)`` pair to read with instead (its
    configuration must have end-of-partition events on; ``config`` is then
    unused): it is assigned the partition and unassigned at the end, never
    closed, so a caller reading many logs pays for one consumer and its
    metadata once. ``stop``: checked between fetches; when it returns True
    the read ends early (the caller tells that from reaching the end).
    ``follows``: the ``GapChecker``'s chain rule for the consumer made here
    (``decisions_follow`` for a decisions log; a kept ``reader`` has its own).
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    if reader is not None:
        consumer, checker = reader
    else:
        own = dict(config)
        own.update(
            {
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "allow.auto.create.topics": False,
            }
        )
        own.setdefault("group.id", "ordo.read-to-end")  # never joined
        own.setdefault("client.id", "ordo.read-to-end")
        own.setdefault("auto.offset.reset", "earliest")  # a start below the log's first offset reads from its first
        own.setdefault("fetch.wait.max.ms", 20)
        consumer = Consumer(own)
        checker = GapChecker(
            own, transactional=transactional, consumer=consumer, name=f"reading {topic}", follows=follows
        )
    try:
        if reader is None:
            consumer.list_topics(timeout=timeout)  # all topics: warms the metadata cache without naming one
        consumer.assign([TopicPartition(topic, partition, start if start > 0 else OFFSET_BEGINNING)])
        checker.expect(topic, start, partition)
        deadline = time.monotonic() + timeout
        while stop is None or not stop():
            first = consumer.poll(0.2)
            batch = [] if first is None else [first, *consumer.consume(num_messages=10_000, timeout=0)]
            for message in checker.check(batch):
                if message.topic() != topic:
                    continue  # a kept consumer's record fetched for an earlier assignment
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return
                    if error.fatal():
                        raise LogReadError(f"reading {topic}: {error.str()}")
                    continue
                deadline = time.monotonic() + timeout
                yield message
            if time.monotonic() > deadline:
                raise LogReadError(f"reading {topic} did not reach its end within {timeout:g} s")
    finally:
        if reader is not None:
            consumer.unassign()  # drops what was fetched for this position
            checker.forget(topic, partition)
        else:
            if stats is not None:
                for name, value in checker.stats.snapshot().items():
                    setattr(stats, name, getattr(stats, name) + value)
            checker.close()
            consumer.close()


__all__ = [
    "GapChecker",
    "GapStats",
    "LogReadError",
    "decisions_follow",
    "read_to_end",
    "warm_metadata",
]
