"""Bad input: thousands of hostile intent records interleaved with valid traffic, through a real arbiter.

The records (``fuzzcases``) are produced straight to the table's intents topic
with a plain producer while two writers commit valid inserts through
``CommitClient``. Checked: the arbiter never stops; every hostile record gets
exactly one decision, a rejection with a stable reason code (the expected one
where the case determines it; a bit-flipped intent may still be valid and
accepted, and a record repeating a txn id gets that txn's answer again);
every valid intent is accepted with contiguous ID versions; and the whole
decisions log is exactly what the pure core derives from the intents log.

Kafka's default maximum message size is about 1 MB: a 1 MB intent is refused by
the producer itself (``MSG_SIZE_TOO_LARGE``), before anything reaches the log;
the test records that, and sends a 0.95 MB one instead.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from ordo.arbiter.core import Reason
from ordo.producer import CommitClient
from ordo.schemas import CommitDecision, Outcome, intents_topic
from ordo.services.stack import ManagedProcess
from ordo.settings import Settings

from . import figures
from .common import check_exactly_once, create_intent, first_decisions, insert_intent, read_logs, wait_until
from .fuzzcases import FuzzCase, cases, raw_intent

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(figures.pick(180, 900))]

FUZZ = figures.pick(1_000, 10_000)
SPREAD = figures.pick(3.0, 20.0)


def test_hostile_intents_get_reasoned_rejections_and_valid_traffic_is_unaffected(
    arbiter: Callable[..., ManagedProcess], settings: Settings, tmp_path: Path
) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer

    table = "fuzz"
    began = time.monotonic()
    process = arbiter(args=["--state-dir", str(tmp_path / "state")])
    client = CommitClient(settings=settings)
    valid: list[CommitDecision] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def write(index: int) -> None:
        seen = 0
        n = 0
        try:
            while not stop.is_set():
                decision = client.commit(insert_intent(table, f"valid{index}-{n}", f"v{index}", seen), timeout=60)
                valid.append(decision)
                seen = max(seen, decision.id_version or 0)
                n += 1
        except BaseException as exc:
            errors.append(exc)

    try:
        assert client.commit(create_intent(table), timeout=60).id_version == 0
        writers = [threading.Thread(target=write, args=(i,), daemon=True) for i in range(2)]
        for thread in writers:
            thread.start()
        producer = Producer(settings.kafka_config(**{"enable.idempotence": True, "linger.ms": 5}))
        topic = intents_topic(settings.topic_prefix, table)
        offsets: dict[int, FuzzCase] = {}
        failed: list[str] = []

        def delivered(case: FuzzCase) -> Callable[[object, object], None]:
            def report(error: object, message: object) -> None:
                if error is None:
                    offsets[message.offset()] = case  # type: ignore[attr-defined]
                else:
                    failed.append(f"{case.kind}: {error}")

            return report

        for i, case in enumerate(cases(table, FUZZ, seed=17)):
            while True:
                try:
                    producer.produce(topic, case.value, on_delivery=delivered(case))
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            if i % 50 == 49:
                time.sleep(SPREAD / (FUZZ / 50))  # spread over SPREAD seconds, between the valid writers' intents
        # A 1 MB intent: the client refuses it before it reaches the broker.
        too_big = raw_intent({"txn_id": "m" * 1_000_000, "table": table})
        with pytest.raises(KafkaException) as refused:
            producer.produce(topic, too_big)
        assert refused.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert producer.flush(60) == 0
        assert not failed, failed[:5]
        assert len(offsets) == FUZZ
        time.sleep(0.5)
        stop.set()
        for thread in writers:
            thread.join(90)
        assert not errors, errors[:3]

        def all_decided() -> bool:
            logs = read_logs(settings, table)
            return len(first_decisions(logs)[0]) == len(logs.intents)

        wait_until(all_decided, 120, "a decision for every record", interval=0.5)
    finally:
        stop.set()
        client.close()
    assert process.running, f"the arbiter stopped: {process.tail()}"
    logs = read_logs(settings, table)
    checked = check_exactly_once(logs)  # includes: the log is exactly the pure core's re-derivation
    reasons: Counter[str] = Counter()
    repeats = 0
    accepted_fuzz = 0
    for offset, case in offsets.items():
        decision = checked.first[offset]
        if decision.duplicate_of is not None:
            repeats += 1  # a txn id a bit-flipped record had taken already: the same answer again
            continue
        if decision.outcome is Outcome.ACCEPTED:
            assert case.may_accept, f"{case.kind} at offset {offset} was accepted"
            accepted_fuzz += 1
            continue
        assert decision.reason in Reason.ALL, decision
        assert decision.message, decision
        if case.reason is not None:
            assert decision.reason == case.reason, (
                f"{case.kind} at offset {offset}: {decision.reason} {decision.message}"
            )
        reasons[decision.reason] += 1
    assert valid and all(d.outcome is Outcome.ACCEPTED for d in valid), "a valid intent was not accepted"
    for decision in valid:
        assert checked.first[decision.intent_offset] == decision
    inside = [d for d in valid if min(offsets) < d.intent_offset < max(offsets)]
    assert len(inside) >= 5, "valid intents must be interleaved with the hostile ones"
    assert process.terminate(timeout=30) == 0
    stopped = next(line for line in process.log_text().splitlines() if "arbiter stopped:" in line)
    metrics = json.loads(stopped[stopped.index("{") :])
    assert metrics["internal_errors"] == 0, metrics
    figures.add("fuzz_cases", FUZZ)
    figures.add("intents_checked", checked.intents)
    figures.note(
        f"bad input: {FUZZ} hostile records + {len(valid)} valid commits; rejections by reason "
        f"{dict(reasons.most_common())}; {accepted_fuzz} bit-flipped intents still valid, {repeats} repeated txn ids; "
        f"1 MB intent refused by the client (MSG_SIZE_TOO_LARGE); arbiter never stopped, 0 internal errors, "
        f"{time.monotonic() - began:.1f} s"
    )
