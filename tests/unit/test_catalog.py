"""The catalog without a broker: decision logs built by the pure core, applied to real SQLite and PostgreSQL.

Oracles: ``LiveModel`` (a plain-Python fold of the accepted decisions) for
snapshots and time travel; a catalog built in one go for crash/restart runs.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ordo.consumer import Catalog, CatalogTimeoutError, TableBrokenError, TableNotFoundError, VersionNotFoundError
from ordo.consumer.store import CatalogWriter, LogRecord, connect
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, encode
from ordo.schemas.decisionlog import LogProblem

from .test_catalog_model import Script

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def at(millis: int) -> datetime:
    return EPOCH + timedelta(milliseconds=millis)


def build(path: str, *scripts: Script, batch: int = 50) -> Catalog:
    writer = CatalogWriter(path, "ordo")
    records = interleave(*scripts)
    for i in range(0, len(records), batch):
        writer.apply(records[i : i + batch])
    writer.close()
    return Catalog(path)


def interleave(*scripts: Script) -> list[LogRecord]:
    """The records of several tables as one consumer batch stream would mix them (order kept per table)."""
    queues = [list(s.records) for s in scripts]
    mixed: list[LogRecord] = []
    while any(queues):
        for queue in queues:
            mixed.extend(queue[:3])
            del queue[:3]
    return mixed


def dump(path: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row the catalog holds (minus wall-clock columns), for equality checks."""
    conn = connect(path, readonly=True)
    try:
        return {
            "tables": conn.execute(
                "SELECT name, topic, next_offset, last_hash, decisions, metadata, created_time_ms, head_version,"
                " head_time_ms, error, error_offset FROM tables ORDER BY name"
            ).fetchall(),
            "decisions": conn.execute("SELECT * FROM decisions ORDER BY table_id, log_offset").fetchall(),
            "commits": conn.execute("SELECT * FROM commits ORDER BY table_id, id_version").fetchall(),
            "files": conn.execute(
                "SELECT table_id, path, partition, record_count, size_bytes, min_key, max_key, added_version,"
                " removed_version, data_change, operation FROM files ORDER BY table_id, path, added_version"
            ).fetchall(),
        }
    finally:
        conn.close()


# ---------------------------------------------------------------------- snapshots and time travel


