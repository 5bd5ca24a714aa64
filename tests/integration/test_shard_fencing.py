"""Arbiters with overlapping ``--shard`` settings fence each other on every table both own (real broker).

0/1 and 1/2 both own the tables of shard 1 of 2; 0/2 and 2/3 both own a table
whose crc32 is even and 2 mod 3. The arbiter that takes a shared table later
wins it: the elder is fenced at its next decision for that table and exits
(code 3), and every intent of the table is decided exactly once.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from ordo.arbiter.service import shard_of
from ordo.producer import CommitClient
from ordo.services.stack import ManagedProcess
from ordo.settings import Settings
from tests.fencing import take_over

from .test_arbiter_service import Writers, check_futures, check_log, create_intent, wait_until

pytestmark = pytest.mark.timeout(360)


def shared_table(elder: tuple[int, int], newer: tuple[int, int]) -> str:
    """A table name both shard settings own."""
    for i in range(1000):
        name = f"shared{i}"
        if shard_of(name, elder[1]) == elder[0] and shard_of(name, newer[1]) == newer[0]:
            return name
    raise AssertionError("no table name lands in both shards")


@pytest.mark.parametrize(("elder", "newer"), [((0, 1), (1, 2)), ((0, 2), (2, 3))])
def test_overlapping_shards_fence_each_other_on_a_shared_table(
    arbiter: Callable[..., ManagedProcess],
    commit_client: CommitClient,
    settings: Settings,
    elder: tuple[int, int],
    newer: tuple[int, int],
) -> None:
    table = shared_table(elder, newer)
    # Tansu drops a fenced producer's EndTxn connection: a short commit timeout (docs/tansu.md).
    first = arbiter(elder, args=["--commit-timeout", "5"])
    commit_client.commit(create_intent(table), timeout=30)
    writers = Writers(commit_client, table, threads=2, per_thread=100_000, pause=0.005).start()
    try:
        wait_until(lambda: writers.done_count() >= 50, 60, "the elder arbiter to decide")
        # The elder, frozen mid-transaction while the newer takes the table, wakes up fenced (tests/fencing.py).
        second = take_over(first, lambda: arbiter(newer))
        assert first.wait(timeout=40) == 3, "the elder arbiter must be fenced on the shared table"
        # Fenced at a produce ("fenced on table T"), or at the end of its transaction Tansu never answers: the
        # commit, when its batch's last (signed) decision is produced only at commit, or the abort that follows a
        # produce whose connection Tansu dropped ("could not commit/abort the transaction of table T").
        tail = first.tail(5)
        unended = re.search(rf"could not (commit|abort) the transaction of table {table}\b", tail)
        assert f"fenced on table {table}" in tail or unended, tail
        decided = writers.done_count()
        wait_until(lambda: writers.done_count() >= decided + 50, 60, "the newer arbiter to continue")
    finally:
        writers.stop()
    answers = writers.join()
    assert second.running
    log = commit_client.decisions(table)
    check_log(log, len(answers) + 1 + commit_client.resubmits)  # an overdue intent is published again
    check_futures(answers, log)
