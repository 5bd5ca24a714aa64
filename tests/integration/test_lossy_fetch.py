"""Liveness on a broker whose fetches skip records: the arbiter re-reads, the commit client resubmits.

The lossy fetch is a test double (``tests.lossy.LossyConsumer``) around real
confluent_kafka consumers on the real broker, standing in for Tansu's fetch race
(docs/tansu.md): the record is stored, the consumer's position moves past it,
the reader never sees it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from ordo.producer import CommitClient
from ordo.schemas import CommitDecision, Outcome, decode, intents_topic
from ordo.services.stack import ManagedProcess
from ordo.settings import Settings
from tests.integration.test_arbiter_service import InProcessArbiter, check_log, create_intent, insert_intent
from tests.lossy import LossyConsumer, drop_offsets_once, late_arbiter_intents

pytestmark = pytest.mark.timeout(180)


def _wrap_consumers(
    monkeypatch: pytest.MonkeyPatch, choose: Callable[[dict[str, Any], int], Callable[[Any], bool] | None]
) -> list[LossyConsumer]:
    """Make ``confluent_kafka.Consumer`` lossy where ``choose(config, n)`` (n: consumers made so far) returns a drop."""
    import confluent_kafka

    real_class = confluent_kafka.Consumer
    made: list[LossyConsumer] = []
    count = 0

    def factory(config: dict[str, Any]) -> Any:
        nonlocal count
        consumer = real_class(config)
        drop = choose(config, count)
        count += 1
        if drop is None:
            return consumer
        lossy = LossyConsumer(consumer, drop)
        made.append(lossy)
        return lossy

    monkeypatch.setattr(confluent_kafka, "Consumer", factory)
    return made


def test_arbiter_decides_intents_its_live_fetch_skipped(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    table = "skipped"
    topic = intents_topic(settings.topic_prefix, table)
    arbiter_group = f"{settings.topic_prefix}.arbiter"
    # Lose intent offsets 2 (the newest record when fetched: only the end-of-partition event shows the gap)
    # and 4 for the arbiter's intents consumer (the first consumer it makes).
    lossy = _wrap_consumers(
        monkeypatch,
        lambda config, n: drop_offsets_once({2, 4}, topic) if config.get("group.id") == arbiter_group else None,
    )
    client = CommitClient(settings=settings, resubmit_after=300.0)  # no resubmit: the arbiter alone must find them
    try:
        with InProcessArbiter(settings) as running:
            decisions = [client.commit(create_intent(table), timeout=30)]
            for txn in ("a", "b", "c", "d", "e"):
                decisions.append(client.commit(insert_intent(table, txn, txn), timeout=30))
            assert running.error is None
            gaps = running.service.metrics.intent_gaps
            assert gaps.recovered == 2 and gaps.unresolved == 0, gaps
            assert running.service.metrics.snapshot()["intent_gaps"]["recovered"] == 2
        assert sorted(o for lc in lossy for _, o in lc.dropped if _ == topic) == [2, 4]
        assert [d.intent_offset for d in decisions] == [0, 1, 2, 3, 4, 5]
        assert all(d.outcome is Outcome.ACCEPTED and d.duplicate_of is None for d in decisions)
        assert [d.id_version for d in decisions] == [0, 1, 2, 3, 4, 5]
        assert client.resubmits == 0
        monkeypatch.undo()
        check_log(client.decisions(table), 6)
    finally:
        client.close()


def test_commit_client_takes_the_answer_to_its_resubmitted_intent(
    settings: Settings, arbiter: Callable[..., ManagedProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    arbiter()
    table = "answer"
    client_group = f"{settings.topic_prefix}.commit-client"

    def lose_first_answer(message: Any) -> bool:
        decision = decode(message.value() or b"")
        return isinstance(decision, CommitDecision) and decision.txn_id == "lost" and decision.duplicate_of is None

    # Every consumer of the client (its decision reader and the re-reader) loses the first decision of "lost":
    # only the resubmitted intent's answer can reach it.
    _wrap_consumers(
        monkeypatch,
        lambda config, n: lose_first_answer if str(config.get("group.id", "")).startswith(client_group) else None,
    )
    client = CommitClient(settings=settings, resubmit_after=1.0)
    try:
        client.commit(create_intent(table), timeout=30)
        began = time.monotonic()
        answer = client.commit(insert_intent(table, "lost", "1"), timeout=30)
        assert 0.9 < time.monotonic() - began < 20
        assert client.resubmits >= 1
        monkeypatch.undo()
        log = client.decisions(table)
    finally:
        client.close()
    first = next(d for d in log if d.txn_id == "lost")
    assert first.duplicate_of is None and first.outcome is Outcome.ACCEPTED and first.id_version == 1
    assert answer.duplicate_of == first.intent_offset
    assert (answer.outcome, answer.id_version, answer.time_version) == (
        first.outcome,
        first.id_version,
        first.time_version,
    )


def test_commit_client_resubmits_while_undecided_and_gets_the_first_decision(
    settings: Settings, arbiter: Callable[..., ManagedProcess]
) -> None:
    table = "late"
    client = CommitClient(settings=settings, resubmit_after=0.5)
    try:
        # The table's topics are created by the CREATE intent; decided only once an arbiter runs.
        future = client.submit(create_intent(table), timeout=60)
        deadline = time.monotonic() + 20
        while client.resubmits < 2:
            assert time.monotonic() < deadline, "no resubmit within 20 s"
            time.sleep(0.05)
        assert not future.done()
        arbiter()
        decision = future.result(timeout=60)
        assert decision.outcome is Outcome.ACCEPTED and decision.duplicate_of is None
        assert decision.intent_offset == 0 and decision.id_version == 0
        time.sleep(1.5)  # longer than the next resubmit interval: none may follow a known decision
        after = client.resubmits
        time.sleep(1.5)
        assert client.resubmits == after
        log = client.decisions(table)
    finally:
        client.close()
    assert len(log) == 1 + after, [(d.intent_offset, d.duplicate_of) for d in log]
    assert log[0].intent_offset == 0 and log[0].duplicate_of is None
    for repeat in log[1:]:
        assert repeat.duplicate_of == 0 and repeat.txn_id == decision.txn_id
        assert (repeat.outcome, repeat.id_version, repeat.time_version) == (
            decision.outcome,
            decision.id_version,
            decision.time_version,
        )


def test_no_resubmit_once_decided(settings: Settings, arbiter: Callable[..., ManagedProcess]) -> None:
    arbiter()
    table = "prompt"
    client = CommitClient(settings=settings, resubmit_after=0.5)
    try:
        client.commit(create_intent(table), timeout=30)
        for txn in ("a", "b", "c"):
            client.commit(insert_intent(table, txn, txn), timeout=30)
        when_decided = client.resubmits  # a slow first decision (table discovery) may have been resubmitted
        time.sleep(2.0)  # four resubmit intervals
        assert client.resubmits == when_decided
        log = client.decisions(table)
    finally:
        client.close()
    assert sum(1 for d in log if d.duplicate_of is None) == 4
    assert len(log) == 4 + when_decided  # every repeat was published before its decision was known


def test_consumer_materializes_decisions_its_live_fetch_skipped(
    settings: Settings,
    arbiter: Callable[..., ManagedProcess],
    commit_client: CommitClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    from ordo.consumer import Catalog
    from ordo.consumer.materializer import Materializer
    from ordo.schemas import decisions_topic
    from ordo.services.audit import read_partition

    arbiter()
    table = "materialized"
    commit_client.commit(create_intent(table), timeout=30)
    for txn in ("a", "b", "c", "d"):
        commit_client.commit(insert_intent(table, txn, txn), timeout=30)
    topic = decisions_topic(settings.topic_prefix, table)
    offsets = [o for o, _, _ in read_partition(settings, topic)]
    assert len(offsets) == 5
    lost = {offsets[1], offsets[-1]}  # one in the middle, and the newest (only the end event shows it)
    group = f"{settings.topic_prefix}.consumer."
    lossy = _wrap_consumers(
        monkeypatch,
        lambda config, n: (
            drop_offsets_once(lost, topic)
            if str(config.get("group.id", "")).startswith(group) and ".reread-" not in str(config["group.id"])
            else None
        ),
    )
    materializer = Materializer(settings, discovery_interval=0.2)
    thread = threading.Thread(target=materializer.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not (materializer.status.ready and materializer.status.applied_total >= 5):
            assert time.monotonic() < deadline, materializer.status.snapshot()
            time.sleep(0.05)
    finally:
        materializer.stop()
        thread.join(30)
    assert sorted(o for lc in lossy for _, o in lc.dropped) == sorted(lost)
    assert materializer.status.gaps.recovered == 2
    assert materializer.status.snapshot()["gaps"]["recovered"] == 2
    assert not materializer.status.broken
    catalog = Catalog(settings.catalog)
    try:
        assert catalog.head(table) == 4
        assert len(catalog.history(table)) == 5
    finally:
        catalog.close()


def test_commit_client_rereads_a_decision_its_fetch_skipped_inside_a_transaction(
    settings: Settings, arbiter: Callable[..., ManagedProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decision skipped between two records of one transaction is a jump of one offset, like a marker.

    The offset rule alone took it for a marker: the skipped decision was never
    read, and the records of the transaction before it were refused for want of
    a signature that vouches for them (the signed last record does not chain to
    them). Their commits then waited for a resubmit, or timed out without one.
    The hash chain tells the two apart: the reader re-reads and answers every
    commit at once.
    """
    from ordo.schemas import decisions_topic
    from ordo.services.audit import read_partition

    table = "chained"
    client_group = f"{settings.topic_prefix}.commit-client"
    left = {"c"}

    def lose_inner_decision(message: Any) -> bool:
        decision = decode(message.value() or b"")
        if isinstance(decision, CommitDecision) and decision.txn_id in left:
            left.discard(decision.txn_id)
            return True
        return False

    # The live decision reader loses c's decision once; its re-reader (group ``...reread-N``) does not.
    lossy = _wrap_consumers(
        monkeypatch,
        lambda config, n: lose_inner_decision if config.get("group.id") == client_group else None,
    )
    client = CommitClient(settings=settings, resubmit_after=300.0)  # no resubmit: the reader alone must find it
    try:
        # Published before the arbiter starts, the six intents are decided in one transaction.
        futures = {"create": client.submit(create_intent(table), timeout=60)}
        for txn in ("a", "b", "c", "d", "e"):
            futures[txn] = client.submit(insert_intent(table, txn, txn), timeout=60)
        client._producer.flush(30)
        began = time.monotonic()
        arbiter()
        answers = {txn: future.result(timeout=60) for txn, future in futures.items()}
        waited = time.monotonic() - began
        monkeypatch.undo()
        log = client.decisions(table)
    finally:
        client.close()
    assert [o for lc in lossy for _, o in lc.dropped] == [3], "c's decision (offset 3) was not lost as planned"
    offsets = [o for o, _, _ in read_partition(settings, decisions_topic(settings.topic_prefix, table))]
    assert offsets[:6] == [0, 1, 2, 3, 4, 5], f"not one transaction: decisions at {offsets}"
    assert all(d.outcome is Outcome.ACCEPTED and d.duplicate_of is None for d in answers.values())
    assert [answers[t].intent_offset for t in ("create", "a", "b", "c", "d", "e")] == [0, 1, 2, 3, 4, 5]
    assert waited < 30, f"the answers took {waited:.1f} s"
    assert client.resubmits == 0
    assert client.gap_stats.recovered == 1, client.gap_stats
    check_log(log, 6)


