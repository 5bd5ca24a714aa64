"""Buckets: the key hash against fixed vectors, bucket counts, and bucketed merge-on-read against a model.

The merge-on-read test is Spark-free: random upserts, deletes and per-bucket
compactions (MINOR of the oldest files, MAJOR, CLUSTER) written as Parquet in
the writer contract's format, read back per (partition, bucket) group with
``consumer.arrow`` and compared with a plain-Python model of the table.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ordo.consumer.arrow import FileRef, TableShape, live_rows, merge_groups
from ordo.producer.buckets import (
    DEFAULT_BUCKETS,
    BucketError,
    bucket_array,
    bucket_of_text,
    choose_buckets,
    key_texts,
    table_buckets,
)
from tests.profiles import examples

# (canonical text, bucket of 4, of 7, of 1024): fixed forever (Spark gives the same: tests/e2e/test_buckets.py)
VECTORS = [
    ("0", 2, 0, 606),
    ("1", 0, 6, 568),
    ("-9223372036854775808", 0, 1, 632),
    ("9223372036854775807", 1, 4, 245),
    ("", 0, 5, 800),
    ("a", 2, 6, 874),
    ("héllo wörld ✓", 3, 5, 139),
    ("true", 2, 4, 230),
    ("false", 3, 1, 935),
    ("1970-01-01", 2, 3, 946),
    ("2024-02-29", 0, 1, 240),
    ("0001-01-01", 0, 3, 568),
    ("1714566600123456", 1, 1, 373),
    ("1\x1fa", 1, 3, 217),
    ("2024-02-29\x1fa\x1f1714566600123456", 1, 0, 125),
]


@pytest.mark.parametrize(("text", "b4", "b7", "b1024"), VECTORS)
def test_bucket_of_text_fixed_vectors(text: str, b4: int, b7: int, b1024: int) -> None:
    assert (bucket_of_text(text, 4), bucket_of_text(text, 7), bucket_of_text(text, 1024)) == (b4, b7, b1024)


def test_canonical_texts_of_arrow_columns() -> None:
    import datetime as dt

    rows = pa.table(
        {
            "i": pa.array([0, -9223372036854775808], pa.int64()),
            "t8": pa.array([1, -128], pa.int8()),
            "s": pa.array(["a", "héllo wörld ✓"]),
            "b": pa.array([True, False]),
            "d": pa.array([dt.date(2024, 2, 29), dt.date(1, 1, 1)]),
            "ts": pa.array(
                [dt.datetime(2024, 5, 1, 12, 30, 0, 123456), dt.datetime(1970, 1, 1)], pa.timestamp("us", tz="UTC")
            ),
            "ns": pa.array([1714566600123456000, 0], pa.timestamp("ns", tz="UTC")),
        }
    )
    assert key_texts(rows, ["i"]) == ["0", "-9223372036854775808"]
    assert key_texts(rows, ["t8"]) == ["1", "-128"]
    assert key_texts(rows, ["b"]) == ["true", "false"]
    assert key_texts(rows, ["d"]) == ["2024-02-29", "0001-01-01"]
    assert key_texts(rows, ["ts"]) == ["1714566600123456", "0"]
    assert key_texts(rows, ["ns"]) == ["1714566600123456", "0"]
    assert key_texts(rows, ["d", "s", "ts"])[0] == "2024-02-29\x1fa\x1f1714566600123456"
    assert bucket_array(rows, ["i"], 4).to_pylist() == [2, 0]
    assert bucket_array(rows, ["d", "s", "ts"], 1024).to_pylist()[0] == 125
    assert bucket_array(rows, ["i"], 1).to_pylist() == [0, 0]
    with pytest.raises(BucketError, match="canonical text"):
        bucket_array(pa.table({"f": pa.array([1.5])}), ["f"], 4)


def test_bucket_counts() -> None:
    assert table_buckets({}) == 1  # a table written before buckets: one bucket
    assert table_buckets({"ordo.buckets": "8"}) == 8
    assert table_buckets({"ordo.buckets": "zero"}) == 1
    assert choose_buckets(None, ["bigint"]) == DEFAULT_BUCKETS == 4
    assert choose_buckets(None, ["double"]) == 1  # no canonical text: unbucketed
    assert choose_buckets(16, ["string", "date"]) == 16
    assert choose_buckets("1", ["double"]) == 1
    with pytest.raises(BucketError, match="between 1 and"):
        choose_buckets(0, ["bigint"])
    with pytest.raises(BucketError, match="integer"):
        choose_buckets("many", ["bigint"])
    with pytest.raises(BucketError, match="primary-key types"):
        choose_buckets(4, ["bigint", "decimal(10,2)"])


# --------------------------------------------------------------------------- bucketed merge-on-read vs a model

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("dt", pa.string())])
FILE_SCHEMA = pa.schema([*SCHEMA, ("_ordo_op", pa.string()), ("_ordo_seq", pa.int64())])
SHAPE = TableShape(SCHEMA, ("id",), ("dt",))
PARTS = ("a", "b")

ids = st.lists(st.integers(0, 30), min_size=1, max_size=12, unique=True)
step = st.one_of(
    st.tuples(st.just("upsert"), st.sampled_from(PARTS), ids),
    st.tuples(st.just("delete"), st.sampled_from(PARTS), ids),
    st.tuples(
        st.sampled_from(["minor", "major", "cluster"]), st.sampled_from(PARTS), st.integers(0, 3), st.integers(1, 4)
    ),
)


class Files:
    """Data files written by the test: records as written (effective sequence known) and their FileRefs."""

    def __init__(self, root: Path, buckets: int) -> None:
        self.root = root
        self.buckets = buckets
        self.live: dict[str, tuple[FileRef, list[dict[str, Any]]]] = {}
        self.names = itertools.count()

    def write(self, records: list[dict[str, Any]], version: int, part: str, bucket: int, op: str) -> None:
        path = str(self.root / f"f{next(self.names)}.parquet")
        pq.write_table(pa.Table.from_pylist(records, FILE_SCHEMA), path)
        ref = FileRef(path, version, {"dt": part}, op, bucket=bucket)
        effective = [dict(r, _ordo_seq=version if r["_ordo_seq"] is None else r["_ordo_seq"]) for r in records]
        self.live[path] = (ref, effective)

    def commit(self, records: list[dict[str, Any]], version: int, part: str, op: str) -> None:
        """A user commit: its records split by bucket, one file per bucket (sequence = the version)."""
        table = pa.Table.from_pylist(records, FILE_SCHEMA)
        buckets = bucket_array(table, ["id"], self.buckets).to_pylist()
        for b in sorted(set(buckets)):
            self.write([r for r, rb in zip(records, buckets, strict=True) if rb == b], version, part, b, op)

    def group(self, part: str, bucket: int) -> list[tuple[FileRef, list[dict[str, Any]]]]:
        found = [item for item in self.live.values() if item[0].partition["dt"] == part and item[0].bucket == bucket]
        return sorted(found, key=lambda item: (item[0].added_version, item[0].path))


def newest(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    best: dict[int, dict[str, Any]] = {}
    for r in records:
        have = best.get(r["id"])
        if have is None or (r["_ordo_seq"], r["_ordo_op"] == "upsert") > (
            have["_ordo_seq"],
            have["_ordo_op"] == "upsert",
        ):
            best[r["id"]] = r
    return best


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buckets=st.integers(1, 4), steps=st.lists(step, min_size=1, max_size=14))
def test_bucketed_merge_on_read_matches_model(buckets: int, steps: list[tuple[Any, ...]]) -> None:
    model: dict[tuple[str, int], str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = Files(Path(tmp), buckets)
        for version, action in enumerate(steps, start=1):
            kind, part = action[0], action[1]
            if kind == "upsert":
                records = [
                    {"id": i, "v": f"v{version}-{i}", "dt": part, "_ordo_op": "upsert", "_ordo_seq": None}
                    for i in action[2]
                ]
                files.commit(records, version, part, "INSERT_INTO")
                model.update({(part, i): f"v{version}-{i}" for i in action[2]})
            elif kind == "delete":
                records = [{"id": i, "v": None, "dt": part, "_ordo_op": "delete", "_ordo_seq": None} for i in action[2]]
                files.commit(records, version, part, "DELETE")
                for i in action[2]:
                    model.pop((part, i), None)
            else:  # a rewrite of one (partition, bucket): MINOR of its oldest files, or all of them
                bucket, count = action[2] % buckets, action[3]
                group = files.group(part, bucket)
                inputs = group[:count] if kind == "minor" else group
                if not inputs or (kind == "minor" and len(inputs) < 2):
                    continue
                kept = list(newest([r for _, recs in inputs for r in recs]).values())
                if kind != "minor":
                    kept = [r for r in kept if r["_ordo_op"] == "upsert"]
                for ref, _ in inputs:
                    del files.live[ref.path]
                op = {"minor": "MINOR_COMPACT", "major": "MAJOR_COMPACT", "cluster": "CLUSTER"}[kind]
                if kept:
                    files.write(sorted(kept, key=lambda r: r["id"]), version, part, bucket, op)
            refs = [ref for ref, _ in files.live.values()]
            groups = merge_groups(refs, SHAPE.partition_columns)
            assert len({(g[0].partition["dt"], g[0].bucket) for g, _ in groups}) == len(groups)
            rows = [row for g, merge in groups for row in live_rows(g, SHAPE, merge=merge).to_pylist()]
            got = {(r["dt"], r["id"]): r["v"] for r in rows}
            assert len(rows) == len(got), "a key appears twice"
            assert got == model, (version, action)


_key_value = st.one_of(st.none(), st.integers(0, 3))
_float_key = st.one_of(st.none(), st.sampled_from([0.0, 1.5, float("nan")]))


@settings(max_examples=examples(200), deadline=None)
@given(
    rows=st.lists(
        st.tuples(_key_value, _float_key, st.integers(0, 4), st.sampled_from(["upsert", "delete"])),
        max_size=40,
    )
)
def test_latest_records_keeps_per_key_the_highest_sequence_upsert_first(
    rows: list[tuple[int | None, float | None, int, str]],
) -> None:
    """Against a plain-Python model: nulls are one key, NaN is one key, an upsert wins a tie of sequences."""
    import math

    from ordo.consumer.arrow import _SEQ, OP_COLUMN, latest_records

    shape = TableShape(pa.schema([("a", pa.int64()), ("b", pa.float64()), ("n", pa.int64())]), ("a", "b"), ())
    table = pa.table(
        {
            "a": pa.array([r[0] for r in rows], pa.int64()),
            "b": pa.array([r[1] for r in rows], pa.float64()),
            "n": pa.array(list(range(len(rows))), pa.int64()),  # which input row won
            OP_COLUMN: pa.array([r[3] for r in rows], pa.string()),
            _SEQ: pa.array([r[2] for r in rows], pa.int64()),
        }
    )

    def key(a: int | None, b: float | None) -> tuple[Any, ...]:
        return (a, "nan" if b is not None and math.isnan(b) else b)

    best: dict[tuple[Any, ...], tuple[int, int, int]] = {}  # key -> (seq, upsert first, input row)
    for n, (a, b, seq, op) in enumerate(rows):
        rank = (seq, 1 if op == "upsert" else 0)
        if key(a, b) not in best or rank > best[key(a, b)][:2]:
            best[key(a, b)] = (*rank, n)
    winners = latest_records(table, shape)
    got = {key(a, b): n for a, b, n in zip(*(winners.column(c).to_pylist() for c in ("a", "b", "n")), strict=True)}
    assert winners.num_rows == len(got) == len(best)
    for k, (seq, upsert, n) in best.items():  # equal (seq, op) ranks: any of those rows is right
        won = rows[got[k]]
        assert (won[2], won[3] == "upsert") == (seq, bool(upsert)), (k, won, rows[n])
