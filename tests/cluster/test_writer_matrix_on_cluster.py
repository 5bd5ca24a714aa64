"""The writer matrix (tests/e2e/test_writer_matrix.py) on the cluster with its table on S3: the cells that run every
operation once.

Each operation (INSERT OVERWRITE, TRUNCATE, INSERT INTO, UPDATE, DELETE,
minor and major compaction, CLUSTER BY) stages in one of two overlapping
transactions of a cell; four cells hold all eight, with four different
outcomes (the later overwrites; the later fails; new data written under a
finished rewrite; a compaction completing over another). The matrix's own setup, steps, model and
checks run here unchanged, with the Spark session and settings of the
cluster topology and the table at ``s3://lake/<prefix>/matrix``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.conftest import Topology
from tests.e2e.test_writer_matrix import CELLS, EXPECTED, Model, Rows, make_step, run_cell, set_up_matrix

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.timeout(600)]

EVERY_OPERATION_ONCE = [
    ("OVERWRITE", "OVERWRITE"),
    ("UPDATE", "UPDATE"),
    ("CLUSTER", "INSERT"),
    ("MINOR_COMPACT", "MAJOR_COMPACT"),
]


def operations(cells: list[tuple[str, str]]) -> list[str]:
    """The operations the cells stage (a class is INSERT OVERWRITE or TRUNCATE, UPDATE or DELETE by its role)."""
    roles = [(cls, role) for earlier, later in cells for cls, role in ((earlier, "earlier"), (later, "later"))]
    return [make_step(None, cls, role, "p", Rows(True)).label for cls, role in roles]


def test_the_subset_stages_every_operation_of_the_matrix_once() -> None:
    assert sorted(operations(EVERY_OPERATION_ONCE)) == sorted(set(operations(CELLS)))
    assert len({EXPECTED[cell] for cell in EVERY_OPERATION_ONCE}) == len(EVERY_OPERATION_ONCE)


@pytest.fixture(scope="module")
def cluster_matrix(topology: Topology) -> tuple[Any, Model, int]:
    return set_up_matrix(
        topology.spark, topology.settings, "matrix", True, EVERY_OPERATION_ONCE, location=topology.location("matrix")
    )


@pytest.mark.parametrize(
    ("earlier", "later"), EVERY_OPERATION_ONCE, ids=[f"{e}-{lt}" for e, lt in EVERY_OPERATION_ONCE]
)
def test_cell_on_the_cluster(
    cluster_matrix: tuple[Any, Model, int], topology: Topology, earlier: str, later: str
) -> None:
    table, model, _ = cluster_matrix
    assert table.location == topology.location("matrix")
    run_cell(table, model, topology.spark, earlier, later)
