"""Operation metrics (0.5) in the pure core: a writer's claim, checked as hostile input.

Only a MERGE (an UPDATE intent) may claim metrics: exactly its three row counts, each in 0..2**62, together at
most the records of the files it adds. Everything else a history shows is derived from the files.
"""

from __future__ import annotations

import pytest

from ordo.arbiter.core import evaluate_record, rebuild
from ordo.schemas import CommitIntent, Operation, Reason, encode
from ordo.schemas.models import MAX_METRICS, MAX_VERSION
from ordo.schemas.operations import MERGE_METRICS, REGISTRY, delta_operation

from .helpers import Table


def merge(inserted: int, updated: int, deleted: int) -> dict[str, int]:
    return dict(zip(MERGE_METRICS, (inserted, updated, deleted), strict=True))


def test_a_merges_metrics_are_carried_into_its_accepted_decision() -> None:
    table = Table()
    claimed = merge(12, 5, 3)  # 20 rows in two files of 10 records
    decision = table.submit(table.intent(Operation.UPDATE, 0, n=2, operation_metrics=claimed))
    assert decision.accepted, decision.message
    assert decision.operation_metrics == claimed
    assert delta_operation(decision.operation, decision.operation_metrics) == "MERGE"  # type: ignore[arg-type]


def test_decisions_without_metrics_have_none_and_keep_delta_names() -> None:
    table = Table()
    for operation in (Operation.INSERT_INTO, Operation.UPDATE, Operation.DELETE, Operation.INSERT_OVERWRITE):
        decision = table.commit(operation)
        assert decision.operation_metrics == {}
        assert delta_operation(operation, {}) == REGISTRY[operation].delta_name


@pytest.mark.parametrize(
    ("operation", "metrics", "says"),
    [
        (Operation.INSERT_INTO, {"numOutputRows": 10}, "INSERT_INTO claims no metric, not ['numOutputRows']"),
        (Operation.DELETE, {"numDeletedRows": 1}, "DELETE claims no metric"),
        (Operation.UPDATE, {"numUpdatedRows": 1}, "UPDATE may claim only ['numTargetRowsInserted'"),
        (Operation.UPDATE, {**merge(1, 1, 1), "numSourceRows": 3}, "not ['numSourceRows']"),
        (Operation.UPDATE, {"numTargetRowsInserted": 1}, "['numTargetRowsUpdated', 'numTargetRowsDeleted'] missing"),
        (Operation.UPDATE, merge(1, -1, 0), "metric numTargetRowsUpdated is -1"),
        (Operation.UPDATE, merge(MAX_VERSION + 1, 0, 0), f"numTargetRowsInserted is {MAX_VERSION + 1}"),
        (Operation.UPDATE, merge(5, 5, 1), "count 11 changed rows"),  # one file of 10 records
        (Operation.MINOR_COMPACT, merge(0, 0, 0), "MINOR_COMPACT claims no metric"),
    ],
)
def test_bad_claims_are_rejected_invalid_metrics_naming_what_is_wrong(
    operation: Operation, metrics: dict[str, int], says: str
) -> None:
    table = Table()
    table.commit(Operation.INSERT_INTO)
    before = table.state.head_version
    decision = table.submit(table.intent(operation, before, operation_metrics=metrics))
    assert (decision.accepted, decision.reason) == (False, Reason.INVALID_METRICS)
    assert says in (decision.message or ""), decision.message
    assert decision.operation_metrics == {}  # a rejection carries none
    assert table.state.head_version == before


def test_create_table_may_claim_no_metric() -> None:
    table = Table()
    decision = table.submit(
        CommitIntent(
            txn_id="c2", table="t", operation=Operation.CREATE_TABLE, read_version=0, operation_metrics={"a": 1}
        )
    )
    assert (decision.reason, decision.message) == (Reason.INVALID_METRICS, "CREATE_TABLE claims no metric, not ['a']")


def test_too_many_metrics_or_an_empty_name_are_malformed_before_the_core() -> None:
    """The model bounds what an intent can carry (at most MAX_METRICS names of 1..256 characters)."""
    table = Table()
    base = table.intent(Operation.UPDATE, 0)
    for metrics in ({f"m{i}": 0 for i in range(MAX_METRICS + 1)}, {"": 0}):
        data = encode(base.model_copy(update={"operation_metrics": metrics}))
        decision = evaluate_record(table.state, data, 5_000, 9)
        assert decision.reason == Reason.MALFORMED_INTENT and "operation_metrics" in (decision.message or "")


def test_the_decision_is_a_pure_function_of_state_and_intent() -> None:
    """The same intents on the same state give byte-identical decisions (metrics included), and an arbiter
    rebuilt from the log decides the next one as the first did."""
    tables = Table(), Table()
    for table in tables:
        table.submit(table.intent(Operation.UPDATE, 0, txn="m1", operation_metrics=merge(4, 4, 2)))
        table.submit(table.intent(Operation.UPDATE, 1, txn="m2", operation_metrics=merge(4, 4, 3)))  # 11 > 10
    first, second = ([encode(d) for d in t.decisions] for t in tables)
    assert first == second
    assert [d.reason for d in tables[0].decisions] == [None, None, Reason.INVALID_METRICS]
    rebuilt = rebuild("t", first)
    nxt = tables[0].intent(Operation.UPDATE, 1, txn="m3", operation_metrics=merge(1, 0, 0))
    assert encode(evaluate_record(rebuilt, encode(nxt), 9_000, 3)) == encode(
        evaluate_record(tables[0].state, encode(nxt), 9_000, 3)
    )
