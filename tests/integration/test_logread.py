"""``kernel.logread`` on the real broker: skipped records are re-read and delivered in order, markers are not."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import pytest

from ordo.broker import DECISIONS_CONFIG, INTENTS_CONFIG, create_topics
from ordo.kernel.logread import GapChecker, read_to_end
from tests.lossy import LossyConsumer, drop_offsets_once

pytestmark = pytest.mark.timeout(120)


def _topic(bootstrap_servers: str, config: dict[str, str]) -> str:
    from confluent_kafka.admin import AdminClient

    name = f"logread-{uuid.uuid4().hex[:10]}"
    create_topics(AdminClient({"bootstrap.servers": bootstrap_servers}), {name: config})
    return name


def _produce_plain(bootstrap_servers: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "acks": "all"})
    for i in range(count):
        producer.produce(topic, f"r{i}".encode())
        producer.flush(10)  # one record per batch, like a commit client in a closed loop


def _produce_transactions(bootstrap_servers: str, topic: str, plan: list[tuple[int, bool]]) -> None:
    """One transaction per ``(records, commit)`` of ``plan``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, "transactional.id": f"t-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    n = 0
    for records, commit in plan:
        producer.begin_transaction()
        for _ in range(records):
            producer.produce(topic, f"t{n}".encode())
            n += 1
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(10)
            producer.abort_transaction(30)


def _produce_chain(bootstrap_servers: str, topic: str, plan: list[tuple[list[str], bool]]) -> None:
    """One transaction per ``(names, commit)`` of ``plan``; each record is ``name/previous committed name``.

    A chain like the decisions logs' ``prev_hash``: an aborted transaction's
    records link to the committed record before them, and so does the next
    committed record (the arbiter re-decides them after an abort).
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, "transactional.id": f"t-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    previous = "-"
    for names, commit in plan:
        producer.begin_transaction()
        link = previous
        for name in names:
            producer.produce(topic, f"{name}/{link}".encode())
            link = name
        if commit:
            producer.commit_transaction(30)
            previous = link
        else:
            producer.flush(10)
            producer.abort_transaction(30)


def _chained(previous: Any, message: Any) -> bool:
    """``GapChecker``'s ``follows`` for ``_produce_chain``'s records."""
    return bool(message.value().split(b"/")[1] == previous.value().split(b"/")[0])


def _config(bootstrap_servers: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap_servers,
        "group.id": "logread-test",
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 20,
    }


def _follow(
    bootstrap_servers: str, topic: str, *, drop: Any, transactional: bool | None, follows: Any = None
) -> tuple[list[Any], GapChecker | None, LossyConsumer]:
    """Read ``topic`` to its first end through a lossy consumer; ``transactional=None`` reads without a checker."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    config = _config(bootstrap_servers)
    real = Consumer(config)
    lossy = LossyConsumer(real, drop)
    checker = (
        None
        if transactional is None
        else GapChecker(config, transactional=transactional, consumer=real, follows=follows)
    )
    lossy.assign([TopicPartition(topic, 0, 0)])
    if checker is not None:
        checker.expect(topic, 0)
    records: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            first = lossy.poll(0.2)
            batch = [] if first is None else [first, *lossy.consume(100, 0)]
            if checker is not None:
                batch = checker.check(batch)
            for message in batch:
                error = message.error()
                if error is None:
                    records.append(message)
                elif error.code() == KafkaError._PARTITION_EOF:
                    return records, checker, lossy
        raise AssertionError(f"no end of {topic} within 30 s")
    finally:
        if checker is not None:
            checker.close()
        real.close()


def test_records_the_fetch_skipped_are_re_read_and_delivered_in_order(bootstrap_servers: str) -> None:
    topic = _topic(bootstrap_servers, INTENTS_CONFIG)
    _produce_plain(bootstrap_servers, topic, 20)
    lost = {0, 3, 4, 11, 19}  # the first record, two in a row, one alone, and the last (seen only by the end event)

    unchecked, _, lossy = _follow(bootstrap_servers, topic, drop=drop_offsets_once(lost), transactional=None)
    assert sorted(o for _, o in lossy.dropped) == sorted(lost)
    assert [m.offset() for m in unchecked] == [o for o in range(20) if o not in lost]  # the double does lose them

    records, checker, lossy = _follow(bootstrap_servers, topic, drop=drop_offsets_once(lost), transactional=False)
    assert checker is not None
    assert sorted(o for _, o in lossy.dropped) == sorted(lost)
    assert [m.offset() for m in records] == list(range(20))
    assert [m.value() for m in records] == [f"r{i}".encode() for i in range(20)]
    assert checker.stats.recovered == len(lost)
    assert checker.stats.proven_gaps == 0 and checker.stats.unresolved == 0


