"""The demo's conflict summary (``ordo.cli.conflict_report``) on histories made by the pure arbiter core.

The report reads only what the catalog's history holds; these tests check it
finds every concurrent pair, quotes the policy file's cell, agrees with the
real arbiter on all 36 cells, and flags a history the arbiter did not write.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from ordo.arbiter.policy import OpClass
from ordo.cli.conflict_report import AGREE, DISAGREE, MASKED, Txn, check_history
from ordo.schemas import CommitDecision, Operation, Outcome, Rebase

from .helpers import EVERY_CLASS_OPERATION as CLASS_OPERATION
from .helpers import Table

POLICY = Path(__file__).resolve().parents[2] / "ordo" / "arbiter" / "policies" / "maxcompute.csv"


def matrix() -> dict[tuple[str, str], str]:
    with POLICY.open() as handle:
        cells = {(r["earlier"], r["later"]): r["outcome"] for r in csv.DictReader(handle)}
    # The ALTER row and column are fixed by arbiter.policy, not listed in the file: every cell fails.
    return cells | {(e.name, la.name): "later_fails" for e in OpClass for la in OpClass if OpClass.ALTER in (e, la)}


def txns(decisions: list[CommitDecision]) -> list[Txn]:
    return [
        Txn(
            txn_id=d.txn_id,
            log_offset=i,
            operation=d.operation,
            accepted=d.outcome is Outcome.ACCEPTED,
            id_version=d.id_version,
            read_version=d.read_version,
            partitions=d.partitions,
            reason=d.reason,
            rebase=d.rebase,
            conflicting_version=d.conflicting_version,
            duplicate_of=d.duplicate_of,
        )
        for i, d in enumerate(decisions)
    ]


def concurrent_pair(earlier: OpClass, later: OpClass, later_dt: str = "a") -> Table:
    """Two files in partition a, then ``later`` staged at the head, ``earlier`` committed, ``later`` committed."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    table.commit(Operation.INSERT_INTO, "a")
    table.commit(Operation.INSERT_INTO, "b")
    read = table.state.head_version
    staged = table.intent(CLASS_OPERATION[later], read, later_dt)
    assert table.submit(table.intent(CLASS_OPERATION[earlier], read, "a")).accepted
    table.submit(staged)
    return table


@pytest.mark.parametrize("earlier", list(OpClass), ids=lambda c: c.name)
@pytest.mark.parametrize("later", list(OpClass), ids=lambda c: c.name)
def test_every_cell_agrees_with_the_arbiter(earlier: OpClass, later: OpClass) -> None:
    table = concurrent_pair(earlier, later)
    report = check_history(txns(table.decisions))
    assert len(report.pairs) == 1 and report.judged == 1
    pair = report.pairs[0]
    assert pair.classes == (earlier, later)
    assert pair.cell.value == matrix()[(earlier.name, later.name)]
    assert pair.verdict == AGREE, (pair.observed, pair.cell)
    assert report.agrees


def test_disjoint_partitions_make_no_pair() -> None:
    table = concurrent_pair(OpClass.INSERT, OpClass.INSERT, later_dt="b")
    report = check_history(txns(table.decisions))
    assert report.pairs == () and report.disjoint == 1 and report.agrees


def test_a_forged_outcome_is_a_disagreement() -> None:
    table = concurrent_pair(OpClass.INSERT, OpClass.INSERT)
    history = txns(table.decisions)
    assert not history[-1].accepted
    forged = [*history[:-1], dataclasses.replace(history[-1], accepted=True, id_version=6, reason=None)]
    report = check_history(forged)
    assert [p.verdict for p in report.pairs] == [DISAGREE] and not report.agrees

    table = concurrent_pair(OpClass.INSERT, OpClass.MINOR_COMPACT)
    history = txns(table.decisions)
    assert history[-1].rebase is Rebase.COMPACTION_COMPLETES
    wrong_rebase = [*history[:-1], dataclasses.replace(history[-1], rebase=Rebase.LATER_OVERWRITES)]
    assert not check_history(wrong_rebase).agrees


def test_a_success_cell_behind_a_failing_one_is_masked() -> None:
    """UPDATE after a MINOR (new data written) and an INSERT (later fails): rejected, the MINOR pair masked."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a")
    table.commit(Operation.INSERT_INTO, "a")
    read = table.state.head_version
    staged = table.intent(Operation.UPDATE, read, "a")
    table.submit(table.intent(Operation.MINOR_COMPACT, read, "a"))
    table.submit(table.intent(Operation.INSERT_INTO, read, "a"))
    decision = table.submit(staged)
    assert not decision.accepted
    report = check_history(txns(table.decisions))
    verdicts = {p.classes: p.verdict for p in report.pairs if p.later.txn_id == decision.txn_id}
    assert verdicts == {(OpClass.MINOR_COMPACT, OpClass.UPDATE): MASKED, (OpClass.INSERT, OpClass.UPDATE): AGREE}
    assert report.agrees
