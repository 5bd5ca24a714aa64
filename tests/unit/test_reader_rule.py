"""Several writers, one decisions log: at each position the first record a trusted signature vouches for that links
to the head wins (docs/log-format.md, "Several writers: the first vouched record wins").

A log written without Kafka transactions (``ORDO_DECISIONS_TRANSACTIONS=false``) can hold twin arbiters' records
interleaved, and a restart's re-decided copies of an unvouched tail. Every reader must take the same history from
it, skip and count the rest, and never fail.
"""

from __future__ import annotations

import struct

import pytest

from ordo.arbiter.replay import DecisionRecord, authenticate
from ordo.schemas import chain_hash, decode, encode
from ordo.schemas.decisionlog import GENESIS_HASH, LogHead, LogProblem, fold
from ordo.schemas.signing import EPOCH_HEADER, ChainVerifier, Signer, Trust, epoch_of

from .test_replay import history


def faithful() -> list[bytes]:
    """The record bytes of one arbiter's history (8 decisions)."""
    return [r.value for r in history()[1]]


def batches(values: list[bytes], cuts: list[int], signer: Signer | None) -> list[tuple[bytes, bytes | None]]:
    """``values`` written in batches ending before each index of ``cuts`` (and at the end), the last of each
    signed: what one writer produces."""
    out = []
    for index, value in enumerate(values):
        last = index + 1 in cuts or index == len(values) - 1
        out.append((value, signer.header("t", value) if last and signer is not None else None))
    return out


def as_log(records: list[tuple[bytes, bytes | None]]) -> list[DecisionRecord]:
    return [DecisionRecord(offset, value, signature) for offset, (value, signature) in enumerate(records)]


def read(log: list[DecisionRecord], trust: Trust) -> tuple[list[DecisionRecord], list[int]]:
    """What a reader from offset 0 takes (in order) and the offsets it refuses, the end-of-log audit included."""
    verifier: ChainVerifier[DecisionRecord] = ChainVerifier("t", trust)
    taken: list[DecisionRecord] = []
    refused: list[int] = []
    for record in log:
        released, refusals = verifier.push(record.offset, record.value, record.signature, record)
        taken += released
        refused += [r.offset for r in refusals]
    refused += [r.offset for r in verifier.unvouched()]
    return taken, sorted(refused)


def folded(values: list[bytes]) -> LogHead:
    result = fold(LogHead("t"), enumerate(values))
    assert all(p.kind.skippable for p in result.problems)
    return result.head


@pytest.fixture
def signer() -> Signer:
    return Signer.generate()


def test_twins_interleaved_copies_give_every_reader_the_one_history(signer: Signer) -> None:
    values = faithful()
    a = batches(values, [3, 6], signer)  # twin A: batches of 3
    b = batches(values, [2, 4, 6], signer)  # twin B, from the same head: other batch ends, the same bytes
    merged: list[tuple[bytes, bytes | None]] = []
    for pair in zip(a, b, strict=True):  # the worst interleaving: every record twice, alternately
        merged += pair
    log = as_log(merged)
    taken, refused = read(log, Trust.of([signer.public_raw]))
    assert [r.value for r in taken] == values, "readers take the history once, in chain order"
    assert len(refused) == len(values), "every copy is refused (counted), none fails the reader"
    assert folded([r.value for r in taken]) == folded(values)
    _, problems = authenticate("t", log, Trust.of([signer.public_raw]))
    assert problems == [], "the audit does not report exact copies"


