"""The arbiter service on a real broker, as a real ``ordo arbiter`` process.

Covers the conflict matrix through Kafka, exactly-once across kill -9 and
across a second arbiter started by mistake (fencing), bad bytes on an intents
topic, table discovery, sharding and a clean stop.
"""

from __future__ import annotations

import csv
import gc
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from ordo.arbiter.service import shard_of
from ordo.producer import ClientClosedError, CommitClient
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, Outcome, Rebase, TableMetadata, encode
from ordo.services.stack import ManagedProcess, ProcessGroup
from ordo.settings import Settings
from tests.fencing import take_over
from tests.unit.test_matrix import reference_rows

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
POLICY_MATRIX = REPO / "ordo" / "arbiter" / "policies" / "maxcompute.csv"

OPERATION_OF_CLASS = {
    "OVERWRITE": Operation.INSERT_OVERWRITE,
    "INSERT": Operation.INSERT_INTO,
    "UPDATE": Operation.UPDATE,
    "MINOR_COMPACT": Operation.MINOR_COMPACT,
    "MAJOR_COMPACT": Operation.MAJOR_COMPACT,
    "CLUSTER": Operation.CLUSTER,
}
REBASE_OF = {
    "later_overwrites": Rebase.LATER_OVERWRITES,
    "compaction_completes": Rebase.COMPACTION_COMPLETES,
    "new_data_written": Rebase.NEW_DATA_WRITTEN,
}


# --------------------------------------------------------------------------- helpers


def create_intent(table: str, txn_id: str | None = None, partitioned: bool = True) -> CommitIntent:
    """A CREATE_TABLE intent for a small table partitioned by ``p``."""
    return CommitIntent(
        txn_id=txn_id or f"create-{table}",
        table=table,
        operation=Operation.CREATE_TABLE,
        read_version=0,
        metadata=TableMetadata(
            location=f"/warehouse/{table}",
            schema="id BIGINT, v STRING, p STRING",
            primary_key=("id",),
            partition_columns=("p",) if partitioned else (),
        ),
    )


def insert_intent(table: str, txn_id: str, partition: str, read_version: int = 0, files: int = 1) -> CommitIntent:
    """An INSERT_INTO of ``files`` new files into partition ``p=partition``."""
    spec = {"p": partition}
    return CommitIntent(
        txn_id=txn_id,
        table=table,
        operation=Operation.INSERT_INTO,
        read_version=read_version,
        partitions=(spec,),
        added_files=tuple(
            DataFile(path=f"p={partition}/{txn_id}-{i}.parquet", partition=spec, record_count=10, size_bytes=1000)
            for i in range(files)
        ),
    )


def matrix_cells() -> list[tuple[str, str, str]]:
    """The 25 reference cells plus the CLUSTER cells of the maxcompute policy."""
    cells = reference_rows()  # MaxCompute's published matrix: tests/unit/conflict_matrix.csv
    assert len(cells) == 25
    with POLICY_MATRIX.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if "CLUSTER" in (row["earlier"].strip(), row["later"].strip()):
                cells.append((row["earlier"].strip(), row["later"].strip(), row["outcome"].strip()))
    assert len(cells) == 36
    return cells


def check_log(decisions: list[CommitDecision], intents: int) -> None:
    """Exactly one decision per intent offset 0..intents-1, ID versions contiguous from 0 in log order."""
    offsets = [d.intent_offset for d in decisions]
    assert sorted(offsets) == list(range(intents)), "an intent was decided twice or never"
    assert offsets == sorted(offsets), "decisions out of intent order"
    versions = [d.id_version for d in decisions if d.outcome is Outcome.ACCEPTED and d.duplicate_of is None]
    assert versions == list(range(len(versions))), "ID versions not contiguous from 0"


