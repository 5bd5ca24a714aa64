"""Property-based: random concurrent transactions against a serial model of the data.

A Hypothesis state machine begins transactions of every class on random
partitions (each pinned to the head when it begins), stages their data like a
writer would (records with keys, compaction outputs that keep each record's
sequence number), and submits them in random interleavings. Invariants:

* accepted ID versions are contiguous from 0 and time versions strictly increase;
* replaying the decision log into a fresh state equals the live state;
* the merge-on-read content of the live files equals a serial model that applies
  the accepted logical commits in version order (compactions change nothing).

RESTOREs to a random earlier version re-add that version's files: the serial
model becomes its content at that version, and the merge-on-read of the live
files must equal it (a re-added file's records keep their sequence numbers).

Besides honest writers it plays a buggy one: MAJOR/CLUSTER rewrites of a random
subset of a partition's files, and files re-added under a spent write id. The
arbiter must refuse whatever would break the serial model (a dropped delete
resurrecting a key, a path live twice), and the metadata-level retry of a
rejected INSERT INTO (the same files under a new txn id) must commit.
"""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ordo.arbiter.core import Reason, TableState, apply, evaluate, new_state, rebuild
from ordo.schemas import CommitIntent, DataFile, Operation, encode
from tests.profiles import examples

from .helpers import metadata

PARTITIONS = ("a", "b", "c")
KEYS = range(4)
Record = tuple[str, int, int | None]  # (op, value, seq carried in the file or None)


