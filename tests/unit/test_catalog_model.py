"""A plain-Python model of what the catalog must hold, and a driver of the pure core that builds decision logs.

``LiveModel`` folds accepted decisions into the live file set of every ID
version and the time a reader sees each version at; it is the oracle the
catalog tests (unit, integration, e2e) compare against. ``Script`` drives
``arbiter.core`` like the arbiter's Kafka loop does and records the decision
log as the consumer would read it (bytes, offsets with gaps for transaction
markers, record timestamps). The tests at the bottom check the model itself
against the core's own state.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ordo.arbiter.core import Reason, TableState, apply, datetime_to_millis, evaluate, new_state
from ordo.consumer.store import LogRecord
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, TableMetadata, encode

PARTITIONS = ("a", "b", "c")


@dataclass
class LiveModel:
    """Live files (path -> added version) and effective time (ms) of every ID version, from accepted decisions."""

    versions: list[dict[str, int]] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)  # path -> partition

    def apply(self, decision: CommitDecision) -> None:
        """Fold one decision (rejections and duplicate answers change nothing)."""
        if not decision.accepted or decision.duplicate_of is not None:
            return
        version = decision.id_version
        assert version == len(self.versions), (version, len(self.versions))
        assert decision.operation is not None
        live = dict(self.versions[-1]) if self.versions else {}
        for path in decision.removed_files:
            del live[path]
        for f in decision.added_files:
            live[f.path] = version
            self.partitions[f.path] = dict(f.partition)
        self.versions.append(live)
        if decision.time_version is not None:
            self.times.append(datetime_to_millis(decision.time_version))
        else:
            self.times.append(self.times[-1])
        self.operations.append(decision.operation)

    @property
    def head(self) -> int:
        """The latest ID version."""
        return len(self.versions) - 1

    def live(self, version: int) -> dict[str, int]:
        """Live files at ``version``."""
        return self.versions[version]

    def version_at(self, millis: int) -> int | None:
        """The highest ID version whose (inherited) time is <= ``millis``, None before creation."""
        found = None
        for version, at in enumerate(self.times):
            if at <= millis:
                found = version
        return found

    def logical(self, low: int, high: int) -> list[int]:
        """ID versions in ``[low, high]`` that changed logical data."""
        return [v for v in range(low, min(high, self.head) + 1) if self.operations[v].data_change]


def metadata(partitioned: bool = True, location: str = "/warehouse/t") -> TableMetadata:
    """The metadata of the test table: ``id`` key, ``v`` value, ``dt`` partition column."""
    return TableMetadata(
        location=location,
        schema="id BIGINT, v STRING, dt STRING",
        primary_key=("id",),
        partition_columns=("dt",) if partitioned else (),
    )


class IntentSource:
    """Random transactions against a table, each pinned to a (sometimes stale) snapshot of ``LiveModel``.

    Used with the pure core (``Script``) and with the real arbiter (integration
    tests): it only reads the model, never the arbiter's state.
    """

    def __init__(self, table: str = "t", *, partitioned: bool = True, seed: int = 0) -> None:
        self.table = table
        self.partitioned = partitioned
        self.rng = random.Random(seed)
        self.sent: list[CommitIntent] = []
        self._names = 0

    def create(self, location: str) -> CommitIntent:
        """The CREATE_TABLE intent."""
        return CommitIntent(
            txn_id="create",
            table=self.table,
            operation=Operation.CREATE_TABLE,
            read_version=0,
            metadata=metadata(self.partitioned, location),
        )

    def name(self) -> str:
        self._names += 1
        return f"x{self._names}"

    def files(self, txn: str, dt: str | None, n: int = 1) -> tuple[DataFile, ...]:
        """``n`` data files of ``txn`` in partition ``dt``."""
        if not self.partitioned:
            dt = None
        prefix = f"dt={dt}/" if dt is not None else ""
        partition = {"dt": dt} if dt is not None else {}
        return tuple(
            DataFile(
                path=f"{prefix}{txn}-{i}.parquet", partition=partition, record_count=10 + i, size_bytes=100 * (i + 1)
            )
            for i in range(n)
        )

    def live_in(self, model: LiveModel, version: int, dt: str | None) -> tuple[str, ...]:
        """Paths live at ``version`` in partition ``dt`` (all if None or unpartitioned)."""
        live = model.live(version)
        if dt is None or not self.partitioned:
            return tuple(sorted(live))
        return tuple(sorted(p for p in live if model.partitions[p].get("dt") == dt))

    def next(self, model: LiveModel) -> CommitIntent:
        """One random transaction (some concurrent, some repeated) read at or before ``model.head``."""
        rng = self.rng
        if self.sent and rng.random() < 0.06:
            return rng.choice(self.sent)  # a retried intent: answered as a duplicate
        read = max(0, model.head - rng.choice((0, 0, 0, 1, 2, 4)))
        dt = rng.choice(PARTITIONS) if self.partitioned else None
        whole = rng.random() < 0.15
        scope = None if whole or dt is None else ({"dt": dt},)
        operation = rng.choices(
            (
                Operation.INSERT_INTO,
                Operation.UPDATE,
                Operation.DELETE,
                Operation.INSERT_OVERWRITE,
                Operation.TRUNCATE,
                Operation.MINOR_COMPACT,
                Operation.MAJOR_COMPACT,
                Operation.CLUSTER,
            ),
            weights=(8, 3, 2, 2, 1, 2, 2, 1),
        )[0]
        txn = self.name()
        removed: tuple[str, ...] = ()
        added = self.files(txn, dt, rng.choice((1, 1, 2, 3)))
        if operation is Operation.TRUNCATE:
            added = ()
        if operation.rewrites:
            removed = self.live_in(model, read, None if whole else dt)
            if not removed:
                operation, removed = Operation.INSERT_INTO, ()
            elif whole and self.partitioned:
                parts = sorted({model.partitions[p]["dt"] for p in removed})
                added = tuple(f for part in parts for f in self.files(txn, part))  # one write id per intent
        intent = CommitIntent(
            txn_id=txn,
            table=self.table,
            operation=operation,
            read_version=read,
            partitions=scope,
            added_files=added,
            removed_files=removed,
            writer="script",
        )
        self.sent.append(intent)
        return intent


class Script:
    """Drives the pure core for one table and records its decision log and the model."""

    def __init__(
        self,
        table: str = "t",
        *,
        partitioned: bool = True,
        seed: int = 0,
        offset_step: int = 2,
        location: str | None = None,
    ) -> None:
        self.table = table
        self.partitioned = partitioned
        self.source = IntentSource(table, partitioned=partitioned, seed=seed)
        self.rng = self.source.rng
        self.state: TableState = new_state(table)
        self.records: list[LogRecord] = []
        self.decisions: list[CommitDecision] = []
        self.intents: list[CommitIntent] = []
        self.model = LiveModel()
        self.clock = 1_000_000
        self.offset_step = offset_step  # decision log offsets with gaps, like transaction markers leave
        self.submit(self.source.create(location or f"/warehouse/{table}"))

    def submit(self, intent: CommitIntent, timestamp: int | None = None) -> CommitDecision:
        """Decide ``intent`` with record time ``timestamp`` (default: the script clock) and log the decision."""
        stamp = self.clock if timestamp is None else timestamp
        decision = evaluate(self.state, intent, stamp, len(self.intents))
        data = encode(decision)
        apply(self.state, decision, data)
        self.intents.append(intent)
        self.decisions.append(decision)
        self.records.append(LogRecord(self.table, len(self.records) * self.offset_step, stamp + 3, data))
        self.model.apply(decision)
        return decision

    def files(self, txn: str, dt: str | None, n: int = 1) -> tuple[DataFile, ...]:
        """``n`` data files of ``txn`` in partition ``dt``."""
        return self.source.files(txn, dt, n)

    def step(self) -> CommitDecision:
        """One random transaction, at a clock that mostly advances (writer clocks are not monotonic)."""
        rng = self.rng
        self.clock += rng.choice((0, 1, 7, 250, 1000))
        if rng.random() < 0.05:
            self.clock -= 5
        return self.submit(self.source.next(self.model))

    def run(self, steps: int) -> Script:
        """``steps`` random transactions."""
        for _ in range(steps):
            self.step()
        return self


# ---------------------------------------------------------------------- the model's own checks


def test_model_tracks_the_cores_live_files() -> None:
    for seed in range(3):
        script = Script(seed=seed).run(120)
        assert set(script.model.live(script.model.head)) == script.state.live_files()
        assert script.model.head == script.state.head_version


def test_script_exercises_rejections_rebases_duplicates_and_rewrites() -> None:
    script = Script(seed=1).run(200)
    outcomes = {(d.accepted, d.duplicate_of is not None) for d in script.decisions}
    assert outcomes >= {(True, False), (False, False), (True, True)}
    assert {d.operation for d in script.decisions if d.accepted and d.operation and d.operation.rewrites}
    assert {d.rebase.value for d in script.decisions} - {"NONE"}
    times = [t for t, op in zip(script.model.times, script.model.operations, strict=True) if op.data_change]
    assert times == sorted(set(times))  # strictly increasing time versions


def test_an_honest_writer_never_meets_the_hostile_writer_rejections() -> None:
    """Random concurrent honest histories (stale reads, rebases, whole-table rewrites) never get these reasons."""
    hostile = {
        Reason.FILE_OUTSIDE_SCOPE,
        Reason.PATH_REUSED,
        Reason.INCOMPLETE_REWRITE,
        Reason.PATH_PARTITION_MISMATCH,
        Reason.INVALID_PATH,
    }
    rewrites = 0
    for seed in range(6):
        for partitioned in (True, False):
            script = Script(seed=seed, partitioned=partitioned).run(200)
            assert not {d.reason for d in script.decisions} & hostile
            rewrites += sum(1 for d in script.decisions if d.accepted and d.operation and d.operation.rewrites)
    assert rewrites > 20