@pytest.mark.parametrize("partitioned", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_snapshot_at_every_version_equals_the_model(
    catalog_at: Callable[[str], str], seed: int, partitioned: bool
) -> None:
    script = Script(seed=seed, partitioned=partitioned).run(150)
    catalog = build(catalog_at("c.db"), script)
    model = script.model
    assert catalog.head("t") == model.head == script.state.head_version
    for version in range(model.head + 1):
        snapshot = catalog.snapshot("t", version)
        assert snapshot.id_version == version
        assert {f.path: f.seq for f in snapshot.files} == model.live(version), f"version {version}"
        assert snapshot.time_version == at(model.times[version])
        for f in snapshot.files:
            assert f.absolute_path == "/warehouse/t/" + f.path
            assert dict(f.partition) == model.partitions[f.path]
            assert f.data_change == (not Operation(f.operation).rewrites)
    assert {f.path for f in catalog.snapshot("t").files} == script.state.live_files()


@pytest.mark.parametrize("partitioned", [True, False])
def test_a_snapshot_of_some_groups_is_the_snapshot_filtered_to_them(
    catalog_at: Callable[[str], str], partitioned: bool
) -> None:
    script = Script(seed=5, partitioned=partitioned).run(120)
    catalog = build(catalog_at("c.db"), script)
    for version in range(1, script.model.head + 1, 3):
        whole = catalog.snapshot("t", version)
        partitions = sorted({tuple(sorted(f.partition.items())) for f in whole.files})
        for partition in [dict(p) for p in partitions[:2] or ([] if partitioned else [()])]:
            for bucket in (None, 0, 1):
                got = catalog.snapshot("t", version, groups=[(partition, bucket)])
                wanted = [f for f in whole.files if dict(f.partition) == partition and bucket in (None, f.bucket)]
                assert sorted(got.files, key=str) == sorted(wanted, key=str), (version, partition, bucket)
                assert (got.id_version, got.time_version, got.metadata) == (
                    whole.id_version,
                    whole.time_version,
                    whole.metadata,
                )
        assert catalog.snapshot("t", version, groups=[]).files == ()
    for bad in ([({"nope": "x"}, 0)], [({"dt": "a"}, -1)], [("dt", 0)], "dt"):
        with pytest.raises(ValueError):
            catalog.snapshot("t", groups=bad)  # type: ignore[arg-type]


def test_time_travel_by_timestamp_follows_inherited_time_versions(catalog_at: Callable[[str], str]) -> None:
    script = Script(seed=3).run(120)
    model = script.model
    catalog = build(catalog_at("c.db"), script)
    probes = sorted({t + d for t in model.times for d in (-1, 0, 1)})
    for millis in probes:
        expected = model.version_at(millis)
        if expected is None:
            with pytest.raises(VersionNotFoundError, match="before table 't' was created"):
                catalog.snapshot("t", timestamp=millis)
            continue
        snapshot = catalog.snapshot("t", timestamp=at(millis))
        assert snapshot.id_version == expected, millis
        assert {f.path for f in snapshot.files} == set(model.live(expected))
    rewrites = [v for v, op in enumerate(model.operations) if op.rewrites]
    assert rewrites, "the script must contain compactions"
    for version in rewrites:
        # A rewrite has no time of its own: as of the time of the logical commit before it, the reader
        # sees the rewrite (the highest version at that time), never a version older than that commit.
        found = catalog.snapshot("t", timestamp=at(model.times[version])).id_version
        assert found >= version
        assert model.times[found] == model.times[version]


def test_time_version_inheritance_explicitly(catalog_at: Callable[[str], str]) -> None:
    script = Script(offset_step=1)  # created at t=1_000_000
    insert = script.submit(
        CommitIntent(
            txn_id="i1", table="t", operation=Operation.INSERT_INTO, read_version=0, added_files=script.files("i1", "a")
        ),
        timestamp=2_000_000,
    )
    compact = script.submit(
        CommitIntent(
            txn_id="m1",
            table="t",
            operation=Operation.MAJOR_COMPACT,
            read_version=1,
            partitions=({"dt": "a"},),
            removed_files=("dt=a/i1-0.parquet",),
            added_files=script.files("m1", "a"),
        ),
        timestamp=3_000_000,
    )
    later = script.submit(
        CommitIntent(
            txn_id="i2", table="t", operation=Operation.INSERT_INTO, read_version=2, added_files=script.files("i2", "b")
        ),
        timestamp=2_000_000,  # an earlier record time: the arbiter makes it 2_000_001
    )
    assert (insert.id_version, compact.id_version, later.id_version) == (1, 2, 3)
    catalog = build(catalog_at("c.db"), script)
    assert catalog.snapshot("t", timestamp=1_999_999).id_version == 0
    assert catalog.snapshot("t", timestamp=2_000_000).id_version == 2  # the compaction inherits 2_000_000
    assert catalog.snapshot("t", timestamp=2_000_000).time_version == at(2_000_000)
    assert catalog.snapshot("t", timestamp=2_000_001).id_version == 3
    assert catalog.snapshot("t", timestamp="1970-01-01T00:33:20.001Z").id_version == 3
    assert catalog.snapshot("t", timestamp=9_999_999_999).id_version == 3  # after the head: the head
    commits = {c.id_version: c for c in catalog.commits("t", 0, by="id", include_rewrites=True)}
    assert commits[2].time_version is None and commits[2].timestamp == at(2_000_000)
    assert commits[3].time_version == at(2_000_001)


def test_commits_by_id_and_time_are_inclusive_and_skip_rewrites(catalog_at: Callable[[str], str]) -> None:
    script = Script(seed=4).run(100)
    model = script.model
    catalog = build(catalog_at("c.db"), script)
    head = model.head
    for low, high in [(0, head), (1, 1), (3, 9), (head, head), (2, head + 50)]:
        logical = [c.id_version for c in catalog.commits("t", low, high)]
        assert logical == model.logical(low, high)
        every = [c.id_version for c in catalog.commits("t", low, high, include_rewrites=True)]
        assert every == list(range(low, min(high, head) + 1))
    for low_v, high_v in [(1, 5), (0, head), (7, 7)]:
        low, high = model.times[low_v], model.times[high_v]
        by_time = [c.id_version for c in catalog.commits("t", at(low), at(high), by="time")]
        assert by_time == [
            v for v in range(head + 1) if model.operations[v].data_change and low <= model.times[v] <= high
        ]
    one = catalog.commits("t", 1, 1, include_rewrites=True)[0]
    decision = next(d for d in script.decisions if d.id_version == 1 and d.duplicate_of is None and d.accepted)
    assert [f.path for f in one.added_files] == [f.path for f in decision.added_files]
    assert one.removed_files == tuple(sorted(decision.removed_files))
    assert catalog.commits("t", at(model.times[-1] + 1), by="time") == []
    with pytest.raises(VersionNotFoundError, match=r"versions 0\.\.\d+; start version .* does not exist \(yet\)"):
        catalog.commits("t", head + 1)
    with pytest.raises(ValueError):
        catalog.commits("t", 5, 4)
    with pytest.raises(ValueError):
        catalog.commits("t", 0, by="version")


def test_history_has_every_decision_newest_first(catalog_at: Callable[[str], str]) -> None:
    script = Script(seed=5).run(80)
    catalog = build(catalog_at("c.db"), script)
    history = catalog.history("t")
    assert [h.log_offset for h in history] == [r.offset for r in reversed(script.records)]
    by_offset = {r.offset: d for r, d in zip(script.records, script.decisions, strict=True)}
    for entry in history:
        decision = by_offset[entry.log_offset]
        assert (entry.txn_id, entry.outcome, entry.reason, entry.id_version, entry.duplicate_of) == (
            decision.txn_id,
            decision.outcome,
            decision.reason,
            decision.id_version,
            decision.duplicate_of,
        )
        counted = decision.accepted and decision.duplicate_of is None
        assert entry.files_added == (len(decision.added_files) if counted else 0)
        assert entry.files_removed == (len(decision.removed_files) if counted else 0)
    assert any(h.duplicate_of is not None for h in history)
    assert any(not h.accepted for h in history)
    assert len(catalog.history("t", limit=3)) == 3
    accepted = [h.log_offset for h in history if h.accepted]
    assert [h.log_offset for h in catalog.history("t", accepted_only=True)] == accepted
    assert [h.log_offset for h in catalog.history("t", 4, accepted_only=True)] == accepted[:4]


def test_history_of_n_reads_n_rows_by_the_primary_key(tmp_path: Path) -> None:
    """``history(n)`` walks the (table_id, log_offset) key backwards and stops: no scan, no sort of the log."""
    from ordo.consumer.store import DECISION_COLUMNS

    build(str(tmp_path / "c.db"), Script(seed=5).run(40))
    conn = sqlite3.connect(tmp_path / "c.db")
    for accepted in ("", " AND outcome = 'accepted'"):
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                f"EXPLAIN QUERY PLAN SELECT {DECISION_COLUMNS} FROM decisions WHERE table_id = 1{accepted} "
                "ORDER BY log_offset DESC LIMIT 3"
            )
        )
        assert "USING PRIMARY KEY" in plan or "USING INDEX" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