def test_transaction_markers_and_aborted_records_are_proven_gaps_not_re_deliveries(
    bootstrap_servers: str, broker_kind: str
) -> None:
    topic = _topic(bootstrap_servers, DECISIONS_CONFIG)
    _produce_transactions(bootstrap_servers, topic, [(3, True), (2, False), (1, True), (2, True)])
    plain, _, _ = _follow(bootstrap_servers, topic, drop=lambda m: False, transactional=None)
    plain_offsets = [m.offset() for m in plain]
    # the committed records; Tansu also returns the aborted ones (docs/tansu.md)
    assert plain_offsets == ([0, 1, 2, 4, 5, 7, 9, 10] if broker_kind == "tansu" else [0, 1, 2, 7, 9, 10])

    # The reader of a transactional log accepts one marker after a record without a re-read.
    records, checker, _ = _follow(bootstrap_servers, topic, drop=lambda m: False, transactional=True)
    assert checker is not None
    assert [m.offset() for m in records] == plain_offsets
    assert checker.stats.recovered == 0 and checker.stats.unresolved == 0
    hidden = sum(1 for a, b in itertools.pairwise(plain_offsets) if b - a > 2)
    assert checker.stats.rereads == checker.stats.proven_gaps == hidden  # aborted records hidden (Kafka) only

    # Checked as if no marker were allowed, every marker is re-read and proven empty: nothing delivered twice.
    records, checker, _ = _follow(bootstrap_servers, topic, drop=lambda m: False, transactional=False)
    assert checker is not None
    assert [m.offset() for m in records] == plain_offsets
    assert checker.stats.recovered == 0
    # each jump (a marker, or on Kafka marker + aborted records + marker) and the final marker
    assert checker.stats.proven_gaps == (4 if broker_kind == "tansu" else 3)
    assert checker.stats.rereads == checker.stats.proven_gaps

    # A skipped record after a marker is a jump of two: re-read and put back in its place.
    after_marker = next(b for a, b in itertools.pairwise(plain_offsets) if b - a == 2)
    records, checker, lossy = _follow(
        bootstrap_servers, topic, drop=drop_offsets_once({after_marker, plain_offsets[-1]}), transactional=True
    )
    assert checker is not None
    assert len(lossy.dropped) == 2
    assert [m.offset() for m in records] == plain_offsets
    assert checker.stats.recovered == 2


def test_a_record_skipped_inside_a_transaction_is_re_read_when_the_chain_breaks(
    bootstrap_servers: str, broker_kind: str
) -> None:
    """Issue 32: a skipped record followed by another of its transaction is a jump of one, like a marker.

    The offset rule alone loses it; a reader told how records chain re-reads
    the jump when the chain breaks there. A break across an aborted
    transaction (visible on Tansu) is re-read too, and proven empty.
    """
    topic = _topic(bootstrap_servers, DECISIONS_CONFIG)
    _produce_chain(bootstrap_servers, topic, [(["a", "b", "c", "d"], True), (["x", "y"], False), (["e", "f"], True)])
    plain, _, _ = _follow(bootstrap_servers, topic, drop=lambda m: False, transactional=None)
    plain_offsets = [m.offset() for m in plain]
    names = [m.value().split(b"/")[0].decode() for m in plain]
    assert names == (list("abcdxyef") if broker_kind == "tansu" else list("abcdef"))
    inner = plain_offsets[1]  # b: between a and c of one transaction

    # The offset rule alone takes the jump from a to c for a marker: b is lost.
    records, checker, lossy = _follow(bootstrap_servers, topic, drop=drop_offsets_once({inner}), transactional=True)
    assert checker is not None and lossy.dropped == [(topic, inner)]
    assert [m.offset() for m in records] == [o for o in plain_offsets if o != inner]

    # The chain says c does not follow a: the jump is re-read and b put back in its place.
    records, checker, lossy = _follow(
        bootstrap_servers, topic, drop=drop_offsets_once({inner}), transactional=True, follows=_chained
    )
    assert checker is not None and lossy.dropped == [(topic, inner)]
    assert [m.offset() for m in records] == plain_offsets
    assert checker.stats.recovered == 1 and checker.stats.unresolved == 0

    # Nothing skipped: only the break at the aborted transaction is re-read (on Kafka it is a wider jump anyway).
    records, checker, _ = _follow(bootstrap_servers, topic, drop=lambda m: False, transactional=True, follows=_chained)
    assert checker is not None
    assert [m.offset() for m in records] == plain_offsets
    assert checker.stats.rereads == checker.stats.proven_gaps == 1
    assert checker.stats.recovered == 0


