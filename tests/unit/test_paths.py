"""The data-file layout (``schemas.paths``): what the writer names, the arbiter parses back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ordo.schemas.paths import (
    data_file_path,
    escape_partition_value,
    partition_path,
    split_data_file_path,
    write_id_of,
)

WRITE_IDS = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1, max_size=40)


@given(
    values=st.lists(st.text(max_size=12), min_size=0, max_size=3),
    write_id=WRITE_IDS,
    n=st.integers(0, 10**6),
)
def test_a_written_path_splits_back_into_its_partition_path_and_write_id(
    values: list[str], write_id: str, n: int
) -> None:
    columns = tuple(f"c{i}" for i in range(len(values)))
    partition = dict(zip(columns, values, strict=True))
    path = data_file_path(columns, partition, write_id, n)
    assert split_data_file_path(path) == (partition_path(columns, partition), write_id)
    assert write_id_of(path) == write_id


def test_hive_escaping() -> None:
    assert escape_partition_value("2024-01-01") == "2024-01-01"
    assert escape_partition_value("a/b=c%d") == "a%2Fb%3Dc%25d"
    assert escape_partition_value("x\x00y\x7f:") == "x%00y%7F%3A"
    assert partition_path(("dt", "region"), {"dt": "2024-01-01", "region": "eu west"}) == "dt=2024-01-01/region=eu west"
    assert data_file_path((), {}, "abc-1", 3) == "abc-1-3.parquet"


@pytest.mark.parametrize(
    "path",
    [
        "dt=a/data.parquet",
        "w-0.csv",
        "dt=a/w-x.parquet",
        "dt=a/-0.parquet",
        "w-0.parquet.tmp",
        "a-b/c.parquet",
        "w-\u00b2.parquet",
        "w-.parquet",
    ],
)
def test_names_off_the_layout_have_no_write_id(path: str) -> None:
    assert split_data_file_path(path) is None and write_id_of(path) is None