def test_unknown_table_and_version_errors_name_the_table_and_range(catalog_at: Callable[[str], str]) -> None:
    script = Script(seed=6).run(10)
    catalog = build(catalog_at("c.db"), script)
    head = script.model.head
    with pytest.raises(TableNotFoundError, match=r"table 'nope' is not in the catalog .*\(tables: t\)"):
        catalog.snapshot("nope")
    with pytest.raises(
        VersionNotFoundError, match=rf"table 't' has ID versions 0\.\.{head}; version {head + 1} does not exist \(yet\)"
    ):
        catalog.snapshot("t", head + 1)
    with pytest.raises(VersionNotFoundError, match="version -1 does not exist"):
        catalog.snapshot("t", -1)
    with pytest.raises(VersionNotFoundError, match=r"before table 't' was created \(valid from 1970-01-01T00:16:40"):
        catalog.snapshot("t", timestamp=at(5))
    with pytest.raises(ValueError):
        catalog.snapshot("t", version=1, timestamp=at(5))
    with pytest.raises(ValueError, match="ISO 8601"):
        catalog.snapshot("t", timestamp="yesterday")
    with pytest.raises(TableNotFoundError):
        Catalog(catalog_at("c.db")).history("nope")


def test_missing_catalog_file_is_a_clear_error(tmp_path: Path) -> None:
    from ordo.consumer import CatalogUnavailableError

    with pytest.raises(CatalogUnavailableError, match="does not exist"):
        Catalog(tmp_path / "missing.db").tables()
    assert not (tmp_path / "missing.db").exists()


