"""Every conflict-matrix cell driven by two overlapping Spark transactions on the real stack.

One partitioned table, one partition per cell (partitions are independent, so
the cells share the table, the stack and the Spark session). In each cell
``t1 = begin(); t2 = begin()``, both stage their operation, then t1 commits and
t2 commits. The expected outcome comes from the reference vectors
(tests/unit/conflict_matrix.csv, MaxCompute's published matrix) and the
CLUSTER rule of docs/conflicts.md; the table's contents are checked against a plain
Python model of the accepted commits, applied in commit order.

Every cell runs on a key table and on a keyless one (``DeltaTable.create`` without
``primary_key``): the keyless model is a list of rows that keeps duplicates (the
setup's overlapping inserts give ids 3 and 4 twice), and its INSERT/INSERT cell
lets both appends through (docs/conflicts.md, "Keyless tables").
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ordo.errors import CommitConflictError
from tests.e2e.stack import files_of_txn, writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

CLASSES = ("OVERWRITE", "INSERT", "UPDATE", "MINOR_COMPACT", "MAJOR_COMPACT", "CLUSTER")
VECTORS = Path(__file__).resolve().parents[1] / "unit" / "conflict_matrix.csv"
SETUP_IDS = range(1, 5), range(3, 7)  # two inserts, overlapping on keys 3 and 4
SCHEMA = "id BIGINT, v STRING, p STRING"

KINDS = ("key", "keyless")


class Rows:
    """One partition of the model: a list of (id, v); a key table's insert replaces the rows of its ids."""

    def __init__(self, keyed: bool) -> None:
        self.keyed = keyed
        self.rows: list[tuple[int, str]] = []

    def insert(self, values: dict[int, str]) -> None:
        if self.keyed:
            self.rows = [r for r in self.rows if r[0] not in values]
        self.rows.extend(values.items())

    def clear(self) -> None:
        self.rows = []

    def copy(self) -> Rows:
        other = Rows(self.keyed)
        other.rows = list(self.rows)
        return other

    def sorted(self) -> list[tuple[int, str]]:
        return sorted(self.rows)


Model = dict[str, Rows]  # partition -> its rows


def expected_for(kind: str) -> dict[tuple[str, str], str]:
    """The cells of a key table; a keyless table's concurrent appends never conflict (no key to order)."""
    cells = dict(EXPECTED)
    if kind == "keyless":
        cells[("INSERT", "INSERT")] = "no_conflict"
    return cells


def expected_outcomes() -> dict[tuple[str, str], str]:
    """The 25 reference cells plus CLUSTER: MAJOR_COMPACT's row and column, never conflicting with INSERT."""
    with VECTORS.open(newline="") as handle:
        cells = {(row["earlier"], row["later"]): row["outcome"] for row in csv.DictReader(handle)}
    assert len(cells) == 25
    major = "MAJOR_COMPACT"
    cells[("CLUSTER", "CLUSTER")] = cells[(major, major)]
    for other in CLASSES[:-1]:
        cells[("CLUSTER", other)] = "new_data_written" if other == "INSERT" else cells[(major, other)]
        cells[(other, "CLUSTER")] = "compaction_completes" if other == "INSERT" else cells[(other, major)]
    return cells


EXPECTED = expected_outcomes()
CELLS = [(e, lt) for e in CLASSES for lt in CLASSES]


def partition_of(earlier: str, later: str) -> str:
    return f"{earlier.lower()}-{later.lower()}"


class Step:
    """One staged operation of a cell and its effect on the model, applied when it commits."""

    def __init__(self, label: str, stage: Callable[[Any], None], effect: Callable[[Rows], None]) -> None:
        self.label = label
        self.stage = stage
        self.effect = effect