def test_read_to_end_reads_a_transactional_log_without_re_reads(bootstrap_servers: str) -> None:
    from ordo.kernel.logread import GapStats

    topic = _topic(bootstrap_servers, DECISIONS_CONFIG)
    _produce_transactions(bootstrap_servers, topic, [(2, True), (3, True), (1, True)])
    stats = GapStats()
    records = list(read_to_end(_config(bootstrap_servers), topic, transactional=True, stats=stats))
    assert [m.value() for m in records] == [f"t{i}".encode() for i in range(6)]
    assert [m.offset() for m in records] == [0, 1, 3, 4, 5, 7]  # a commit marker after each transaction
    assert stats.rereads == 0
    tail = list(read_to_end(_config(bootstrap_servers), topic, start=4, transactional=True))
    assert [m.offset() for m in tail] == [4, 5, 7]


def test_read_to_end_through_a_kept_consumer_reads_log_after_log_and_stops_on_request(bootstrap_servers: str) -> None:
    """The arbiter's state loader reads every table's log with one consumer; ``stop`` ends a read early."""
    from confluent_kafka import Consumer

    first, second = (_topic(bootstrap_servers, DECISIONS_CONFIG) for _ in range(2))
    _produce_transactions(bootstrap_servers, first, [(2, True), (3, True)])
    _produce_transactions(bootstrap_servers, second, [(1, True)])
    config = {**_config(bootstrap_servers), "enable.partition.eof": True}
    consumer = Consumer(config)
    checker = GapChecker(config, transactional=True, consumer=consumer, name="kept")
    try:
        for topic, offsets in ((first, [0, 1, 3, 4, 5]), (second, [0]), (first, [3, 4, 5])):
            start = offsets[0]
            read = list(read_to_end({}, topic, start=start, transactional=True, reader=(consumer, checker)))
            assert [m.offset() for m in read] == offsets, topic
            assert consumer.assignment() == [] and checker.expected(topic) is None
        assert list(read_to_end({}, first, transactional=True, reader=(consumer, checker), stop=lambda: True)) == []
    finally:
        checker.close()
        consumer.close()


def test_a_gap_no_re_read_can_explain_is_held_back_and_re_read_later(
    bootstrap_servers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import confluent_kafka
    from confluent_kafka import KafkaError, TopicPartition

    topic = _topic(bootstrap_servers, INTENTS_CONFIG)
    _produce_plain(bootstrap_servers, topic, 10)
    config = _config(bootstrap_servers)
    real_class = confluent_kafka.Consumer
    main = real_class(config)
    lossy = LossyConsumer(main, drop_offsets_once({5}))
    broken = [True]  # while set, re-readers see nothing at all (not even the end of the partition)
    monkeypatch.setattr(
        confluent_kafka, "Consumer", lambda cfg: LossyConsumer(real_class(cfg), lambda m: broken[0], events=True)
    )
    checker = GapChecker(config, transactional=False, consumer=main, attempts=2, reread_timeout=0.3)
    lossy.assign([TopicPartition(topic, 0, 0)])
    checker.expect(topic, 0)
    delivered: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            first = lossy.poll(0.2)
            batch = checker.check([] if first is None else [first, *lossy.consume(100, 0)])
            if checker.stats.unresolved:
                broken[0] = False  # the broker recovers; the held-back gap must be re-read, not skipped
            ended = False
            for message in batch:
                if message.error() is None:
                    delivered.append(message.offset())
                elif message.error().code() == KafkaError._PARTITION_EOF and delivered[-1:] == [9]:
                    ended = True
            if ended:
                break
    finally:
        checker.close()
        main.close()
    assert checker.stats.unresolved >= 1
    assert delivered == list(range(10))  # nothing skipped, nothing twice