def test_duplicates_are_logged_but_change_nothing(catalog_at: Callable[[str], str]) -> None:
    script = Script(offset_step=1)
    intent = CommitIntent(
        txn_id="i1", table="t", operation=Operation.INSERT_INTO, read_version=0, added_files=script.files("i1", "a")
    )
    first = script.submit(intent)
    again = script.submit(intent)
    assert again.duplicate_of == first.intent_offset and again.id_version == first.id_version
    catalog = build(catalog_at("c.db"), script)
    assert catalog.head("t") == 1
    assert [h.duplicate_of for h in catalog.history("t")] == [first.intent_offset, None, None]
    assert len(catalog.snapshot("t").files) == 1


def test_several_tables_in_one_catalog(catalog_at: Callable[[str], str]) -> None:
    first, second = Script("t", seed=7).run(40), Script("u", seed=8, partitioned=False).run(40)
    catalog = build(catalog_at("c.db"), first, second)
    assert [t.name for t in catalog.tables()] == ["t", "u"]
    for script in (first, second):
        info = catalog.table(script.table)
        assert info.head_version == script.model.head
        assert info.metadata.partition_columns == (("dt",) if script.partitioned else ())
        assert {f.path for f in catalog.snapshot(script.table).files} == script.state.live_files()


# ---------------------------------------------------------------------- crashes and restarts


def test_apply_in_parts_with_reopen_equals_apply_all(catalog_at: Callable[[str], str]) -> None:
    scripts = Script("t", seed=9).run(120), Script("u", seed=10).run(60)
    records = interleave(*scripts)
    build(catalog_at("all.db"), *scripts, batch=len(records))
    half = len(records) // 2
    writer = CatalogWriter(catalog_at("parts.db"), "ordo")
    writer.apply(records[:half])
    del writer  # abandoned, not closed: like a crash between batches
    writer = CatalogWriter(catalog_at("parts.db"), "ordo")
    # Kafka may redeliver from any earlier offset: what was applied is skipped.
    result = writer.apply(records[half - 17 :])
    assert result.skipped == 17
    writer.close()
    assert dump(catalog_at("parts.db")) == dump(catalog_at("all.db"))


class _Crash(Exception):
    pass


def test_a_failure_inside_a_batch_leaves_nothing_of_it(catalog_at: Callable[[str], str]) -> None:
    script = Script(seed=11).run(60)
    build(catalog_at("all.db"), script)
    writer = CatalogWriter(catalog_at("c.db"), "ordo")
    writer.apply(script.records[:20])
    before = dump(catalog_at("c.db"))

    def failing() -> object:
        yield from script.records[20:35]
        raise _Crash("injected fault in the middle of a batch")

    with pytest.raises(_Crash):
        writer.apply(failing())
    assert dump(catalog_at("c.db")) == before
    writer.apply(script.records[20:])  # the same writer recovers its in-memory state
    writer.close()
    assert dump(catalog_at("c.db")) == dump(catalog_at("all.db"))


def _apply_slowly(path: str, records: list[LogRecord], ready: object, progress: object = None) -> None:
    writer = CatalogWriter(path, "ordo")
    ready.set()  # type: ignore[attr-defined]
    start = writer.stream("t").next_offset if writer.stream("t") else 0  # type: ignore[union-attr]
    pending = [r for r in records if r.offset >= start]
    for i in range(0, len(pending), 5):
        writer.apply(pending[i : i + 5])
        if progress is not None:
            with progress.get_lock():  # type: ignore[attr-defined]
                progress.value += 1  # type: ignore[attr-defined]
        time.sleep(0.005)
    writer.close()


def test_kill_9_at_random_moments_then_resume_equals_apply_all(catalog_at: Callable[[str], str]) -> None:
    script = Script(seed=12).run(400)
    build(catalog_at("all.db"), script)
    path = str(catalog_at("c.db"))
    context = multiprocessing.get_context("fork")
    killed = 0
    # Kill once the child has applied a few more batches: it is mid-way through the
    # next one, at a moment set by its own progress, not by a wall-clock guess.
    for batches in (3, 1, 6, 2):
        ready = context.Event()
        progress = context.Value("i", 0)
        child = context.Process(target=_apply_slowly, args=(path, script.records, ready, progress))
        child.start()
        assert ready.wait(10)
        deadline = time.monotonic() + 30
        while progress.value < batches and child.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
        child.join(10)
        killed += child.exitcode == -signal.SIGKILL
        conn = connect(path, readonly=True)  # every kill leaves a consistent catalog: offsets match rows
        offset, head = conn.execute("SELECT next_offset, head_version FROM tables WHERE name = 't'").fetchone()
        applied = conn.execute("SELECT count(*), max(log_offset) FROM decisions").fetchone()
        conn.close()
        assert applied[0] == (offset + 1) // 2 and (applied[1] is None or applied[1] == offset - 1)
        assert head == max(
            (
                d.id_version
                for r, d in zip(script.records, script.decisions, strict=True)
                if r.offset < offset and d.accepted
            ),
            default=-1,
        )
    assert killed >= 3, "the writer must be killed mid-way, not after it finished"
    _apply_slowly(path, script.records, threading.Event())
    assert dump(catalog_at("c.db")) == dump(catalog_at("all.db"))