def test_arbiter_woken_from_idle_waits_for_intents_that_come_late_after_its_assignment(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: an arbiter woken by its doorbell must read what woke it, however long the first fetch takes.

    It went back to sleep after ``IDLE_AFTER`` seconds without a record since
    the wake-up. On a loaded machine the first records after the intents
    consumer's ``assign()`` took up to 1.1 s, so it slept again before reading
    them, the doorbell rang at once, and so on: minutes without a decision while
    every writer waited and timed out. Asleep only once every intents log was
    read to its end, it reads them, however late they come.
    """
    from ordo.arbiter.intents import IDLE_AFTER

    late = late_arbiter_intents(monkeypatch, settings.topic_prefix, delay=1.5 * IDLE_AFTER)
    table = "woken"
    client = CommitClient(settings=settings, resubmit_after=300.0)
    try:
        with InProcessArbiter(settings) as running:
            metrics = running.service.metrics
            client.commit(create_intent(table), timeout=30)
            for round_, txn in enumerate(("a", "b")):
                deadline = time.monotonic() + 20
                while metrics.sleeps <= round_:  # idle: the doorbell watches the intents logs
                    assert time.monotonic() < deadline and running.error is None, "the arbiter never went idle"
                    time.sleep(0.05)
                assignments = late[0].assignments
                began = time.monotonic()
                decision = client.commit(insert_intent(table, txn, txn, read_version=round_), timeout=20)
                waited = time.monotonic() - began
                assert decision.outcome is Outcome.ACCEPTED and decision.duplicate_of is None
                assert waited < 10, f"the decision took {waited:.1f} s"
                assert late[0].assignments == assignments + 1, "not woken exactly once"
            assert running.error is None
    finally:
        client.close()
