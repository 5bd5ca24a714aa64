"""Audit replay and the hash chain: a faithful log verifies; every kind of tampering is reported."""

from __future__ import annotations

import pytest

from ordo.arbiter.core import apply, evaluate_record, new_state
from ordo.arbiter.replay import DecisionRecord, IntentRecord, replay, verify_chain
from ordo.schemas import CommitIntent, Operation, encode

from .helpers import Table, metadata


def history() -> tuple[list[IntentRecord], list[DecisionRecord]]:
    table = Table()  # only used to build realistic intents
    intents = [
        CommitIntent(txn_id="c", table="t", operation=Operation.CREATE_TABLE, read_version=0, metadata=metadata())
    ]
    for i in range(6):
        intents.append(table.intent(Operation.INSERT_INTO, 0 if i % 2 else i, f"p{i % 3}", txn=f"w{i}"))
    records = [IntentRecord(offset, 1_000 + offset, encode(intent)) for offset, intent in enumerate(intents)]
    records.insert(3, IntentRecord(len(records), 5_000, b"not avro"))
    records = [IntentRecord(i, r.timestamp, r.value) for i, r in enumerate(records)]
    state = new_state("t")
    log = []
    for record in records:
        decision = evaluate_record(state, record.value, record.timestamp, record.offset)
        data = encode(decision)
        apply(state, decision, data)
        log.append(DecisionRecord(len(log), data))
    return records, log


def test_a_faithful_log_replays_exactly() -> None:
    intents, log = history()
    report = replay("t", intents, log)
    assert report.ok, report.divergences
    assert report.matched == len(intents) == len(log)


def test_a_lagging_arbiter_is_pending_not_divergent() -> None:
    intents, log = history()
    report = replay("t", intents, log[:-2])
    assert report.ok and report.pending == 2


def _edited(log: list[DecisionRecord], index: int) -> list[DecisionRecord]:
    from ordo.schemas import decode

    decision = decode(log[index].value)
    forged = decision.model_copy(update={"message": "forged", "writer": "mallory"})
    return [*log[:index], DecisionRecord(log[index].offset, encode(forged)), *log[index + 1 :]]


@pytest.mark.parametrize(
    ("tamper", "kind"),
    [
        (lambda log: _edited(log, 2), "edited"),
        (lambda log: log[:2] + log[3:], "dropped"),
        (lambda log: [*log[:2], log[3], log[2], *log[4:]], "reordered"),
        (lambda log: [*log[:2], log[5], *log[2:]], "injected"),
    ],
    ids=["edited", "dropped", "reordered", "injected"],
)
def test_tampering_is_reported_with_its_offset(tamper, kind: str) -> None:
    intents, log = history()
    forged = tamper(log)
    report = replay("t", intents, forged)
    assert not report.ok
    kinds = {d.kind for d in report.divergences}
    assert kind in kinds, report.divergences
    assert any(d.decision_offset is not None for d in report.divergences)
    assert list(verify_chain(forged)), "the hash chain alone must also reveal it"


def test_chain_of_a_faithful_log_is_intact() -> None:
    _, log = history()
    assert list(verify_chain(log)) == []


def test_verify_log_checks_every_invariant_of_the_one_fold() -> None:
    """``--verify`` reads the log with the readers' invariants: CREATE first, a time version iff data changes."""
    from ordo.arbiter.replay import verify_log
    from ordo.schemas import decode

    _, log = history()
    assert verify_log("t", log) == []
    headless = [DecisionRecord(r.offset, r.value) for r in log[1:]]
    first = verify_log("t", headless)[:2]
    assert [(d.kind, d.decision_offset) for d in first] == [("chain", 1), ("dropped", 1)], first
    accepted = next(i for i, r in enumerate(log) if i > 0 and decode(r.value).accepted)
    timeless = decode(log[accepted].value).model_copy(update={"time_version": None})
    edited = [*log[:accepted], DecisionRecord(log[accepted].offset, encode(timeless)), *log[accepted + 1 :]]
    problems = verify_log("t", edited)
    assert ("edited", accepted) in [(d.kind, d.decision_offset) for d in problems], problems
    assert verify_log("u", log)[0].kind == "injected"  # another table's log