# ---------------------------------------------------------------------- chain breaks and inconsistent logs


def _rechained(decision: CommitDecision, prev_hash: bytes, **changes: object) -> bytes:
    return encode(decision.model_copy(update={"prev_hash": prev_hash, **changes}))


def test_chain_break_stops_only_that_table(catalog_at: Callable[[str], str]) -> None:
    broken, healthy = Script("t", seed=13).run(40), Script("u", seed=14).run(40)
    k = 25
    bad = broken.records[k]._replace(value=_rechained(broken.decisions[k], bytes(32)))
    broken.records[k] = bad
    catalog = build(catalog_at("c.db"), broken, healthy)
    info = catalog.table("t")
    expected_head = max(d.id_version for d in broken.decisions[:k] if d.accepted)  # type: ignore[type-var]
    assert info.head_version == expected_head
    assert info.error is not None and "hash chain broken" in info.error
    assert info.error_offset == bad.offset
    assert info.log_offset == broken.records[k - 1].offset + 1  # resumes exactly at the bad record
    assert catalog.health()["broken"] == {"t": info.error}
    assert catalog.head("u") == healthy.model.head  # the other table is fully applied
    assert len(catalog.history("t")) == k
    with pytest.raises(TableBrokenError, match="stuck at version"):
        catalog.wait_for_version("t", expected_head + 1, timeout=1)
    # A restarted writer keeps refusing the table: nothing past the break is ever applied.
    writer = CatalogWriter(catalog_at("c.db"), "ordo")
    result = writer.apply(broken.records)
    assert result.applied == 0 and writer.stream("t").error == info.error  # type: ignore[union-attr]
    writer.close()


def test_chain_must_start_at_the_genesis_hash(catalog_at: Callable[[str], str]) -> None:
    script = Script(seed=15).run(5)
    catalog = build(catalog_at("c.db"), Script(seed=15).run(0))
    writer = CatalogWriter(catalog_at("other.db"), "ordo")
    writer.apply(script.records[1:])  # the log's first record is missing
    writer.close()
    assert Catalog(catalog_at("other.db")).health()["broken"]["t"].startswith("chain: hash chain broken")
    assert catalog.head("t") == 0


@pytest.mark.parametrize(
    "corruption",
    ["undecodable", "empty", "intent", "other_table", "version_gap", "not_live", "time_backwards", "second_create"],
)
def test_inconsistent_records_stop_the_table_with_a_reason(catalog_at: Callable[[str], str], corruption: str) -> None:
    script = Script(offset_step=1)
    for i in range(3):
        script.submit(
            CommitIntent(
                txn_id=f"i{i}",
                table="t",
                operation=Operation.INSERT_INTO,
                read_version=i,
                added_files=script.files(f"i{i}", "a"),
            )
        )
    last = script.decisions[-1]
    chain = script.state.chain
    following = last.intent_offset + 1  # a later intent: what the record breaks is the invariant under test
    value: bytes | None
    if corruption == "undecodable":
        value, reason = b"\xc3\x01garbage", "undecodable"
    elif corruption == "empty":
        value, reason = None, "empty record"
    elif corruption == "intent":
        value, reason = encode(script.intents[-1]), "expected a CommitDecision"
    elif corruption == "other_table":
        value, reason = _rechained(last, chain, table="u"), "names table 'u'"
    elif corruption == "version_gap":
        value, reason = (
            _rechained(last, chain, id_version=9, txn_id="z", intent_offset=following),
            "does not follow the head version 3",
        )
    elif corruption == "not_live":
        value, reason = (
            _rechained(
                last,
                chain,
                id_version=4,
                txn_id="z",
                intent_offset=following,
                operation=Operation.MINOR_COMPACT,
                time_version=None,
                removed_files=("dt=a/nope.parquet",),
            ),
            "only 0 of them are live",
        )
    elif corruption == "time_backwards":
        value, reason = _rechained(last, chain, id_version=4, txn_id="z", intent_offset=following), "does not increase"
    else:
        value, reason = _rechained(script.decisions[0], chain, intent_offset=following), "second CREATE_TABLE"
    script.records.append(LogRecord("t", len(script.records), 0, value))
    catalog = build(catalog_at("c.db"), script)
    info = catalog.table("t")
    assert info.head_version == 3
    assert info.error is not None and reason in info.error
    assert info.error.endswith("run: ordo repair t)")
    assert info.error_offset == len(script.records) - 1
    assert len(catalog.snapshot("t").files) == 3  # nothing of the bad record was applied
    with pytest.raises(TableBrokenError) as caught:
        catalog.wait_for_version("t", 4, timeout=1)
    assert caught.value.kind is KINDS[corruption]


