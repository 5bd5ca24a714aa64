"""``ordo vacuum --orphans`` against a real broker: files of undecided intents survive, plain orphans do not.

An intent is published while no arbiter runs, so it stays undecided; its
files (old enough to pass any age floor) must survive ``--orphans --apply``,
and once an arbiter starts and accepts it, the commit's files are all there.
A plain orphan as old is deleted, and a young file no intent names yet (a
writer that has not published) is kept by the age floor.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ordo.cli import main
from ordo.producer import CommitClient
from ordo.schemas import CommitIntent, DataFile, Operation, Outcome
from ordo.settings import Settings

from ..unit.test_catalog_model import metadata
from .conftest import ConsumerProcess

pytestmark = pytest.mark.timeout(240)

LONG_AGO = time.time() - 48 * 3600


def write(location: Path, relative: str, *, old: bool) -> None:
    target = location / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"PAR1 not really")
    if old:
        os.utime(target, (LONG_AGO, LONG_AGO))


def vacuum(settings: Settings, catalog: str, *args: str) -> dict[str, Any]:
    env = {
        "ORDO_CATALOG": catalog,
        "ORDO_BOOTSTRAP_SERVERS": settings.bootstrap_servers or "",
        "ORDO_TOPIC_PREFIX": settings.topic_prefix,
    }
    result = CliRunner().invoke(main, ["vacuum", "t", *args, "--json", "--force"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def wait_head(handle: ConsumerProcess, version: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with handle.catalog() as catalog:
                if catalog.table("t").head_version >= version:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    raise AssertionError(f"catalog never reached version {version}")


def test_undecided_intent_files_survive_orphan_vacuum(
    settings: Settings,
    tmp_path: Path,
    arbiter: Callable[..., Any],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
) -> None:
    location = tmp_path / "t"
    location.mkdir()
    first = arbiter()
    handle = consumer(catalog=tmp_path / "catalog.db", http=False)
    created = commit_client.commit(
        CommitIntent(
            txn_id="create",
            table="t",
            operation=Operation.CREATE_TABLE,
            read_version=0,
            metadata=metadata(True, str(location)),
        )
    )
    assert created.outcome is Outcome.ACCEPTED
    wait_head(handle, 0)
    first.terminate(timeout=30)

    named = "dt=2024-05-01/late-0.parquet"  # named by the undecided intent
    sibling = "dt=2024-05-01/late-1.parquet"  # carries its txn id, not (yet) named: a file it is still writing
    plain = "dt=2024-05-01/dead-0.parquet"  # no intent names it, no live transaction owns it
    young = "dt=2024-05-02/busy-0.parquet"  # a writer that has not published its intent yet
    for path in (named, sibling, plain):
        write(location, path, old=True)
    write(location, young, old=False)
    intent = CommitIntent(
        txn_id="late",
        table="t",
        operation=Operation.INSERT_INTO,
        read_version=0,
        partitions=({"dt": "2024-05-01"},),
        added_files=(DataFile(path=named, partition={"dt": "2024-05-01"}, record_count=1, size_bytes=15),),
    )
    future = commit_client.submit(intent, timeout=120)

    catalog = handle.catalog_path
    dry = vacuum(settings, catalog, "--retain", "0", "--orphans")
    assert {f["path"] for f in dry["files"]} == {plain}, dry
    done = vacuum(settings, catalog, "--retain", "0", "--orphans", "--apply")
    assert done["deleted"] == [plain]
    assert not (location / plain).exists(), "a plain orphan older than the floor must be deleted"
    for path in (named, sibling, young):
        assert (location / path).exists(), f"{path} was vacuumed while its transaction was undecided or in flight"

    arbiter()
    decision = future.result(timeout=90)
    assert decision.outcome is Outcome.ACCEPTED and decision.id_version == 1
    wait_head(handle, 1)
    with handle.catalog() as reader:
        files = {f.path for f in reader.snapshot("t").files}
    assert files == {named}
    assert all((location / p).exists() for p in files), "an accepted commit points at a vacuumed file"

    # decided now: the sibling its commit never named is an ordinary orphan
    after = vacuum(settings, catalog, "--retain", "0", "--orphans", "--apply")
    assert set(after["deleted"]) == {sibling}
    assert (location / named).exists() and (location / young).exists()