class ConcurrentTransactions(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state: TableState = new_state("t")
        self.log: list[bytes] = []
        self.offsets = itertools.count()
        self.names = itertools.count()
        self.files: dict[str, dict[tuple[str, int], Record]] = {}  # path -> records by (partition, key)
        self.added_at: dict[str, int] = {}
        self.pending: list[tuple[CommitIntent, dict[str, dict[tuple[str, int], Record]]]] = []
        self.lost_inserts: list[tuple[CommitIntent, dict[str, dict[tuple[str, int], Record]]]] = []
        self.ever_added: set[str] = set()
        self.serial: dict[tuple[str, int], int] = {}
        self.serial_at: dict[int, dict[tuple[str, int], int]] = {}  # the serial content at each version
        self.live_at: dict[int, frozenset[str]] = {}  # the live paths at each version
        self._submit(
            CommitIntent(
                txn_id="create", table="t", operation=Operation.CREATE_TABLE, read_version=0, metadata=metadata()
            ),
            {},
        )

    # -- helpers ---------------------------------------------------------------------------

    def _submit(self, intent: CommitIntent, staged: dict[str, dict[tuple[str, int], Record]]) -> None:
        offset = next(self.offsets)
        decision = evaluate(self.state, intent, 1_000 + offset, offset)
        data = encode(decision)
        apply(self.state, decision, data)
        self.log.append(data)
        if decision.reason == Reason.CONFLICT_LATER_FAILS and intent.operation is Operation.INSERT_INTO:
            self.lost_inserts.append((intent, staged))
        if not decision.accepted or decision.duplicate_of is not None:
            return
        version = decision.id_version
        assert version is not None
        if intent.operation is Operation.RESTORE:  # only files of the restored version, which keep their records
            restored = intent.restore_version
            assert restored is not None
            assert {f.path for f in decision.added_files} <= self.live_at[restored] - self.live_at[version - 1]
            assert set(self.state.files) == self.live_at[restored], "a RESTORE gives exactly that version's files"
            self.serial = dict(self.serial_at[restored])
        else:
            assert not self.ever_added & {f.path for f in decision.added_files}, "a path was added twice"
            self.ever_added.update(f.path for f in decision.added_files)
            for path in decision.added_files:
                self.files[path.path] = staged[path.path]
                self.added_at[path.path] = version
            self._serial_apply(intent, version, staged)
        self.serial_at[version] = dict(self.serial)
        self.live_at[version] = frozenset(self.state.files)

    def _serial_apply(self, intent: CommitIntent, version: int, staged: dict) -> None:
        op = intent.operation
        if op in (Operation.INSERT_OVERWRITE, Operation.TRUNCATE):
            scope = None if intent.partitions is None else {p["dt"] for p in intent.partitions}
            self.serial = {k: v for k, v in self.serial.items() if scope is not None and k[0] not in scope}
        if op.data_change:
            for records in staged.values():
                for key, (kind, value, _) in records.items():
                    if kind == "delete":
                        self.serial.pop(key, None)
                    else:
                        self.serial[key] = value

    def _visible(self, paths: set[str] | None = None) -> dict[tuple[str, int], tuple[int, str, int]]:
        """Merge-on-read: per key the record with the highest effective sequence number."""
        best: dict[tuple[str, int], tuple[int, str, int]] = {}
        for path in self.state.files if paths is None else paths:
            for key, (kind, value, seq) in self.files[path].items():
                effective = seq if seq is not None else self.added_at[path]
                if key not in best or effective > best[key][0]:
                    best[key] = (effective, kind, value)
        return best

    def _live_in(self, dt: str | None) -> set[str]:
        if dt is None:
            return set(self.state.files)
        part = self.state.partitions.get((dt,))
        return set(part.live) if part else set()

    def _begin(self, operation: Operation, dt: str | None, values: list[int], subset: int | None = None) -> None:
        txn = f"x{next(self.names)}"
        read = self.state.head_version
        if operation is Operation.RESTORE:  # to a version picked from the values; re-adds what is not live now
            target = values[0] % (read + 1)
            live = self.live_at[read]
            again = tuple(
                DataFile(path=path, partition={"dt": path[3:4]}, record_count=len(self.files[path]), size_bytes=1)
                for path in sorted(self.live_at[target] - live)
            )
            intent = CommitIntent(
                txn_id=txn, table="t", operation=operation, read_version=read, added_files=again, restore_version=target
            )
            self.pending.append((intent, {}))
            return
        staged: dict[str, dict[tuple[str, int], Record]] = {}
        removed: tuple[str, ...] = ()
        targets = [dt] if dt is not None else list(PARTITIONS)
        visible = self._visible()
        if operation.rewrites:
            inputs = self._live_in(dt)
            if subset is not None:  # a buggy writer: only some of the files it read
                inputs = {path for i, path in enumerate(sorted(inputs)) if subset >> i & 1}
            if not inputs:
                return
            removed = tuple(sorted(inputs))
            merged = self._visible(inputs)
            for part in sorted({key[0] for key in merged}):
                records = {
                    key: (kind, value, seq)
                    for key, (seq, kind, value) in merged.items()
                    if key[0] == part and (operation is Operation.MINOR_COMPACT or kind != "delete")
                }
                if records:
                    staged[f"dt={part}/{txn}-0.parquet"] = records
        elif operation is not Operation.TRUNCATE:
            for part in targets:
                records: dict[tuple[str, int], Record] = {}
                for key, value in zip(KEYS, values, strict=False):
                    live_kind = visible.get((part, key), (0, "delete", 0))[1]
                    if operation is Operation.DELETE:
                        if live_kind == "upsert":
                            records[(part, key)] = ("delete", 0, None)
                    elif operation is Operation.UPDATE:
                        if live_kind == "upsert":
                            records[(part, key)] = ("upsert", value, None)
                    else:
                        records[(part, key)] = ("upsert", value, None)
                if records:
                    staged[f"dt={part}/{txn}-0.parquet"] = records
        files = tuple(
            DataFile(path=path, partition={"dt": path[3:4]}, record_count=len(recs), size_bytes=1)
            for path, recs in staged.items()
        )
        intent = CommitIntent(
            txn_id=txn,
            table="t",
            operation=operation,
            read_version=read,
            partitions=None if dt is None else ({"dt": dt},),
            added_files=files,
            removed_files=removed,
        )
        self.pending.append((intent, staged))

    # -- rules -----------------------------------------------------------------------------

    @rule(
        operation=st.sampled_from([op for op in Operation if op is not Operation.CREATE_TABLE]),
        dt=st.sampled_from([*PARTITIONS, None]),
        values=st.lists(st.integers(0, 9), min_size=1, max_size=4),
    )
    def begin(self, operation: Operation, dt: str | None, values: list[int]) -> None:
        self._begin(operation, dt, values)

    @rule(
        operation=st.sampled_from([Operation.MAJOR_COMPACT, Operation.CLUSTER, Operation.MINOR_COMPACT]),
        dt=st.sampled_from(PARTITIONS),
        subset=st.integers(1, 2**8 - 1),
    )
    def begin_partial_rewrite(self, operation: Operation, dt: str, subset: int) -> None:
        self._begin(operation, dt, [], subset)

    @precondition(lambda self: bool(self.lost_inserts))
    @rule(index=st.integers(0, 10))
    def retry_a_lost_insert(self, index: int) -> None:
        """The metadata-level retry: the same files under a new txn id, read at the head."""
        intent, staged = self.lost_inserts.pop(index % len(self.lost_inserts))
        retry = intent.model_copy(update={"txn_id": f"x{next(self.names)}", "read_version": self.state.head_version})
        self._submit(retry, staged)

    @precondition(lambda self: bool(self.ever_added))
    @rule(index=st.integers(0, 200), dt=st.sampled_from(PARTITIONS))
    def re_add_a_spent_write_id(self, index: int, dt: str) -> None:
        """A buggy writer reusing the write id of files committed before (live or not)."""
        old = sorted(self.ever_added)[index % len(self.ever_added)]
        write_id = old.rpartition("/")[2].rpartition("-")[0]
        path = f"dt={dt}/{write_id}-9.parquet"
        intent = CommitIntent(
            txn_id=f"x{next(self.names)}",
            table="t",
            operation=Operation.INSERT_INTO,
            read_version=self.state.head_version,
            partitions=({"dt": dt},),
            added_files=(DataFile(path=path, partition={"dt": dt}, record_count=1, size_bytes=1),),
        )
        offset = next(self.offsets)
        decision = evaluate(self.state, intent, 1_000 + offset, offset)
        assert decision.reason == Reason.PATH_REUSED, decision
        data = encode(decision)
        apply(self.state, decision, data)
        self.log.append(data)

    @precondition(lambda self: bool(self.pending))
    @rule(index=st.integers(0, 10))
    def submit(self, index: int) -> None:
        intent, staged = self.pending.pop(index % len(self.pending))
        self._submit(intent, staged)

    @precondition(lambda self: len(self.log) > 1)
    @rule(index=st.integers(0, 50))
    def resubmit_a_decided_txn(self, index: int) -> None:
        """A writer retrying a publish: the same txn id must get the same answer and change nothing."""
        from ordo.schemas import decode

        original = decode(self.log[index % len(self.log)])
        if not original.txn_id or original.operation in (None, Operation.CREATE_TABLE):
            return
        head = self.state.head_version
        intent = CommitIntent(
            txn_id=original.txn_id, table="t", operation=original.operation, read_version=min(head, 0)
        )
        offset = next(self.offsets)
        again = evaluate(self.state, intent, 1_000 + offset, offset)
        assert again.duplicate_of == original.intent_offset or original.duplicate_of is not None
        assert (again.outcome, again.id_version) == (original.outcome, original.id_version)
        data = encode(again)
        apply(self.state, again, data)
        self.log.append(data)
        assert self.state.head_version == head

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def versions_are_contiguous(self) -> None:
        from ordo.schemas import decode

        decisions = [decode(d) for d in self.log]
        firsts = [d for d in decisions if d.accepted and d.duplicate_of is None]
        assert [d.id_version for d in firsts] == list(range(len(firsts)))
        times = [d.time_version for d in firsts if d.time_version is not None]
        assert all(a < b for a, b in itertools.pairwise(times))

    @invariant()
    def replay_equals_live_state(self) -> None:
        replayed = rebuild("t", self.log)
        for name in (
            "added_at",
            "gone",
            "restore_floor",
            "head_version",
            "head_time_ms",
            "files",
            "data_versions",
            "write_ids",
            "whole",
            "any_scope",
            "batches",
            "chain",
            "metadata",
        ):
            assert getattr(replayed, name) == getattr(self.state, name), name
        assert {k: (p.live, p.last) for k, p in replayed.partitions.items()} == {
            k: (p.live, p.last) for k, p in self.state.partitions.items()
        }
        assert list(replayed.txns) == list(self.state.txns)

    @invariant()
    def data_equals_the_serial_model(self) -> None:
        content = {key: value for key, (_, kind, value) in self._visible().items() if kind == "upsert"}
        assert content == self.serial


TestConcurrentTransactions = ConcurrentTransactions.TestCase
TestConcurrentTransactions.settings = settings(max_examples=examples(150), stateful_step_count=40, deadline=None)