KINDS = {
    "undecodable": LogProblem.UNDECODABLE,
    "empty": LogProblem.UNDECODABLE,
    "intent": LogProblem.NOT_DECISION,
    "other_table": LogProblem.WRONG_TABLE,
    "version_gap": LogProblem.VERSION_GAP,
    "not_live": LogProblem.NOT_LIVE,
    "time_backwards": LogProblem.TIME_VERSION,
    "second_create": LogProblem.SECOND_CREATE,
}


def test_a_later_decision_for_a_decided_intent_is_skipped_and_the_table_goes_on(
    catalog_at: Callable[[str], str],
) -> None:
    """The first decision for an intent offset is the decision (docs/tansu.md): a late repeat is passed over."""
    script = Script("t", seed=17).run(12)
    late = script.decisions[5].model_copy(update={"message": "late copy", "prev_hash": bytes(32)})
    records = list(script.records)
    records.insert(9, LogRecord("t", -1, 0, encode(late)))
    records = [LogRecord("t", i, r.timestamp_ms, r.value) for i, r in enumerate(records)]
    writer = CatalogWriter(catalog_at("c.db"), "ordo")
    result = writer.apply(records[:10])  # the repeat is the last record of this batch
    assert not result.broken and result.skipped == 1
    assert writer.stream("t").next_offset == 9  # type: ignore[union-attr]  # the offset stays at the record applied last
    result = writer.apply(records)
    writer.close()
    assert not result.broken and result.applied == len(records) - 10
    catalog = Catalog(catalog_at("c.db"))
    info = catalog.table("t")
    assert info.error is None and info.decisions == len(script.records) and info.log_offset == len(records)
    assert catalog.head("t") == script.model.head
    history = catalog.history("t")
    assert len(history) == len(script.records) and all(d.message != "late copy" for d in history)


def test_a_half_written_inconsistent_decision_in_a_batch_leaves_no_row_behind(tmp_path: Path) -> None:
    """The batch's fast attempt (no savepoint per decision) is rolled back whole and applied again carefully."""
    script = Script(offset_step=1)
    for i in range(3):
        script.submit(
            CommitIntent(
                txn_id=f"i{i}",
                table="t",
                operation=Operation.INSERT_INTO,
                read_version=i,
                added_files=script.files(f"i{i}", "a"),
            )
        )
    live = script.decisions[-1].added_files[0].path
    # Removes one live file and one that never existed: the first UPDATE succeeds before the check fails.
    bad = _rechained(
        script.decisions[-1],
        script.state.chain,
        id_version=4,
        txn_id="z",
        intent_offset=script.decisions[-1].intent_offset + 1,
        operation=Operation.MINOR_COMPACT,
        time_version=None,
        added_files=(),
        removed_files=(live, "dt=a/nope.parquet"),
    )
    script.records.append(LogRecord("t", len(script.records), 0, bad))
    other = Script("u", seed=21).run(10)
    writer = CatalogWriter(tmp_path / "c.db", "ordo")
    result = writer.apply([*script.records, *other.records])  # one batch: good, bad, then another table
    writer.close()
    assert result.broken and result.broken[0][0] == "t"
    catalog = Catalog(tmp_path / "c.db")
    assert live in {f.path for f in catalog.snapshot("t").files}
    conn = sqlite3.connect(tmp_path / "c.db")
    try:  # the UPDATE of the bad decision was undone, not merely hidden behind the head version
        assert (
            conn.execute(
                "SELECT count(*) FROM files WHERE removed_version IS NOT NULL AND table_id = (SELECT id FROM tables WHERE name = 't')"
            ).fetchone()[0]
            == 0
        )
    finally:
        conn.close()
    assert len(catalog.snapshot("t").files) == 3 and catalog.head("t") == 3
    assert catalog.head("u") == other.model.head  # the rest of the batch is applied
    # the decisions and commits rows (deferred to the end of a fast batch) are there once each, in order
    assert [d.log_offset for d in reversed(catalog.history("t"))] == [r.offset for r in script.records[:-1]]
    assert [d.log_offset for d in reversed(catalog.history("u"))] == [r.offset for r in other.records]
    assert [c.id_version for c in catalog.commits("t", 0)] == [0, 1, 2, 3]