class Writers:
    """Threads that submit non-conflicting inserts (one partition each) until stopped or a quota is reached."""

    def __init__(self, client: CommitClient, table: str, threads: int, per_thread: int, pause: float = 0.0) -> None:
        self.client = client
        self.table = table
        self.per_thread = per_thread
        self.pause = pause
        self.futures: dict[str, Future[CommitDecision]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, index: int) -> None:
        for n in range(self.per_thread):
            if self._stop.is_set():
                return
            txn = f"w{index}-{n}"
            try:
                future = self.client.submit(insert_intent(self.table, txn, partition=txn), timeout=90)
            except ClientClosedError:
                return  # the test ended early (it failed); nothing to wait for
            with self._lock:
                self.futures[txn] = future
            if self.pause:
                time.sleep(self.pause * random.uniform(0.5, 1.5))

    def start(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def done_count(self) -> int:
        with self._lock:
            return sum(1 for f in self.futures.values() if f.done())

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> dict[str, CommitDecision]:
        for thread in self._threads:
            thread.join(timeout=60)
        with self._lock:
            futures = dict(self.futures)
        return {txn: future.result(timeout=90) for txn, future in futures.items()}


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.02)


def check_futures(answers: dict[str, CommitDecision], log: list[CommitDecision]) -> None:
    """Every future returned exactly the decision the log holds for its intent."""
    by_offset = {d.intent_offset: d for d in log}
    for txn, decision in answers.items():
        assert decision.txn_id == txn
        assert by_offset[decision.intent_offset] == decision


# --------------------------------------------------------------------------- conflict matrix


def _cell_intents(table: str, earlier: str, later: str) -> list[CommitIntent]:
    """Create, two seed inserts (versions 1, 2), then ``earlier`` and ``later`` both read at version 2."""
    spec = {"p": "1"}

    def data_file(name: str) -> DataFile:
        return DataFile(path=f"p=1/{name}-0.parquet", partition=spec, record_count=5, size_bytes=500)

    def op(cls: str, tag: str) -> CommitIntent:
        operation = OPERATION_OF_CLASS[cls]
        rewrites = operation.rewrites
        return CommitIntent(
            txn_id=f"{table}-{tag}",
            table=table,
            operation=operation,
            read_version=2,
            partitions=(spec,),
            added_files=(data_file(f"{tag}-out" if rewrites else tag),),
            removed_files=("p=1/a1-0.parquet", "p=1/a2-0.parquet") if rewrites else (),
        )

    seed = [
        CommitIntent(
            txn_id=f"{table}-{name}",
            table=table,
            operation=Operation.INSERT_INTO,
            read_version=version,
            partitions=(spec,),
            added_files=(data_file(name),),
        )
        for version, name in ((0, "a1"), (1, "a2"))
    ]
    return [create_intent(table), *seed, op(earlier, "e"), op(later, "l")]


@pytest.fixture(scope="module")
def matrix_results(make_settings: Callable[..., Settings]) -> Iterator[dict[tuple[str, str], list[CommitDecision]]]:
    """One arbiter decides all 36 cells, each on its own table, all in flight at once."""
    settings = make_settings()
    with ProcessGroup() as group, CommitClient(settings=settings) as client:
        group.start_arbiter(settings)
        futures: dict[tuple[str, str], list[Future[CommitDecision]]] = {}
        for earlier, later, _ in matrix_cells():
            table = f"m_{earlier}_{later}".lower()
            # 72 topics and 180 intents at once: a loaded 2-core machine has taken over 60 s for the last of them
            futures[(earlier, later)] = [client.submit(i, timeout=180) for i in _cell_intents(table, earlier, later)]
        yield {cell: [f.result(timeout=240) for f in fs] for cell, fs in futures.items()}
        group.kill()


