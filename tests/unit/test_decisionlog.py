"""The one fold of a decisions log (``schemas.decisionlog``): every invariant by name, strict and collecting."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from ordo.arbiter.core import datetime_to_millis, log_head
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, chain_hash, decode, encode
from ordo.schemas.decisionlog import (
    GENESIS_HASH,
    BrokenLogError,
    LogHead,
    LogProblem,
    already_live,
    check,
    fold,
    not_live,
)

from .golden_log import RELEASES, decision_records, tables
from .helpers import Table


def genuine() -> tuple[Table, list[bytes]]:
    """A table's log as the arbiter writes it: create, inserts, a rejection, a compaction, an ALTER, an insert."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    table.commit(Operation.INSERT_INTO, "b")
    refused = table.submit(table.intent(Operation.MINOR_COMPACT, 2, "a", removed=("dt=a/nope-0.parquet",)))
    assert not refused.accepted, refused
    table.commit(Operation.MINOR_COMPACT, "a")
    table.commit(Operation.ALTER_TABLE, None)
    table.commit(Operation.INSERT_INTO, "a")
    return table, [encode(d) for d in table.decisions]


def records(values: list[bytes | None]) -> list[tuple[int, bytes | None]]:
    return list(enumerate(values))


def test_a_faithful_log_folds_to_the_head_the_arbiter_holds() -> None:
    table, values = genuine()
    folded = fold(LogHead("t"), records(values))
    assert folded.problems == []
    assert folded.head == log_head(table.state)  # the arbiter's state holds the same head


@pytest.mark.parametrize(("release", "table"), [(r, t) for r in RELEASES for t in tables(r)])
def test_every_golden_log_folds_without_a_problem(release: str, table: str) -> None:
    log = decision_records(release, table)
    folded = fold(LogHead(table), [(r.offset, r.value) for r in log])
    assert folded.problems == []
    assert folded.head.decisions == len(log) and folded.head.chain == chain_hash(log[-1].value or b"")


def _rechained(values: list[bytes], index: int, **changes: object) -> list[bytes]:
    """``values`` with the decision at ``index`` changed and still chained to the record before it."""
    decision = decode(values[index])
    assert isinstance(decision, CommitDecision)
    return [*values[:index], encode(decision.model_copy(update=changes)), *values[index + 1 :]]


def _decision(values: list[bytes], index: int) -> CommitDecision:
    decision = decode(values[index])
    assert isinstance(decision, CommitDecision)
    return decision