# ---------------------------------------------------------------------- reads while writing


def test_wait_for_version_and_subscribe_while_the_writer_applies(catalog_at: Callable[[str], str]) -> None:
    script = Script(seed=16).run(200)
    path = catalog_at("c.db")
    writer = CatalogWriter(path, "ordo")
    catalog = Catalog(path)
    with pytest.raises(CatalogTimeoutError, match="does not exist yet"):
        catalog.wait_for_version("t", 0, timeout=0.2)

    def feed() -> None:
        for i in range(0, len(script.records), 9):
            writer.apply(script.records[i : i + 9])
            time.sleep(0.005)

    thread = threading.Thread(target=feed)
    thread.start()
    try:
        info = catalog.wait_for_version("t", 40, timeout=20)
        assert info.head_version >= 40
        seen = []
        for commit in catalog.subscribe("t", 0, poll_interval=0.01, include_rewrites=True):
            seen.append(commit.id_version)
            if len(seen) == 30:
                break
        resumed = [
            c.id_version
            for c in catalog.subscribe("t", seen[-1] + 1, poll_interval=0.01, include_rewrites=True, idle_timeout=1.0)
        ]
    finally:
        thread.join()
        writer.close()
    model = script.model
    assert seen + resumed == list(range(model.head + 1))  # no gap, no duplicate
    logical = [c.id_version for c in catalog.subscribe("t", 3, idle_timeout=0.1)]
    assert logical == model.logical(3, model.head)


def _searches(tmp_path: Path, where_live: str, where_removed: str, params: tuple[object, ...]) -> list[str]:
    """The SEARCH/SCAN lines of the plan of a snapshot-shaped query (live files UNION ALL files removed later)."""
    from ordo.consumer.store import FILE_COLUMNS

    build(str(tmp_path / "c.db"), Script(seed=17).run(20))
    conn = connect(tmp_path / "c.db", readonly=True)
    plan = conn.execute(
        f"EXPLAIN QUERY PLAN SELECT {FILE_COLUMNS} FROM files WHERE {where_live}"
        f" UNION ALL SELECT {FILE_COLUMNS} FROM files WHERE {where_removed}",
        params,
    ).fetchall()
    return [row[-1] for row in plan if row[-1].startswith(("SEARCH", "SCAN"))]


def test_snapshot_query_is_one_indexed_query(tmp_path: Path) -> None:
    searches = _searches(
        tmp_path,
        "table_id = ?1 AND removed_version IS NULL AND added_version <= ?2",
        "table_id = ?1 AND removed_version > ?2 AND added_version <= ?2",
        (1, 5),
    )
    assert len(searches) == 2 and all(d.startswith("SEARCH files USING INDEX") for d in searches), searches
    assert "files_removed (table_id=? AND removed_version=?" in searches[0], searches  # the live files: head reads


def test_group_snapshot_query_uses_the_group_index(tmp_path: Path) -> None:
    group = "table_id = ?1 AND partition = ?2 AND bucket = ?3"
    searches = _searches(
        tmp_path,
        f"{group} AND removed_version IS NULL AND added_version <= ?4",
        f"{group} AND removed_version > ?4 AND added_version <= ?4",
        (1, '{"dt":"a"}', 0, 5),
    )
    assert len(searches) == 2 and all("USING INDEX files_group" in d for d in searches), searches
    live = "(table_id=? AND partition=? AND bucket=? AND removed_version=? AND added_version<?)"
    assert live in searches[0], searches


def test_catalog_belongs_to_one_prefix(catalog_at: Callable[[str], str]) -> None:
    CatalogWriter(catalog_at("c.db"), "ordo").close()
    with pytest.raises(RuntimeError, match="belongs to topic prefix 'ordo'"):
        CatalogWriter(catalog_at("c.db"), "other")