@pytest.mark.parametrize(("earlier", "later", "outcome"), matrix_cells(), ids=lambda v: str(v))
def test_conflict_matrix_cell_through_kafka(
    matrix_results: dict[tuple[str, str], list[CommitDecision]], earlier: str, later: str, outcome: str
) -> None:
    create, seed1, seed2, first, second = matrix_results[(earlier, later)]
    assert [d.id_version for d in (create, seed1, seed2)] == [0, 1, 2]
    assert first.outcome is Outcome.ACCEPTED and first.id_version == 3 and first.rebase is Rebase.NONE
    if outcome == "later_fails":
        assert second.outcome is Outcome.REJECTED
        assert second.reason == "CONFLICT_LATER_FAILS"
        assert second.conflicting_txn_id == first.txn_id
        assert second.conflicting_version == 3
        assert second.id_version is None
        return
    assert second.outcome is Outcome.ACCEPTED, second.message
    assert second.id_version == 4
    assert second.rebase is REBASE_OF[outcome]
    # The resolved file actions after the metadata-level rebase.
    seeds = {"p=1/a1-0.parquet", "p=1/a2-0.parquet"}
    first_added = {f.path for f in first.added_files}
    live = set(seeds)
    if OPERATION_OF_CLASS[earlier] is Operation.INSERT_OVERWRITE:
        live = set(first_added)
    elif OPERATION_OF_CLASS[earlier].rewrites:
        live = (live - seeds) | first_added
    else:
        live |= first_added
    removed = set(second.removed_files)
    if outcome == "later_overwrites":
        assert removed == live  # the earlier job's files included
    elif outcome == "compaction_completes":
        expected = first_added if OPERATION_OF_CLASS[earlier].rewrites else seeds
        assert removed == expected  # files the earlier job added stay live
    else:
        assert outcome == "new_data_written"
        assert removed == set()
        assert {f.path for f in second.added_files} == {"p=1/l-0.parquet"}


# --------------------------------------------------------------------------- exactly once