def test_a_valid_record_that_loses_its_position_is_refused_and_the_winner_kept(signer: Signer) -> None:
    values = faithful()
    # A different decision for position 5, linking to the same head and validly signed: the twin wrote it after
    # the winner's signature took the position (or with different rules: it is not a copy).
    loser_model = decode(values[5]).model_copy(update={"message": "the twin's answer"})
    loser = encode(loser_model)
    assert loser_model.prev_hash == chain_hash(values[4]) and loser != values[5]
    honest = batches(values, [6], signer)  # records 0-5 vouched by record 5's signature, then 6-7
    log = as_log([*honest[:6], (loser, signer.header("t", loser)), *honest[6:]])
    taken, refused = read(log, Trust.of([signer.public_raw]))
    assert [r.value for r in taken] == values
    assert refused == [6], "the losing record is refused (not chained), the reader goes on"
    # Vouched first, the same record wins instead, and the honest one loses: first vouched, not first written.
    log = as_log([*honest[:5], (loser, signer.header("t", loser)), *honest[5:]])
    taken, refused = read(log, Trust.of([signer.public_raw]))
    assert [r.value for r in taken] == [*values[:5], loser]
    assert refused == [6, 7, 8], "the honest record and those chained to it lose, and nothing fails"


def test_an_unvouched_tail_is_never_taken_until_vouched_and_its_rewrite_vouches_for_the_first_copies(
    signer: Signer,
) -> None:
    values = faithful()
    trust = Trust.of([signer.public_raw])
    head = batches(values[:4], [], signer)  # records 0-3, record 3 signed
    cut = [(v, None) for v in values[4:7]]  # a batch cut short: its signed last record never written
    log = as_log([*head, *cut])
    taken, refused = read(log, trust)
    assert [r.value for r in taken] == values[:4], "a signature-requiring reader never takes the unvouched tail"
    assert refused == [4, 5, 6], "at the end of the log the tail is refused (no_signature)"
    # The restart folds records 0-3 only, resumes at intent 4 and decides the same bytes again.
    rewrite = batches(values[4:], [], signer)
    log = as_log([*head, *cut, *rewrite])
    taken, refused = read(log, trust)
    assert [r.value for r in taken] == values
    assert [r.offset for r in taken] == [0, 1, 2, 3, 4, 5, 6, 10], "the first copies are released, where they are"
    assert refused == [7, 8, 9], "the rewritten copies are refused"
    assert authenticate("t", log, trust)[1] == []


def test_a_twins_tail_vouched_after_another_signature_took_its_position_is_refused(signer: Signer) -> None:
    values = faithful()
    trust = Trust.of([signer.public_raw])
    twin_tail = [(values[4], None), (values[5], None)]
    other = decode(values[4]).model_copy(update={"message": "other"})
    other_bytes = encode(other)
    log = as_log(
        [
            *batches(values[:4], [], signer),
            *twin_tail,  # the twin's batch, unsigned so far
            (other_bytes, signer.header("t", other_bytes)),  # another writer's record takes position 4
            (values[6], signer.header("t", values[6])),  # the twin's signature arrives: its walk is gone
        ]
    )
    taken, refused = read(log, trust)
    assert [r.value for r in taken] == [*values[:4], other_bytes]
    assert refused == [4, 5, 7]


def test_a_reader_without_signatures_skips_the_copies_and_folds_the_same_head(signer: Signer) -> None:
    values = faithful()
    merged = [v for pair in zip(values, values, strict=True) for v in pair]
    taken, refused = read(as_log([(v, None) for v in merged]), Trust(required=False))
    result = fold(LogHead("t"), [(r.offset, r.value) for r in taken])
    assert result.head == folded(values)
    assert {p.kind for p in result.problems} == {LogProblem.REPEATED_INTENT}
    assert len(result.problems) == len(values) and refused == []


def test_the_rule_is_a_no_op_on_a_log_without_duplicates(signer: Signer) -> None:
    values = faithful()
    log = as_log(batches(values, [2, 5], signer))
    taken, refused = read(log, Trust.of([signer.public_raw]))
    assert taken == log and refused == []
    assert folded(values).chain == chain_hash(values[-1]) != GENESIS_HASH


def test_the_epoch_header_is_read_only_when_well_formed() -> None:
    assert epoch_of([(EPOCH_HEADER, struct.pack(">Q", 12345))]) == 12345
    assert epoch_of([("ordo-sig", b"x" * 72), (EPOCH_HEADER, struct.pack(">Q", 7))]) == 7
    assert epoch_of([(EPOCH_HEADER, b"short")]) is None
    assert epoch_of(None) is None and epoch_of([]) is None