def test_unpartitioned_files_reject_partition_values(catalog_at: Callable[[str], str]) -> None:
    script = Script(partitioned=False, offset_step=1)
    bad = CommitIntent(
        txn_id="i",
        table="t",
        operation=Operation.INSERT_INTO,
        read_version=0,
        added_files=(DataFile(path="i-0.parquet", record_count=1, size_bytes=1),),
    )
    decision = script.submit(bad)
    assert decision.accepted
    catalog = build(catalog_at("c.db"), script)
    assert [dict(f.partition) for f in catalog.snapshot("t").files] == [{}]


def test_an_empty_catalog_file_is_unavailable_not_a_crash(catalog_at: Callable[[str], str]) -> None:
    from ordo.consumer import CatalogUnavailableError

    if catalog_at("c.db").endswith(".db"):
        sqlite3.connect(catalog_at("c.db")).close()  # created, schema not yet written (a new database is empty)
    with pytest.raises(CatalogUnavailableError, match="not initialized yet"):
        Catalog(catalog_at("c.db")).tables()
    with pytest.raises(CatalogTimeoutError):
        Catalog(catalog_at("c.db")).wait_for_version("t", 0, timeout=0.1)


def test_reading_the_catalog_imports_neither_kafka_nor_spark_nor_the_web_stack() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ordo.consumer, ordo.consumer.spark, ordo.consumer.materializer, ordo.consumer.service, ordo.consumer.store\n"
        "heavy = [m for m in ('confluent_kafka', 'pyspark', 'fastapi', 'uvicorn', 'httpx') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---------------------------------------------------------------------- ALTER TABLE


def test_an_alter_changes_the_metadata_from_its_version_on_and_shows_in_history_and_commits(
    catalog_at: Callable[[str], str], tmp_path: Path
) -> None:
    """Snapshots before the ALTER keep the older schema; the history and the commit list show it."""
    from ordo.arbiter.core import Reason

    script = Script(seed=5).run(10)
    before = script.state.metadata
    assert before is not None
    read = script.state.head_version
    stale = CommitIntent(
        txn_id="stale",
        table="t",
        operation=Operation.INSERT_INTO,
        read_version=read,
        partitions=({"dt": "a"},),
        added_files=script.files("stale", "a"),
    )
    new = before.model_copy(update={"schema": before.schema + ", `note` string", "properties": {"owner": "b"}})
    alter = script.submit(
        CommitIntent(txn_id="alter", table="t", operation=Operation.ALTER_TABLE, read_version=read, metadata=new)
    )
    assert alter.accepted, alter.message
    assert script.submit(stale).reason == Reason.SCHEMA_CHANGED
    script.run(5)
    path = catalog_at("c.db")
    catalog = build(path, script)
    assert alter.id_version is not None
    for version in range(script.model.head + 1):
        expected = before if version < alter.id_version else new
        assert catalog.snapshot("t", version).metadata == expected, version
    assert catalog.table("t").metadata == new
    history = {d.txn_id: d for d in catalog.history("t")}
    assert history["alter"].operation is Operation.ALTER_TABLE and history["alter"].id_version == alter.id_version
    assert history["stale"].reason == Reason.SCHEMA_CHANGED and history["stale"].conflicting_txn_id == "alter"
    commits = catalog.commits("t", alter.id_version, alter.id_version)
    assert [(c.id_version, c.operation, c.data_change) for c in commits] == [
        (alter.id_version, Operation.ALTER_TABLE, True)
    ]
    # The same log applied again in parts equals one go (the metadata history included).
    again = catalog_at("again.db")
    build(again, script, batch=3)
    assert catalog_rows(path) == catalog_rows(again)
    # A repair swaps in the table's rows rebuilt alone (a SQLite file), the metadata history with them.
    rebuilt = str(tmp_path / "rebuilt.db")
    build(rebuilt, script)
    writer = CatalogWriter(path, "ordo")
    try:
        conn = writer._conn
        conn.execute("DELETE FROM table_metadata")
        writer.replace_table("t", rebuilt)
    finally:
        writer.close()
    assert catalog_rows(path) == catalog_rows(again)


def catalog_rows(path: str) -> dict[str, list[tuple[object, ...]]]:
    """``dump`` plus the metadata history."""
    conn = connect(path, readonly=True)
    try:
        history = conn.execute("SELECT table_id, id_version, metadata FROM table_metadata ORDER BY 1, 2").fetchall()
    finally:
        conn.close()
    return {**dump(path), "table_metadata": [tuple(r) for r in history]}