def test_kill_9_mid_stream_loses_and_repeats_nothing(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient, settings: Settings
) -> None:
    table = "killed"
    first = arbiter()
    commit_client.commit(create_intent(table), timeout=30)
    writers = Writers(commit_client, table, threads=8, per_thread=120, pause=0.004).start()
    total = 8 * 120
    wait_until(lambda: writers.done_count() >= total // 4, 60, "a quarter of the intents decided")
    assert first.kill() == -9
    second = arbiter()
    wait_until(lambda: writers.done_count() >= total // 2, 60, "half of the intents decided after the restart")
    assert second.kill() == -9
    arbiter()
    answers = writers.join()
    assert len(answers) == total
    assert all(d.outcome is Outcome.ACCEPTED for d in answers.values())
    log = commit_client.decisions(table)
    check_log(log, total + 1 + commit_client.resubmits)  # an overdue intent is published again
    check_futures(answers, log)


def test_second_arbiter_fences_the_first(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient, settings: Settings
) -> None:
    table = "fenced"
    # Tansu answers a fenced producer's EndTxn by dropping the connection, so a
    # fenced arbiter caught committing only learns it from the commit timeout.
    first = arbiter(args=["--commit-timeout", "5"])
    commit_client.commit(create_intent(table), timeout=30)
    writers = Writers(commit_client, table, threads=2, per_thread=100_000, pause=0.005).start()
    try:
        wait_until(lambda: writers.done_count() >= 100, 180, "the first arbiter to decide")
        second = take_over(first, arbiter)  # frozen mid-transaction, it wakes up fenced (tests/fencing.py)
        code = first.wait(timeout=30)  # it finds out at its next produce or commit
        assert code == 3
        assert "fenced" in first.tail(5)
        decided_by_second = writers.done_count()
        wait_until(lambda: writers.done_count() >= decided_by_second + 100, 180, "the second arbiter to continue")
    finally:
        writers.stop()
    answers = writers.join()
    assert second.running
    log = commit_client.decisions(table)
    check_log(log, len(answers) + 1 + commit_client.resubmits)  # an overdue intent is published again
    check_futures(answers, log)


# --------------------------------------------------------------------------- bad input, tables, shards


def test_bad_records_get_rejections_and_the_next_intent_is_accepted(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    table = "garbage"
    process = arbiter()
    assert commit_client.commit(create_intent(table), timeout=30).id_version == 0
    foreign = insert_intent("other_table", "foreign", "1")
    raw = [b"garbage \x00\xff", None, b"\xc3\x01" + b"\x00" * 8, encode(foreign)]
    offsets = [commit_client.publish_raw(table, value) for value in raw]
    assert offsets == [1, 2, 3, 4]
    decision = commit_client.commit(insert_intent(table, "valid", "1"), timeout=30)
    assert decision.outcome is Outcome.ACCEPTED and decision.id_version == 1 and decision.intent_offset == 5
    log = commit_client.decisions(table)
    check_log(log, 6)
    assert [d.reason for d in log[1:5]] == [
        "MALFORMED_INTENT",
        "MALFORMED_INTENT",
        "MALFORMED_INTENT",
        "TABLE_MISMATCH",
    ]
    assert all(d.outcome is Outcome.REJECTED and d.message for d in log[1:5])
    rejections = [
        json.loads(line[line.index("{") :]) for line in process.log_text().splitlines() if '"rejected"' in line
    ]
    assert [(r["table"], r["offset"], r["reason"]) for r in rejections] == [
        (table, 1, "MALFORMED_INTENT"),
        (table, 2, "MALFORMED_INTENT"),
        (table, 3, "MALFORMED_INTENT"),
        (table, 4, "TABLE_MISMATCH"),
    ]
    assert process.running


def test_a_hostile_writer_is_refused_with_stable_reasons_and_a_restart_remembers(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    """Hand-built intents a buggy or hostile writer could send: each rejected, before and after a restart."""
    table = "hostile"

    def data_file(path: str, partition: str) -> DataFile:
        return DataFile(path=path, partition={"p": partition}, record_count=1, size_bytes=10)

    def intent(
        txn: str, operation: Operation, read: int, part: str, added: tuple[DataFile, ...], removed: tuple[str, ...] = ()
    ) -> CommitIntent:
        return CommitIntent(
            txn_id=txn,
            table=table,
            operation=operation,
            read_version=read,
            partitions=({"p": part},),
            added_files=added,
            removed_files=removed,
        )

    def commit(value: CommitIntent, raw: bool = False) -> CommitDecision:
        if raw:  # straight onto the intents topic, as a producer that is not our client would
            offset = commit_client.publish_raw(table, encode(value))
            wait_until(lambda: len(commit_client.decisions(table)) > offset, 30, f"the decision of offset {offset}")
            return commit_client.decisions(table)[offset]
        return commit_client.commit(value, timeout=30)

    first = arbiter()
    assert commit(create_intent(table)).id_version == 0
    base = (data_file("p=a/w1-0.parquet", "a"), data_file("p=a/w1-1.parquet", "a"))
    assert commit(intent("w1", Operation.INSERT_INTO, 0, "a", base)).id_version == 1
    assert commit(intent("d1", Operation.DELETE, 1, "a", (data_file("p=a/d1-0.parquet", "a"),))).id_version == 2
    assert commit(intent("b1", Operation.INSERT_INTO, 2, "b", (data_file("p=b/b1-0.parquet", "b"),))).id_version == 3
    lost = commit(intent("lost", Operation.INSERT_INTO, 0, "a", (data_file("p=a/lost-0.parquet", "a"),)))
    assert lost.reason == "CONFLICT_LATER_FAILS"

    out = (data_file("p=a/maj-0.parquet", "a"),)
    hostile = [
        # A MAJOR rewriting only the delete file would resurrect the deleted keys.
        (intent("maj1", Operation.MAJOR_COMPACT, 3, "a", out, ("p=a/d1-0.parquet",)), "INCOMPLETE_REWRITE"),
        # A compaction declaring partition a but removing a file of b.
        (
            intent("min1", Operation.MINOR_COMPACT, 3, "a", out, ("p=a/w1-0.parquet", "p=b/b1-0.parquet")),
            "FILE_OUTSIDE_SCOPE",
        ),
        # A file labelled a stored under b.
        (
            intent("mis1", Operation.INSERT_INTO, 3, "a", (data_file("p=b/mis1-0.parquet", "a"),)),
            "PATH_PARTITION_MISMATCH",
        ),
        # A name without a write id.
        (intent("nam1", Operation.INSERT_INTO, 3, "a", (data_file("p=a/data.parquet", "a"),)), "INVALID_PATH"),
        # A file in bucket 1 of a table with one bucket (no ordo.buckets).
        (
            intent(
                "bkt1",
                Operation.INSERT_INTO,
                3,
                "a",
                (DataFile(path="p=a/bkt1-0.parquet", partition={"p": "a"}, record_count=1, size_bytes=10, bucket=1),),
            ),
            "INVALID_BUCKET",
        ),
    ]
    for value, reason in hostile:
        decision = commit(value, raw=True)
        assert (decision.outcome, decision.reason) == (Outcome.REJECTED, reason), decision.message
    assert commit(intent("tr1", Operation.TRUNCATE, 3, "b", ())).id_version == 4
    readd = commit(intent("again", Operation.INSERT_INTO, 4, "b", (data_file("p=b/b1-0.parquet", "b"),)), raw=True)
    assert readd.reason == "PATH_REUSED", readd.message
    # The metadata-level retry: the rejected txn's files under a new txn id.
    retry = commit(intent("lost-r1", Operation.INSERT_INTO, 4, "a", (data_file("p=a/lost-0.parquet", "a"),)))
    assert retry.accepted and retry.id_version == 5

    assert first.terminate(timeout=15) == 0
    arbiter()  # rebuilt from the decisions log (or its checkpoint): the spent write ids are remembered
    for txn, path, part in (("again2", "p=b/b1-1.parquet", "b"), ("again3", "p=a/lost-1.parquet", "a")):
        decision = commit(intent(txn, Operation.INSERT_INTO, 5, part, (data_file(path, part),)), raw=True)
        assert decision.reason == "PATH_REUSED", decision.message
    every = ("p=a/w1-0.parquet", "p=a/w1-1.parquet", "p=a/d1-0.parquet", "p=a/lost-0.parquet")
    major = commit(intent("maj2", Operation.MAJOR_COMPACT, 5, "a", out, every))
    assert major.accepted and set(major.removed_files) == set(every), major.message
    check_log(commit_client.decisions(table), len(commit_client.decisions(table)))


def test_intent_for_a_table_never_created_is_rejected_unknown_table(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    arbiter()
    offset = commit_client.publish_raw("ghost", encode(insert_intent("ghost", "lost", "1")))
    wait_until(lambda: len(commit_client.decisions("ghost")) == 1, 30, "a decision for the ghost table")
    (decision,) = commit_client.decisions("ghost")
    assert decision.intent_offset == offset
    assert decision.outcome is Outcome.REJECTED and decision.reason == "UNKNOWN_TABLE"


def test_new_table_is_picked_up_within_seconds(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    arbiter()
    time.sleep(0.5)  # the arbiter is idle with no tables
    start = time.monotonic()
    decision = commit_client.commit(create_intent("late_table"), timeout=30)
    assert decision.outcome is Outcome.ACCEPTED and decision.id_version == 0
    assert time.monotonic() - start < 5.0
    assert commit_client.commit(insert_intent("late_table", "i1", "x"), timeout=30).id_version == 1


def test_shards_split_the_tables(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient, settings: Settings
) -> None:
    tables = [f"s{i}" for i in range(8)]
    owners = {t: shard_of(t, 2) for t in tables}
    assert set(owners.values()) == {0, 1}, "pick table names that land in both shards"
    shard0 = arbiter((0, 2))
    shard1 = arbiter((1, 2))
    futures = [commit_client.submit(create_intent(t), timeout=30) for t in tables]
    futures += [commit_client.submit(insert_intent(t, f"{t}-i", "1"), timeout=30) for t in tables]
    assert [f.result().id_version for f in futures] == [0] * 8 + [1] * 8
    for table, owner in owners.items():
        mine, other = (shard0, shard1) if owner == 0 else (shard1, shard0)
        assert f"table {table}: rebuilt" in mine.log_text()
        assert f"table {table}: rebuilt" not in other.log_text()
        check_log(commit_client.decisions(table), 2)


def test_sigterm_stops_cleanly_and_restart_resumes(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    table = "restarted"
    first = arbiter()
    commit_client.commit(create_intent(table), timeout=30)
    assert commit_client.commit(insert_intent(table, "a", "1"), timeout=30).id_version == 1
    assert first.terminate(timeout=15) == 0
    assert '"decided": 2' in first.tail(3)
    second = arbiter()
    assert "rebuilt 2 decision(s), head version 1, resuming intents at offset 2" in second.log_text()
    assert commit_client.commit(insert_intent(table, "b", "1", read_version=1), timeout=30).id_version == 2
    check_log(commit_client.decisions(table), 3)


# --------------------------------------------------------------------------- in process, with injected faults


class InProcessArbiter:
    """An ``ArbiterService`` on a thread of the test process (for fault injection by monkeypatch)."""

    def __init__(self, settings: Settings) -> None:
        from ordo.arbiter.service import ArbiterService

        self.service = ArbiterService(settings, discovery_interval=0.2)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.service.run()
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> InProcessArbiter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.service.stop()
        self.thread.join(timeout=30)
        gc.unfreeze()  # the arbiter froze the heap after its rebuilds; this process is the test run's
        assert not self.thread.is_alive(), "the arbiter did not stop"


def test_the_rebuilt_state_is_frozen_out_of_full_collections(settings: Settings, commit_client: CommitClient) -> None:
    with InProcessArbiter(settings) as running:
        commit_client.commit(create_intent("frozen"), timeout=30)
        assert commit_client.commit(insert_intent("frozen", "a", "1"), timeout=30).id_version == 1
        (table,) = [t for t in running.service.owned.by_topic.values() if t.name == "frozen"]
        state = table.state
        assert not any(o is state for o in gc.get_objects()), "the table's state, built at its rebuild, is not frozen"
        assert running.error is None


def test_core_raising_on_evaluate_becomes_a_malformed_rejection(
    settings: Settings, commit_client: CommitClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ordo.arbiter.decider as decider_module

    real = decider_module.evaluate_record

    def faulty(state: Any, value: bytes | None, timestamp: int, offset: int) -> CommitDecision:
        if value is not None and b"explode" in value:
            raise RuntimeError("injected fault in evaluate")
        return real(state, value, timestamp, offset)

    monkeypatch.setattr(decider_module, "evaluate_record", faulty)
    with InProcessArbiter(settings) as running:
        commit_client.commit(create_intent("faulty"), timeout=30)
        bad = commit_client.commit(insert_intent("faulty", "explode", "1"), timeout=30)
        good = commit_client.commit(insert_intent("faulty", "fine", "1"), timeout=30)
        assert running.error is None
        assert running.service.metrics.internal_errors == 1
    assert bad.outcome is Outcome.REJECTED and bad.reason == "MALFORMED_INTENT"
    assert "injected fault in evaluate" in (bad.message or "")
    assert good.outcome is Outcome.ACCEPTED and good.id_version == 1
    check_log(commit_client.decisions("faulty"), 3)


def test_core_raising_on_apply_aborts_rebuilds_and_rejects_that_record(
    settings: Settings, commit_client: CommitClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ordo.arbiter.decider as decider_module

    real = decider_module.apply

    def faulty(state: Any, decision: CommitDecision, data: bytes | None = None) -> Any:
        real(state, decision, data)  # leaves the state advanced, as a half-done fold would
        if decision.txn_id == "explode":
            raise RuntimeError("injected fault in apply")
        return state

    monkeypatch.setattr(decider_module, "apply", faulty)
    with InProcessArbiter(settings) as running:
        commit_client.commit(create_intent("halfdone"), timeout=30)
        futures = [
            commit_client.submit(insert_intent("halfdone", txn, txn), timeout=30)
            for txn in ("before", "explode", "after")
        ]
        before, bad, after = (f.result(timeout=60) for f in futures)
        assert running.error is None
        assert running.service.metrics.aborts == 1
        assert running.service.tables["halfdone"].head_version == 2
    assert before.outcome is Outcome.ACCEPTED and before.id_version == 1
    assert (
        bad.outcome is Outcome.REJECTED and bad.reason == "MALFORMED_INTENT" and "internal error" in (bad.message or "")
    )
    assert after.outcome is Outcome.ACCEPTED and after.id_version == 2
    check_log(commit_client.decisions("halfdone"), 4)