# Each corruption of the genuine log, and the kind the first broken record raises.
CORRUPTIONS: dict[str, tuple[Callable[[list[bytes]], list[bytes | None]], LogProblem]] = {
    "empty": (lambda v: [*v[:3], None], LogProblem.UNDECODABLE),
    "garbage": (lambda v: [*v[:3], b"\x00garbage"], LogProblem.UNDECODABLE),
    "intent": (
        lambda v: [
            *v[:3],
            encode(CommitIntent(txn_id="i", table="t", operation=Operation.INSERT_INTO, read_version=0)),
        ],
        LogProblem.NOT_DECISION,
    ),
    "other_table": (lambda v: _rechained(v, 3, table="u")[:4], LogProblem.WRONG_TABLE),
    "repeated": (lambda v: [*v[:4], v[3]], LogProblem.REPEATED_INTENT),
    "reordered": (lambda v: [*v[:4], v[2]], LogProblem.REORDERED),
    "chain": (lambda v: _rechained(v, 3, prev_hash=bytes(32))[:4], LogProblem.CHAIN),
    "no_prev_hash": (lambda v: _rechained(v, 3, prev_hash=None)[:4], LogProblem.CHAIN),
    "dropped": (lambda v: [*v[:2], v[3]], LogProblem.CHAIN),
    "incomplete": (lambda v: _rechained(v, 1, id_version=None)[:2], LogProblem.INCOMPLETE),
    "no_create": (lambda v: _rechained(v, 1, prev_hash=GENESIS_HASH)[1:2], LogProblem.NO_CREATE),
    "second_create": (
        lambda v: [
            *v[:3],
            encode(_decision(v, 0).model_copy(update={"prev_hash": chain_hash(v[2]), "intent_offset": 3})),
        ],
        LogProblem.SECOND_CREATE,
    ),
    "version_gap": (lambda v: _rechained(v, 2, id_version=5)[:3], LogProblem.VERSION_GAP),
    "version_reused": (lambda v: _rechained(v, 2, id_version=1)[:3], LogProblem.VERSION_REUSED),
    "time_missing": (lambda v: _rechained(v, 2, time_version=None)[:3], LogProblem.TIME_VERSION),
    "time_backwards": (
        lambda v: _rechained(v, 2, time_version=_decision(v, 1).time_version)[:3],
        LogProblem.TIME_VERSION,
    ),
    "time_on_compaction": (
        lambda v: _rechained(v, 4, time_version=_decision(v, 2).time_version + timedelta(days=1))[:5],  # type: ignore[operator]
        LogProblem.TIME_VERSION,
    ),
    "alter_without_metadata": (lambda v: _rechained(v, 5, metadata=None)[:6], LogProblem.NO_METADATA),
    "create_without_metadata": (lambda v: _rechained(v, 0, metadata=None)[:1], LogProblem.NO_METADATA),
    "partition": (
        lambda v: _rechained(
            v,
            1,
            added_files=(DataFile(path="dt=a/x-0.parquet", partition={"day": "a"}, record_count=1, size_bytes=1),),
        )[:2],
        LogProblem.PARTITION,
    ),
    "added_twice": (
        lambda v: _rechained(v, 1, added_files=_decision(v, 1).added_files * 2)[:2],
        LogProblem.ALREADY_LIVE,
    ),
    "removed_twice": (
        lambda v: _rechained(v, 4, removed_files=_decision(v, 4).removed_files * 2)[:5],
        LogProblem.NOT_LIVE,
    ),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_each_broken_invariant_is_raised_by_name_at_its_record(name: str) -> None:
    _, values = genuine()
    corrupt, kind = CORRUPTIONS[name]
    log = corrupt(values)
    head = LogHead("t")
    for offset, value in records(log[:-1]):
        head = check(head, value, offset).head
    with pytest.raises(BrokenLogError) as caught:
        check(head, log[-1], len(log) - 1)
    error = caught.value
    assert error.kind is kind, str(error)
    assert error.offset == len(log) - 1
    assert str(error).startswith(f"{kind.value}: ") and LogProblem.of(str(error)) is kind
    assert error.kind.skippable == (kind in (LogProblem.REPEATED_INTENT, LogProblem.REORDERED))


def test_a_strict_fold_skips_a_later_decision_for_a_decided_intent_and_goes_on() -> None:
    """The first decision for an intent offset is the decision: a repeat (any chain) is skipped, the log goes on."""
    _, values = genuine()
    repeat = encode(_decision(values, 2).model_copy(update={"prev_hash": bytes(32), "message": "late"}))
    log: list[bytes | None] = [*values[:4], repeat, values[2], *values[4:]]
    folded = fold(LogHead("t"), records(log))
    assert [(p.kind, p.offset) for p in folded.problems] == [
        (LogProblem.REORDERED, 4),
        (LogProblem.REORDERED, 5),
    ]
    assert folded.head == fold(LogHead("t"), records(list(values))).head


def test_a_strict_fold_raises_the_first_problem_that_is_not_skippable() -> None:
    _, values = genuine()
    with pytest.raises(BrokenLogError) as caught:
        fold(LogHead("t"), records([*values[:2], *values[3:]]))
    assert (caught.value.kind, caught.value.offset) == (LogProblem.CHAIN, 2)


def test_collecting_reports_every_problem_once_where_it_is() -> None:
    """A dropped record is a chain break at the next record and a version gap at the next commit, nothing after."""
    _, values = genuine()
    dropped = [*values[:2], *values[3:]]  # version 2 dropped; next: the rejection, then the compaction (version 3)
    folded = fold(LogHead("t"), records(dropped), collect=True)
    assert [(p.kind, p.offset) for p in folded.problems] == [(LogProblem.CHAIN, 2), (LogProblem.VERSION_GAP, 3)]
    gap = [*values[:1], *values[2:]]  # drop version 1 (an insert): its successor names version 2
    folded = fold(LogHead("t"), records(gap), collect=True)
    assert [(p.kind, p.offset) for p in folded.problems] == [(LogProblem.CHAIN, 1), (LogProblem.VERSION_GAP, 1)]
    broken = [*values[:2], b"junk", *values[2:]]  # an undecodable record: the chain runs on around it
    folded = fold(LogHead("t"), records(broken), collect=True)
    assert [(p.kind, p.offset) for p in folded.problems] == [(LogProblem.UNDECODABLE, 2)]


def test_a_record_breaking_both_time_rules_is_one_time_version_problem_naming_both() -> None:
    """A compaction carrying a time version that does not increase: one problem (a verdict names each kind once)."""
    _, values = genuine()
    earlier = _decision(values, 1).time_version
    log = _rechained(values, 4, time_version=earlier)[:5]
    folded = fold(LogHead("t"), records(list(log)), collect=True)
    assert [(p.kind, p.offset) for p in folded.problems] == [(LogProblem.TIME_VERSION, 4)]
    assert "carries a time version" in folded.problems[0].message
    assert "does not increase" in folded.problems[0].message


def test_a_head_from_a_checkpoint_continues_the_fold() -> None:
    """A reader resuming mid-log (a checkpoint, a catalog) folds the tail from the head it kept."""
    table, values = genuine()
    middle = fold(LogHead("t"), records(list(values[:4]))).head
    tail = fold(middle, [(i, v) for i, v in enumerate(values) if i >= 4])
    assert tail.problems == [] and tail.head == fold(LogHead("t"), records(list(values))).head
    assert tail.head.time_ms == datetime_to_millis(table.decisions[-1].time_version)  # type: ignore[arg-type]


def test_the_liveness_errors_of_a_reader_share_the_kinds() -> None:
    _, values = genuine()
    compaction = _decision(values, 4)
    error = not_live(compaction, 0, 4)
    assert error.kind is LogProblem.NOT_LIVE and error.intent_offset == compaction.intent_offset
    assert "only 0 of them are live" in str(error)
    error = already_live(compaction, "'dt=a/x.parquet'", 4)
    assert error.kind is LogProblem.ALREADY_LIVE and LogProblem.of(str(error)) is LogProblem.ALREADY_LIVE
    assert LogProblem.of("hash chain broken: ...") is None and LogProblem.of(None) is None


def test_the_arbiters_rebuild_folds_with_the_same_checks() -> None:
    """``arbiter.core.rebuild``: the live state again; a repeat skipped; a broken log raises by kind, never KeyError."""
    from ordo.arbiter.checkpoint import states_equal
    from ordo.arbiter.core import rebuild

    table, values = genuine()
    assert states_equal(rebuild("t", values), table.state)
    assert states_equal(rebuild("t", [*values[:4], values[2], *values[4:]]), table.state)
    compaction = _decision(values, 4)
    for changes, kind in (
        ({"removed_files": ("dt=a/nope-0.parquet",)}, LogProblem.NOT_LIVE),
        ({"added_files": _decision(values, 2).added_files}, LogProblem.ALREADY_LIVE),  # live in dt=b
        ({"prev_hash": None}, LogProblem.CHAIN),
    ):
        broken = [*values[:4], encode(compaction.model_copy(update=changes))]
        with pytest.raises(BrokenLogError) as caught:
            rebuild("t", broken)
        assert (caught.value.kind, caught.value.offset) == (kind, 4), caught.value