def make_step(spark: Any, cls: str, role: str, part: str, pinned: Rows) -> Step:
    """The operation of class ``cls`` for ``role`` (earlier/later) and its model effect from the pinned state."""
    spec = {"p": part}

    def rows(values: dict[int, str]) -> Any:
        return spark.createDataFrame([(k, v, part) for k, v in values.items()], SCHEMA)

    if cls == "OVERWRITE":
        if role == "earlier":
            values = {10: "o10", 2: "o2"}

            def overwrite(part_model: Rows) -> None:
                part_model.clear()
                part_model.insert(values)

            return Step("insert_overwrite", lambda t: t.insert_overwrite(rows(values), spec), overwrite)
        return Step("truncate", lambda t: t.truncate(spec), lambda m: m.clear())
    if cls == "INSERT":
        values = {7: "i7e", 3: "i3e"} if role == "earlier" else {8: "i8l", 4: "i4l"}
        return Step("insert_into", lambda t: t.insert_into(rows(values)), lambda m: m.insert(values))
    if cls == "UPDATE":
        if role == "earlier":
            # records written from the pinned snapshot: each of its rows with id >= 3, by key or by row id
            changed = [(k, v + "_u") for k, v in pinned.rows if k >= 3]

            def update(part_model: Rows) -> None:  # it commits first: the partition is still the pinned one
                part_model.rows = [r for r in part_model.rows if r[0] < 3] + changed

            return Step("update", lambda t: t.update({"v": "v || '_u'"}, "id >= 3", partition=spec), update)
        gone = [r for r in pinned.rows if r[0] in (2, 5)]  # the pinned snapshot's rows it deletes

        def delete(part_model: Rows) -> None:
            for row in gone:
                if part_model.keyed:
                    part_model.rows = [r for r in part_model.rows if r[0] != row[0]]
                elif row in part_model.rows:
                    part_model.rows.remove(row)

        return Step("delete", lambda t: t.delete("id = 2 OR id = 5", partition=spec), delete)
    if cls in ("MINOR_COMPACT", "MAJOR_COMPACT"):
        mode = "minor" if cls == "MINOR_COMPACT" else "major"
        return Step(f"compact {mode}", lambda t: t.compact(mode, spec), lambda m: None)
    assert cls == "CLUSTER"
    return Step("cluster", lambda t: t.cluster("v", spec), lambda m: None)


def set_up_matrix(
    spark: Any, settings: Any, name: str, keyed: bool, cells: list[tuple[str, str]], location: str | None = None
) -> tuple[Any, Model, int]:
    """Table ``name`` with a partition per cell of ``cells``: two overlapping inserts and a delete in each."""
    from ordo.producer import table as api

    table = api.DeltaTable.create(
        spark,
        name,
        schema=SCHEMA,
        primary_key="id" if keyed else None,
        partitioned_by="p",
        location=location,
        settings=settings,
    )
    assert table.keyless is not keyed
    parts = [partition_of(e, lt) for e, lt in cells]
    model: Model = {p: Rows(keyed) for p in parts}
    for round_, ids in enumerate(SETUP_IDS):
        values = {i: f"{'ab'[round_]}{i}" for i in ids}
        table.insert_into(spark.createDataFrame([(i, v, p) for p in parts for i, v in values.items()], SCHEMA))
        for p in parts:
            model[p].insert(values)
    result = table.delete("id = 1")  # table-wide: a delete record in every partition
    for p in parts:
        model[p].rows = [r for r in model[p].rows if r[0] != 1]
    assert result is not None
    return table, model, result.id_version


@pytest.fixture(scope="module", params=KINDS)
def matrix_table(request: pytest.FixtureRequest, spark: Any, writer_stack: Any) -> tuple[Any, Model, int]:  # noqa: F811
    """The shared table after setup: two overlapping inserts and a delete in every cell's partition."""
    keyed = request.param == "key"
    return set_up_matrix(spark, writer_stack.settings, "matrix" if keyed else "matrix_keyless", keyed, CELLS)


