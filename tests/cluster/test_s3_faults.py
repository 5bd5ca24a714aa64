"""The S3 server killed in the middle of a write: the write fails naming the cause, no partial object becomes
visible, and a retry after the server is back succeeds.

The writer's task code (``producer.arrow.RecordWrite``, what every Spark task of
a write runs) against S3Proxy's ``filesystem-nio2`` backend, whose objects
outlive the server (docs: ordo/broker/s3proxy.py), killed with SIGKILL while
the upload of a file is under way and started again on the same port and data.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ordo.broker.s3proxy import S3ProxyServer
from ordo.kernel.objectstore import filesystem, use_options
from ordo.producer.arrow import RecordWrite
from tests.cluster.conftest import objects

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string()), ("_ordo_op", pa.string()), ("_ordo_seq", pa.int64())])
ROWS = 200_000  # ~30 MB of barely compressible text per batch: several multipart parts


def batch(first: int) -> pa.RecordBatch:
    ids = list(range(first, first + ROWS))
    payload = [os.urandom(48).hex() for _ in ids]
    return pa.RecordBatch.from_pydict(
        {"id": ids, "payload": payload, "_ordo_op": ["upsert"] * ROWS, "_ordo_seq": [None] * ROWS}, schema=SCHEMA
    )


def write(write_id: str) -> RecordWrite:
    return RecordWrite(
        location="s3://lake/faults",
        partition_columns=(),
        primary_key=("id",),
        write_id=write_id,
        hidden=(),
        bucketed=False,
        schema=SCHEMA,
        max_records=10**9,
    )


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3ProxyServer]:
    server = S3ProxyServer(backend="filesystem-nio2", data_dir=tmp_path / "s3")
    try:
        server.start()
        server.create_bucket("lake")
        for key, value in server.environment().items():
            monkeypatch.setenv(key, value)
        use_options(None)
        yield server
    finally:
        server.stop()
        use_options(None)


def test_s3_killed_mid_write_fails_naming_the_cause_shows_no_partial_file_and_a_retry_succeeds(
    s3: S3ProxyServer,
) -> None:
    def killed_after_the_first_batch() -> Iterator[Any]:
        yield batch(0)
        yield batch(ROWS)  # the first row group is uploading: the server dies under it
        s3.kill()
        yield batch(2 * ROWS)

    with pytest.raises(OSError) as failure:
        write("w1").write(killed_after_the_first_batch())
    message = str(failure.value)
    assert "faults/w1-" in message and ("connect" in message.lower() or "NETWORK" in message), message
    s3.start()  # the same port and objects
    assert not objects("s3://lake/faults"), "a partial object became visible"
    files = write("w2").write(iter([batch(0), batch(ROWS)]))
    assert [f.record_count for f in files] == [2 * ROWS]
    assert set(objects("s3://lake/faults")) == {f.path for f in files}
    fs, path = filesystem(f"s3://lake/faults/{files[0].path}")
    import pyarrow.parquet as pq

    with fs.open_input_file(path) as handle:
        assert pq.read_table(handle, columns=["id"]).column("id").to_pylist() == list(range(2 * ROWS))
