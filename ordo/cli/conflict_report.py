"""Check a table's history against its conflict matrix, independently of the arbiter.

The demo (and anyone auditing a table) asks: for every pair of concurrent
transactions that really happened, did the arbiter do what the matrix file
says? This module answers from the catalog's history alone (read versions,
scopes, outcomes), never from the arbiter's state:

* a later transaction L is concurrent with an earlier accepted commit E when E
  was decided before L, E's ID version is above L's read version, and their
  scopes overlap (a whole-table scope overlaps everything; docs/conflicts.md);
* the expected cell is ``policy.resolve(class(E), class(L))`` from the policy
  CSV; L must be rejected with ``CONFLICT_LATER_FAILS`` iff some cell says
  ``later_fails`` (naming one of those E), else accepted with the rebase of
  one of its cells.

Decisions refused by checks other than the matrix (malformed, unknown table,
already-committed streaming batch, a hostile writer's file actions such as
``PATH_REUSED`` or ``INCOMPLETE_REWRITE``, ...) take no part. A compaction refused by
the lineage rule (``CONFLICT_COMPACTION_LINEAGE``, ``FILE_NOT_LIVE``, see
docs/conflicts.md) is reported as such, not as a matrix outcome.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ordo.arbiter.policy import REBASE_OF, Policy, Resolution, load_policy
from ordo.schemas import OP_CLASS, OpClass, Operation, Reason, Rebase
from ordo.schemas.operations import LINEAGE_REASONS, MATRIX_FAIL_REASONS

LATER_FAILS = Reason.CONFLICT_LATER_FAILS
# The reasons of a later_fails cell and of the lineage rule: the registry's (schemas.operations).
FAIL_REASONS = MATRIX_FAIL_REASONS

AGREE, DISAGREE, MASKED, LINEAGE = "agree", "DISAGREE", "masked", "lineage"


@dataclass(frozen=True, slots=True)
class Txn:
    """The fields of one decision this check needs (``consumer.models.DecisionRecord`` has them all)."""

    txn_id: str
    log_offset: int
    operation: Operation | None
    accepted: bool
    id_version: int | None
    read_version: int | None
    partitions: tuple[Mapping[str, str], ...] | None
    reason: str | None
    rebase: Rebase
    conflicting_version: int | None
    duplicate_of: int | None = None


@dataclass(frozen=True, slots=True)
class Pair:
    """One (earlier, later) pair of concurrent transactions with overlapping scopes."""

    earlier: Txn
    later: Txn
    cell: Resolution
    observed: str
    verdict: str  # agree, DISAGREE, masked (L failed on another pair), lineage (refused by the lineage rule)

    @property
    def classes(self) -> tuple[OpClass, OpClass]:
        """The matrix row and column."""
        assert self.earlier.operation is not None and self.later.operation is not None
        return OP_CLASS[self.earlier.operation], OP_CLASS[self.later.operation]


@dataclass(frozen=True)
class Report:
    """Every concurrent pair of a history and how it compares with the policy."""

    policy: Policy
    pairs: tuple[Pair, ...]
    disjoint: int  # concurrent by version but on disjoint partitions: never a conflict
    judged: int  # later transactions that had at least one concurrent earlier commit

    @property
    def agrees(self) -> bool:
        """True when no pair contradicts the matrix."""
        return all(p.verdict != DISAGREE for p in self.pairs)

    def by_cell(self) -> list[tuple[OpClass, OpClass, Resolution, list[Pair]]]:
        """Pairs grouped by (earlier class, later class), in matrix order."""
        groups: dict[tuple[OpClass, OpClass], list[Pair]] = {}
        for pair in self.pairs:
            groups.setdefault(pair.classes, []).append(pair)
        return [(e, la, self.policy.resolve(e, la), groups[(e, la)]) for (e, la) in sorted(groups)]


def _scope_key(partitions: Sequence[Mapping[str, str]] | None) -> frozenset[tuple[tuple[str, str], ...]] | None:
    if partitions is None:
        return None
    return frozenset(tuple(sorted(p.items())) for p in partitions)


def _overlap(a: Txn, b: Txn) -> bool:
    left, right = _scope_key(a.partitions), _scope_key(b.partitions)
    return left is None or right is None or bool(left & right)


def _observed(later: Txn) -> str:
    if later.accepted:
        return "accepted" if later.rebase is Rebase.NONE else f"accepted, {later.rebase.value.lower()}"
    return f"rejected, {later.reason}"


def check_history(history: Sequence[Txn], policy: Policy | str = "maxcompute") -> Report:
    """Compare every concurrent pair in ``history`` (any order; sorted by log offset here) with ``policy``."""
    matrix = load_policy(policy) if isinstance(policy, str) else policy
    ordered = sorted(history, key=lambda t: t.log_offset)
    committed: list[Txn] = []
    pairs: list[Pair] = []
    disjoint = judged = 0
    for later in ordered:
        if later.duplicate_of is not None or later.operation is None:
            continue
        if later.operation not in OP_CLASS:  # CREATE_TABLE: nothing is concurrent with it
            if later.accepted:
                committed.append(later)
            continue
        matrix_judged = later.accepted or later.reason in FAIL_REASONS or later.reason in LINEAGE_REASONS
        concurrent = [
            e
            for e in committed
            if e.operation in OP_CLASS
            and e.id_version is not None
            and later.read_version is not None
            and e.id_version > later.read_version
        ]
        overlapping = [e for e in concurrent if _overlap(e, later)]
        if matrix_judged:
            disjoint += len(concurrent) - len(overlapping)
        if matrix_judged and overlapping:
            judged += 1
            pairs.extend(_judge(matrix, later, overlapping))
        if later.accepted:
            committed.append(later)
    return Report(matrix, tuple(pairs), disjoint, judged)


def _judge(policy: Policy, later: Txn, earlier: list[Txn]) -> list[Pair]:
    assert later.operation is not None
    column = OP_CLASS[later.operation]
    cells = [(e, policy.resolve(OP_CLASS[e.operation], column)) for e in earlier if e.operation is not None]
    failing = {e.id_version for e, cell in cells if cell is Resolution.LATER_FAILS}
    rebases = {REBASE_OF[cell] for _, cell in cells if cell is not Resolution.LATER_FAILS}
    observed = _observed(later)
    result = []
    for e, cell in cells:
        if later.reason in LINEAGE_REASONS:
            verdict = LINEAGE if cell is Resolution.COMPACTION_COMPLETES and not failing else DISAGREE
        elif cell is Resolution.LATER_FAILS:
            ok = not later.accepted and later.reason in FAIL_REASONS and later.conflicting_version in failing
            verdict = AGREE if ok else DISAGREE
        elif failing:
            # L must fail on another pair; this one is masked (its success cell could not apply)
            ok = not later.accepted and later.reason in FAIL_REASONS and later.conflicting_version in failing
            verdict = MASKED if ok else DISAGREE
        else:
            verdict = AGREE if later.accepted and later.rebase in rebases else DISAGREE
        result.append(Pair(e, later, cell, observed, verdict))
    return result


def from_records(records: Sequence[object]) -> list[Txn]:
    """``Txn`` views of ``consumer.models.DecisionRecord``s (``Catalog.history``)."""
    return [
        Txn(
            txn_id=r.txn_id,  # type: ignore[attr-defined]
            log_offset=r.log_offset,  # type: ignore[attr-defined]
            operation=r.operation,  # type: ignore[attr-defined]
            accepted=r.accepted,  # type: ignore[attr-defined]
            id_version=r.id_version,  # type: ignore[attr-defined]
            read_version=r.read_version,  # type: ignore[attr-defined]
            partitions=r.partitions,  # type: ignore[attr-defined]
            reason=r.reason,  # type: ignore[attr-defined]
            rebase=r.rebase,  # type: ignore[attr-defined]
            conflicting_version=r.conflicting_version,  # type: ignore[attr-defined]
            duplicate_of=r.duplicate_of,  # type: ignore[attr-defined]
        )
        for r in records
    ]


__all__ = ["AGREE", "DISAGREE", "LINEAGE", "MASKED", "Pair", "Report", "Txn", "check_history", "from_records"]