def table_rows(table: Any, part: str | None = None, version: int | None = None) -> dict[str, list[tuple[int, str]]]:
    """The table's rows by partition, at ``version`` (default head), of one partition's files only when ``part``."""
    import dataclasses

    from ordo.consumer.spark import read_snapshot

    if part is None:
        df = table.read(version=version)
    else:  # read only the cell's files: the other 35 partitions cost a scan each time
        snapshot = table.snapshot(version)
        files = tuple(f for f in snapshot.files if f.partition == {"p": part})
        df = read_snapshot(table.spark, dataclasses.replace(snapshot, files=files))
    found: dict[str, list[tuple[int, str]]] = {}
    for row in df.collect():
        found.setdefault(row.p, [])
        if not table.keyless:
            assert row.id not in dict(found[row.p]), f"key {row.id} appears twice in partition {row.p}"
        found[row.p].append((row.id, row.v))
    return {p: sorted(values) for p, values in found.items()}


@pytest.mark.parametrize(("earlier", "later"), CELLS, ids=[f"{e}-{lt}" for e, lt in CELLS])
def test_cell(matrix_table: tuple[Any, Model, int], spark: Any, earlier: str, later: str) -> None:
    table, model, _ = matrix_table
    run_cell(table, model, spark, earlier, later)


def run_cell(table: Any, model: Model, spark: Any, earlier: str, later: str) -> None:
    """Cell (``earlier``, ``later``) in its partition of ``table``: both transactions, their outcome, the rows."""
    part = partition_of(earlier, later)
    outcome = expected_for("keyless" if table.keyless else "key")[(earlier, later)]

    t1, t2 = table.begin(), table.begin()
    assert t1.read_version == t2.read_version
    pinned = model[part].copy()
    first = make_step(spark, earlier, "earlier", part, pinned)
    second = make_step(spark, later, "later", part, pinned)
    first.stage(t1)
    second.stage(t2)
    if earlier in ("MINOR_COMPACT", "MAJOR_COMPACT", "CLUSTER"):
        assert t1.removed_files, f"{first.label} staged no rewrite"
    if later in ("MINOR_COMPACT", "MAJOR_COMPACT", "CLUSTER"):
        assert t2.removed_files, f"{second.label} staged no rewrite"

    r1 = t1.commit()
    assert r1 is not None and r1.id_version > t1.read_version
    first.effect(model[part])
    if outcome == "later_fails":
        with pytest.raises(CommitConflictError) as info:
            t2.commit()
        error = info.value
        assert error.reason == "CONFLICT_LATER_FAILS", error
        assert error.conflicting_txn_id == t1.txn_id
        assert error.conflicting_version == r1.id_version
        assert t2.state == "failed"
        assert files_of_txn(table.location, t2.txn_id) == [], "a rejected transaction left files behind"
    else:
        r2 = t2.commit()
        assert r2 is not None and r2.id_version == r1.id_version + 1
        assert r2.rebase.value == ("NONE" if outcome == "no_conflict" else outcome.upper()), (r2.rebase, outcome)
        second.effect(model[part])
        if later in ("MINOR_COMPACT", "MAJOR_COMPACT", "CLUSTER"):
            assert r2.time_version is None
            live = {f.path for f in table.snapshot().files}
            assert not live & set(t2.removed_files), "compaction inputs still live after it committed"

    assert table_rows(table, part).get(part, []) == model[part].sorted(), (
        f"{earlier} then {later}: {first.label}/{second.label}"
    )


def test_setup_version_still_readable(matrix_table: tuple[Any, Model, int]) -> None:
    """Time travel to the setup version after every cell committed: the rewrites changed no logical data."""
    table, _, setup_version = matrix_table
    rows = table_rows(table, version=setup_version)
    expected = sorted({i: ("a" if i < 3 else "b") + str(i) for i in range(2, 7)}.items())
    if table.keyless:  # both inserts' rows of ids 3 and 4
        expected = sorted([*expected, (3, "a3"), (4, "a4")])
    assert set(rows) == {partition_of(e, lt) for e, lt in CELLS}
    for part, values in rows.items():
        assert values == expected, part
