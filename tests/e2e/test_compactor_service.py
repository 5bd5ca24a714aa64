"""``ordo compactor`` as operators run it: its ready line, its layout gauges, and a SIGTERM in the middle of a rewrite.

The service runs as its own process in a session of its own, as a supervisor
starts it. A table of 16 partitions x 4 buckets holds ten small files per
group (written without Spark, as a stream's tasks write them), so the
service's first batch, a MAJOR COMPACT of all 640 files in one Spark job,
takes a while. As soon as the service logs that it is rewriting, SIGTERM goes
either to its process group (``kill -TERM -PGID``, a shell's job control,
``dumb-init``) or to every process of the service, Spark's JVM included
(systemd's default ``KillMode=control-group``). Either way the service exits
0, prints no traceback, and leaves nothing on storage that no commit named:
no staging directory, no orphan Parquet file; the table's rows are intact.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.compaction import children, create_table
from ordo.services.stack import settings_env
from tests.e2e.stack import parquet_files, writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

PARTITIONS = 16
INSERTS = 10
ROWS = 40  # per partition and insert: every bucket gets a file


def _table(settings: Any, name: str) -> None:
    """The table, created and filled without Spark (``producer.arrow``): 10 files per (partition, bucket)."""
    import pyarrow as pa

    from ordo.producer.arrow import insert_intent
    from ordo.producer.connection import shared_connection

    layout = create_table(settings, name, **{"ordo.compaction.cold_seconds": "1"})
    connection = shared_connection(settings)
    for n in range(INSERTS):
        ids = [p * 1000 + i for p in range(PARTITIONS) for i in range(ROWS)]
        rows = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "v": [f"v{n}"] * len(ids),
                "part": [str(i // 1000) for i in ids],
            }
        )
        decision = connection.client.commit(insert_intent(rows, layout, uuid.uuid4().hex, n), timeout=60)
        assert decision.accepted, decision
    connection.catalog.wait_for_version(name, INSERTS, timeout=60)


def _wait_for(log: Path, pattern: str, process: subprocess.Popen[bytes], timeout: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(pattern, log.read_text(errors="replace"))
        if match:
            return match
        assert process.poll() is None, f"the service exited {process.returncode}:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} within {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.mark.parametrize("signalled", ["process group", "every process"])
def test_sigterm_in_the_middle_of_a_rewrite_leaves_nothing_behind(
    spark: Any,
    writer_stack: Any,  # noqa: F811
    tmp_path: Path,
    signalled: str,
) -> None:
    from ordo.producer.table import DeltaTable

    settings = writer_stack.settings
    name = "sigterm_" + signalled.split()[0]
    _table(settings, name)
    log = tmp_path / "compactor.log"
    with log.open("wb") as out:
        service = subprocess.Popen(
            [sys.executable, "-m", "ordo", "compactor", "--tables", name, "--interval", "1", "--metrics-port", "0"],
            env={**os.environ, **settings_env(settings), "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        metrics = _wait_for(log, r"compactor metrics at (\S+)/metrics", service, 120).group(1)
        ready = _wait_for(log, r"compactor ready in ([\d.]+) s \(Spark ([\d.]+) s\)", service, 300)
        assert float(ready.group(2)) <= float(ready.group(1))
        _wait_for(
            log, rf"{name} MAJOR_COMPACT: rewriting 640 file\(s\) of 16 partition\(s\) in one Spark job", service, 120
        )
        exposition = urllib.request.urlopen(metrics + "/metrics", timeout=10).read().decode()
        assert f'ordo_compactor_live_files{{partition="part=7",table="{name}"}} 40.0' in exposition
        assert f'ordo_compactor_backlog_files{{table="{name}"}} {PARTITIONS * 36}.0' in exposition
        jvms = children(service.pid)
        os.killpg(service.pid, signal.SIGTERM)
        if signalled == "every process":
            for pid in jvms:
                os.kill(pid, signal.SIGTERM)
        code = service.wait(timeout=120)
    finally:
        if service.poll() is None:
            os.killpg(service.pid, signal.SIGKILL)
            service.wait()
    text = log.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert "Traceback" not in text, text[-6000:]
    assert "compactor stopped" in text
    finished = f"{name} MAJOR_COMPACT: 16 partition(s), 64 group(s), 640 -> 64 files committed" in text
    if signalled == "process group":  # the JVM got no signal: the service cancelled the job itself
        assert finished or f"{name} MAJOR_COMPACT of 16 partition(s) abandoned (" in text, text[-3000:]

    root = writer_stack.warehouse / name
    staging = root / "_staging"
    assert not staging.exists() or not any(p.is_file() for p in staging.rglob("*")), list(staging.rglob("*"))
    table = DeltaTable.open(spark, name, settings=settings)
    added = {
        f.path for c in table.catalog.commits(name, 0, table.version, include_rewrites=True) for f in c.added_files
    }
    orphans = set(parquet_files(root)) - added
    assert not orphans, f"files no commit named: {sorted(orphans)[:5]}"
    if not finished:
        assert len(table.snapshot().files) == PARTITIONS * 4 * INSERTS, "an abandoned rewrite committed something"
    rows = {r.id: r.v for r in table.read().collect()}
    assert rows == {p * 1000 + i: f"v{INSERTS - 1}" for p in range(PARTITIONS) for i in range(ROWS)}
