"""``ordo vacuum`` on real files: what a retention window keeps, what it deletes, and that live files survive.

The history of ``test_cli.sample`` has one decision per hour, the first 19 h
ago: v0 create (-19 h), v1..v4 logical commits (-18 .. -15 h), v5 a MAJOR
COMPACT of dt=2024-05-01 decided at -14 h (it inherits v4's time version,
-15 h), v6 an insert (-13 h), v7 an INSERT OVERWRITE of dt=2024-05-02 (-12 h)
and a rejected insert (-11 h).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from ordo.consumer import Catalog
from ordo.services.vacuum import VacuumFile, apply_vacuum, plan_vacuum

from ..conftest import new_prefix
from .test_cli import Builder, error_of, run, sample

D1_REMOVED_AT_V5 = 3  # the three files of dt=2024-05-01 the compaction rewrote
D2_REMOVED_AT_V7 = 2  # the two files of dt=2024-05-02 the overwrite replaced


def on_disk(builder: Builder) -> set[str]:
    return {str(p.relative_to(builder.location)) for p in builder.location.rglob("*.parquet")}


def live(builder: Builder, version: int | None = None) -> set[str]:
    with Catalog(builder.catalog_path) as catalog:
        return {f.path for f in catalog.snapshot("events", version=version).files}


def vacuum(builder: Builder, *args: str, env: dict[str, str] | None = None) -> dict:
    result = run(builder, "vacuum", "events", *args, "--json", "--force", env=env)  # below ordo.retention_hours
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def built(tmp_path: Path) -> Builder:
    return sample(tmp_path)


def test_window_before_the_table_keeps_everything(built: Builder) -> None:
    plan = vacuum(built, "--retain", "20")
    assert plan["boundary_version"] is None and plan["files"] == []
    assert plan["kept_in_window"] == D1_REMOVED_AT_V5 + D2_REMOVED_AT_V7


def test_a_recent_compaction_protects_the_version_before_it(built: Builder) -> None:
    """Boundary at -14.5 h is v5 by time versions, but the compaction was decided at -14 h: its inputs stay."""
    plan = vacuum(built, "--retain", "14.5")
    assert plan["boundary_version"] == 5
    assert plan["files"] == [] and plan["kept_in_window"] == D1_REMOVED_AT_V5 + D2_REMOVED_AT_V7


def test_dry_run_lists_and_apply_deletes_only_unreferenced_files(built: Builder) -> None:
    before = on_disk(built)
    plan = vacuum(built, "--retain", "13.5")
    assert plan["boundary_version"] == 5 and not plan["applied"]
    listed = {f["path"] for f in plan["files"]}
    assert len(listed) == D1_REMOVED_AT_V5 and all(p.startswith("dt=2024-05-01/") for p in listed)
    assert all(f["removed_version"] == 5 for f in plan["files"])
    assert on_disk(built) == before, "a dry run deleted something"

    done = vacuum(built, "--retain", "13.5", "--apply")
    assert set(done["deleted"]) == listed
    assert on_disk(built) == before - listed
    # every version inside the window still reads completely
    for version in (5, 6, 7):
        assert live(built, version) <= on_disk(built)
        shown = json.loads(run(built, "show", "events", "--version", str(version), "--json").output)
        assert shown["rows"] == built.rows(version)
    # a version outside the window lost its files: a clear error, not a traceback
    assert "cannot read data file" in error_of(run(built, "show", "events", "--version", "4"))
    # running it again finds nothing more
    assert vacuum(built, "--retain", "13.5")["files"] == []


def test_short_window_keeps_exactly_the_head(built: Builder) -> None:
    plan = vacuum(built, "--retain", "11.5", "--apply")
    assert plan["boundary_version"] == 7
    assert len(plan["deleted"]) == D1_REMOVED_AT_V5 + D2_REMOVED_AT_V7
    assert live(built) <= on_disk(built)
    rejected_files = on_disk(built) - live(built)
    assert len(rejected_files) == 1, "only the rejected writer's file (an orphan) remains besides the live ones"
    text = run(built, "vacuum", "events", "--retain", "0", "--force").output
    assert "nothing to delete" in text


def test_orphans_only_when_asked_and_only_old_ones(built: Builder, bootstrap_servers: str) -> None:
    """--orphans reads the intents log (a real broker; this prefix has no intents): only old orphans go, the
    staging area an older writer left (ordo before 0.7 staged, then moved) included."""
    broker = {"ORDO_BOOTSTRAP_SERVERS": bootstrap_servers, "ORDO_TOPIC_PREFIX": new_prefix()}
    old, recent, staging = "dt=2024-05-01/dead-0.parquet", "dt=2024-05-01/young-0.parquet", "_staging/x/part-0.parquet"
    for path in (old, recent, staging):
        target = built.location / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"PAR1 not really")
    long_ago = time.time() - 48 * 3600
    for path in (old, staging):
        os.utime(built.location / path, (long_ago, long_ago))
    rejected_file = next(iter(on_disk(built) - live(built) - {old, recent, staging} - removed_paths(built)))
    os.utime(built.location / rejected_file, (long_ago, long_ago))

    assert not {f["path"] for f in vacuum(built, "--retain", "24")["files"]}
    plan = vacuum(built, "--retain", "24", "--orphans", "--apply", env=broker)
    assert {f["path"] for f in plan["files"] if f["kind"] == "orphan"} == {old, rejected_file, staging}
    assert set(plan["deleted"]) == {old, rejected_file, staging}
    assert (built.location / recent).exists() and not (built.location / staging).exists()
    assert live(built) <= on_disk(built)


def test_orphans_need_the_intents_log_and_a_safe_age(built: Builder) -> None:
    """Without a broker --orphans refuses (it cannot see undecided intents); an age below 1 h needs --force."""
    old = built.location / "dt=2024-05-01/dead-0.parquet"
    old.write_bytes(b"PAR1 not really")
    os.utime(old, (time.time() - 48 * 3600,) * 2)
    message = error_of(run(built, "vacuum", "events", "--retain", "1", "--orphans", "--apply"))
    assert "ORDO_BOOTSTRAP_SERVERS" in message and "undecided intents" in message
    env = {"ORDO_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    message = error_of(run(built, "vacuum", "events", "--retain", "1", "--orphans", "--orphan-age", "0.5", env=env))
    assert "below the safe floor" in message and "--force" in message
    assert old.exists()


def removed_paths(builder: Builder) -> set[str]:
    with Catalog(builder.catalog_path) as catalog:
        return {p for c in catalog.commits("events", 0, None, include_rewrites=True) for p in c.removed_files}


def test_apply_never_deletes_a_live_file(built: Builder) -> None:
    """Even a plan that names live files (stale, or forged) leaves them: apply re-checks the catalog."""
    with Catalog(built.catalog_path) as catalog:
        plan = plan_vacuum(catalog, "events", 11.5, force=True)
        head = catalog.snapshot("events")
        forged = (
            tuple(VacuumFile(f.path, f.absolute_path, f.size_bytes, "removed", 1, None) for f in head.files)
            + plan.files
        )
        result = apply_vacuum(catalog, dataclasses.replace(plan, files=forged))
    assert sorted(result.skipped_live) == sorted(f.path for f in head.files)
    assert {f.path for f in result.deleted} == {f.path for f in plan.files}
    assert live(built) <= on_disk(built)


def test_a_retention_below_the_tables_restore_window_needs_force(built: Builder) -> None:
    """A RESTORE may re-add files removed within ordo.retention_hours (168 by default): vacuum keeps them."""
    before = on_disk(built)
    message = error_of(run(built, "vacuum", "events", "--retain", "11.5", "--apply"))
    assert "below table 'events'" in message and "ordo.retention_hours of 168" in message
    assert on_disk(built) == before
    with Catalog(built.catalog_path) as catalog:
        with pytest.raises(Exception, match="RESTORE may still re-add"):
            plan_vacuum(catalog, "events", 167.9)
        assert plan_vacuum(catalog, "events", 168).files == ()


def test_bad_retention_and_unknown_table(built: Builder) -> None:
    result = run(built, "vacuum", "events", "--retain", "-1")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "table 'nope' is not in the catalog" in error_of(run(built, "vacuum", "nope", "--retain", "1"))


def test_pending_intents_protect_named_files_and_their_transactions_siblings() -> None:
    from ordo.services.vacuum import PendingIntents, VacuumError, check_orphan_age

    pending = PendingIntents(5, 7, frozenset({"dt=1/a-0.parquet"}), frozenset({"a", "b-c"}))
    assert pending.protects("dt=1/a-0.parquet") and pending.protects("dt=2/a-3.parquet")
    assert pending.protects("b-c-12.parquet"), "a txn id may contain '-'; the last '-<n>' is the file number"
    assert not pending.protects("dt=1/ab-0.parquet") and not pending.protects("dt=1/b-0.parquet")
    assert not pending.protects("dt=1/a.parquet") and not pending.protects("dt=1/a-x.parquet")
    check_orphan_age(1.0)
    check_orphan_age(0.0, force=True)
    for bad, force in ((0.5, False), (-1.0, True)):
        with pytest.raises(VacuumError):
            check_orphan_age(bad, force=force)
