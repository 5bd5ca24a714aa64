"""A 3-node Apache Kafka loses nodes under load (issue 20, item 4).

Kafka only (Tansu has no cluster): a ``KafkaCluster`` of 3 nodes of its own,
an ``ordo arbiter``, an ``ordo consumer`` and 8 writer processes (one
``CommitClient`` each) committing closed-loop, with a commit timeout long
enough to wait out an election. Each round injects three faults, one after the
other, each waited out before the next:

* kill -9 of the node leading the table's decisions partition (intents
  partition in odd rounds), started again afterwards;
* kill -9 of the active KRaft controller (the metadata quorum's leader), started
  again afterwards;
* SIGSTOP of the node leading the intents partition (decisions in odd rounds)
  for ``PAUSE`` seconds, then SIGCONT: a node that hangs with its connections
  open.

The same scenario runs a second time with network partitions instead
(``partition``): each node in a network namespace of its own
(``KafkaCluster(isolated=True)``, ``ordo.broker.netns``), and each round cuts off,
for ``CUT`` seconds each, the decisions leader, the intents leader and the
active controller (the order turns with the round), healing each before the
next. Unlike SIGSTOP, a cut-off node runs on alone: its controller loses the
quorum, its leaderships move, and when it is back it must truncate whatever it
wrote alone. Skipped only where namespaces cannot be made (not Linux, not root).

After each fault: the time until the writers had ``RESUMED`` more answers (the
figure reported). After each round the writers hold, and: every acknowledged
commit is in the log as the decision the writer got, every intent has exactly
one decision, ID versions are contiguous, the decisions log re-derives exactly
from the intents log, and the consumer's catalog equals, row for row, one a
fresh consumer rebuilt from the log. Quick profile: 1 round; full: 10.

The table service runs throughout (``ordo compactor``, Spark): the writers
write each row as a real Parquet file in the table's layout (the data source
tasks' ``write_rows``), so the always-hot partitions pile up small files and
the service MINOR-compacts them beside the writers' INSERTs. After each round
the table's rows, merge-on-read from the head snapshot's files, are exactly the
rows of the acknowledged commits, and the figure counts the compactions
committed.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ordo.broker.kafka import KafkaCluster, active_controller, wait_in_sync
from ordo.broker.netns import unavailable as netns_unavailable
from ordo.consumer import Catalog
from ordo.kernel.keys import embedded_keys
from ordo.producer import CommitClient
from ordo.schemas import CommitIntent, Operation, TableMetadata, decisions_topic, intents_topic
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings

from ..conftest import selected_brokers
from ..integration.test_consumer import dump
from ..sinks import decisions_transactions_default
from . import figures
from .common import check_exactly_once, read_logs, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(figures.pick(420, 2400))]

ROUNDS = figures.pick(1, 10)
WRITERS = 8
PAUSE = figures.pick(5.0, 12.0)  # seconds a node stays frozen (broker.session.timeout.ms is 9 s)
CUT = figures.pick(20.0, 30.0)  # seconds a node stays cut off: well past the 9 s session timeout, so it is fenced
RESUMED = 16  # answers after a fault that count as "commits resumed"
RESUME_BOUND = 60.0  # seconds: commits must resume within this after any fault
COMMIT_TIMEOUT = 120.0
TABLE = "failover"


def _metadata(settings: Settings) -> TableMetadata:
    """The table: keyed by ``id``, one partition per writer, small files compacted from 4 on."""
    return TableMetadata(
        location=str(Path(settings.warehouse).absolute() / TABLE),
        schema="id BIGINT, v STRING, p STRING",
        primary_key=("id",),
        partition_columns=("p",),
        properties={"ordo.buckets": "1", "ordo.compaction.min_files": "4"},
    )


def _key(index: int, n: int) -> int:
    return index * 1_000_000_000 + n


def _insert(layout: Any, txn: str, index: int, n: int, read_version: int) -> CommitIntent:
    """An INSERT INTO of one row, written as a real Parquet file into the writer's partition."""
    import pyarrow as pa

    from ordo.producer.arrow import write_rows

    rows = pa.table({"id": pa.array([_key(index, n)], pa.int64()), "v": [txn], "p": [f"w{index}"]})
    files = write_rows(rows, layout, txn, n * 10)
    return CommitIntent(
        txn_id=txn,
        table=TABLE,
        operation=Operation.INSERT_INTO,
        read_version=read_version,
        partitions=({"p": f"w{index}"},),
        added_files=tuple(files),
        writer="chaos",
    )


def _writer(settings: Settings, index: int, acks: str, stop: Any, hold: Any, idle: Any, count: Any) -> None:
    """One writer process: closed-loop inserts into its own partition; every answer appended to ``acks``.

    While ``hold`` is set it finishes its commit in flight and sets ``idle``; any error ends it (and is
    written to ``acks``).
    """
    from ordo.producer.data import Layout

    layout = Layout.of(TABLE, _metadata(settings))
    n = 0
    seen = 0
    with CommitClient(settings=settings) as client, open(acks, "a", encoding="utf-8") as out:
        client.decisions(TABLE)
        while not stop.is_set():
            if hold.is_set():
                idle.set()
                time.sleep(0.05)
                continue
            idle.clear()
            txn = f"w{index}-{n}"
            try:
                decision = client.commit(_insert(layout, txn, index, n, seen), timeout=COMMIT_TIMEOUT)
            except Exception as exc:  # every error is a failure here
                out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}", "txn": txn}) + "\n")
                out.flush()
                return
            n += 1
            if decision.id_version is not None:
                seen = max(seen, decision.id_version)
            out.write(
                json.dumps(
                    {
                        "txn": txn,
                        "key": _key(index, n - 1),
                        "intent_offset": decision.intent_offset,
                        "outcome": decision.outcome.value,
                        "id_version": decision.id_version,
                        "duplicate_of": decision.duplicate_of,
                    }
                )
                + "\n"
            )
            out.flush()
            with count.get_lock():
                count.value += 1
        idle.set()


class Fleet:
    """The 8 writer processes and what they share with the test."""

    def __init__(self, settings: Settings, work: Path) -> None:
        context = multiprocessing.get_context("spawn")
        self.stop, self.hold = context.Event(), context.Event()
        self.count = context.Value("q", 0)
        self.files = [work / f"acks-{i}.jsonl" for i in range(WRITERS)]
        self.idle = [context.Event() for _ in range(WRITERS)]
        self.processes = [
            context.Process(
                target=_writer,
                args=(settings, i, str(self.files[i]), self.stop, self.hold, self.idle[i], self.count),
                daemon=True,
            )
            for i in range(WRITERS)
        ]
        for process in self.processes:
            process.start()

    def answered(self) -> int:
        return int(self.count.value)

    def acks(self) -> list[dict[str, Any]]:
        lines = [line for path in self.files if path.exists() for line in path.read_text().splitlines()]
        return [json.loads(line) for line in lines if line.strip()]

    def errors(self) -> list[dict[str, Any]]:
        return [ack for ack in self.acks() if "error" in ack]

    def quiesce(self, timeout: float) -> None:
        """Hold every writer once its commit in flight is answered."""
        for event in self.idle:
            event.clear()
        self.hold.set()
        wait_until(lambda: all(e.is_set() for e in self.idle) or bool(self.errors()), timeout, "writers to hold")

    def go(self) -> None:
        self.hold.clear()

    def close(self) -> None:
        self.stop.set()
        self.hold.clear()
        for process in self.processes:
            process.join(COMMIT_TIMEOUT + 30)
            if process.is_alive():
                process.kill()


def _resumed(fleet: Fleet, since: int, began: float) -> float:
    """Seconds from ``began`` until ``RESUMED`` more answers than ``since`` (fails on a writer error)."""
    wait_until(
        lambda: fleet.answered() >= since + RESUMED or bool(fleet.errors()),
        RESUME_BOUND,
        f"{RESUMED} commits after the fault",
        interval=0.02,
    )
    assert not fleet.errors(), fleet.errors()[:3]
    return time.monotonic() - began


def _kill_and_restart(cluster: KafkaCluster, node: int, fleet: Fleet, controller: bool = False) -> float:
    since, began = fleet.answered(), time.monotonic()
    cluster.kill_node(node)
    resumed = _resumed(fleet, since, began)
    if controller:  # the fault was the one meant: the survivors elected another controller
        wait_until(lambda: active_controller(cluster) != node, 60, f"a controller other than node {node}")
    cluster.start_node(node)
    wait_in_sync(cluster)
    return resumed


def _pause_and_thaw(cluster: KafkaCluster, node: int, fleet: Fleet) -> float:
    since, began = fleet.answered(), time.monotonic()
    cluster.pause_node(node)
    try:
        time.sleep(PAUSE)
    finally:
        cluster.resume_node(node)
    resumed = _resumed(fleet, since, began)
    wait_in_sync(cluster)
    return resumed


def _cut_and_heal(cluster: KafkaCluster, node: int, fleet: Fleet) -> float:
    """Seconds until commits resumed: during the cut (the cluster failed over) or else after the heal."""
    since, began = fleet.answered(), time.monotonic()
    cluster.cut_node(node)
    try:
        while time.monotonic() - began < CUT and fleet.answered() < since + RESUMED and not fleet.errors():
            time.sleep(0.02)
        failover = time.monotonic() - began if fleet.answered() >= since + RESUMED else None
        time.sleep(max(0.0, CUT - (time.monotonic() - began)))
    finally:
        cluster.heal_node(node)
    resumed = failover if failover is not None else _resumed(fleet, since, began)
    wait_in_sync(cluster)
    return resumed


def _crash_round(cluster: KafkaCluster, topics: list[str], fleet: Fleet) -> dict[str, float]:
    """Leader kill -9, controller kill -9, a frozen node."""
    return {
        "leader": _kill_and_restart(cluster, cluster.leader_of(topics[0]), fleet),
        "controller": _kill_and_restart(cluster, active_controller(cluster), fleet, controller=True),
        "frozen": _pause_and_thaw(cluster, cluster.leader_of(topics[1]), fleet),
    }


def _partition_round(cluster: KafkaCluster, topics: list[str], fleet: Fleet) -> dict[str, float]:
    """Each leader cut off in turn, then the active controller."""
    return {
        "cut leader": _cut_and_heal(cluster, cluster.leader_of(topics[0]), fleet),
        "cut other leader": _cut_and_heal(cluster, cluster.leader_of(topics[1]), fleet),
        "cut controller": _cut_and_heal(cluster, active_controller(cluster), fleet),
    }


FAULTS = {"crash": _crash_round, "partition": _partition_round}


def _table_keys(catalog: Path) -> list[int]:
    """The keys of the table's live rows: merge-on-read of the head snapshot's files (``consumer.arrow``)."""
    from ordo.consumer.arrow import FileRef, TableShape, live_rows, merge_groups

    snapshot = Catalog(str(catalog)).snapshot(TABLE)
    shape = TableShape.of(snapshot.metadata)
    keys: list[int] = []
    for group, merge in merge_groups([FileRef.of(f) for f in snapshot.files], shape.partition_columns):
        keys += live_rows(group, shape, merge=merge).column("id").to_pylist()
    return sorted(keys)


def _compactions(settings: Settings) -> int:
    """Compactions the log holds accepted."""
    logs = read_logs(settings, TABLE)
    return sum(1 for d in logs.models if d.accepted and d.operation.value.endswith("COMPACT"))


def _check_round(settings: Settings, fleet: Fleet, catalog: Path, group: ProcessGroup, round_: int) -> int:
    """The per-round invariants (writers held); returns the head version."""
    acks = fleet.acks()
    assert not [a for a in acks if "error" in a], [a for a in acks if "error" in a][:3]
    checked = check_exactly_once(read_logs(settings, TABLE))
    assert checked.later == 0
    for ack in acks:  # no acknowledged commit lost: each answer is the logged decision of its intent
        logged = checked.first.get(ack["intent_offset"])
        assert logged is not None, f"acknowledged {ack} not in the decisions log"
        assert (logged.outcome.value, logged.id_version, logged.duplicate_of) == (
            ack["outcome"],
            ack["id_version"],
            ack["duplicate_of"],
        ), (ack, logged)
        assert logged.accepted, ack  # own partition, read at its own last version: nothing conflicts
    head = checked.accepted - 1
    Catalog(str(catalog)).wait_for_version(TABLE, head, timeout=60)
    assert _table_keys(catalog) == sorted({a["key"] for a in acks}), "the table's rows are not the acknowledged ones"
    rebuilt_path = catalog.parent / f"rebuilt-{round_}.db"
    rebuilt = group.start_ordo(replace(settings, catalog=str(rebuilt_path)), "consumer", "--no-http", name="rebuilt")
    rebuilt.wait_for_line("consumer ready", timeout=120)
    Catalog(str(rebuilt_path)).wait_for_version(TABLE, head, timeout=60)
    deadline = time.monotonic() + 15
    while dump(str(catalog)) != dump(str(rebuilt_path)) and time.monotonic() < deadline:
        time.sleep(0.2)  # both read past the last transaction marker
    assert dump(str(catalog)) == dump(str(rebuilt_path)), "the catalog differs from one rebuilt from the log"
    rebuilt.terminate(30)
    return head


@pytest.mark.parametrize("faults", sorted(FAULTS))
def test_commits_survive_broker_faults(request: Any, tmp_path: Path, faults: str) -> None:
    if "kafka" not in selected_brokers(request.config):
        pytest.skip("a 3-node Apache Kafka cluster test (run with --broker kafka)")
    isolated = faults == "partition"
    if isolated and (why := netns_unavailable()) is not None:
        pytest.skip(f"network partitions need a namespace per node: {why}")
    began = time.monotonic()
    catalog = tmp_path / "catalog.db"
    with (
        KafkaCluster(3, tmp_path / "kafka", isolated=isolated) as cluster,
        ProcessGroup(log_dir=tmp_path / "logs") as group,
    ):
        settings = embedded_keys(
            Settings(
                bootstrap_servers=cluster.bootstrap_servers,
                topic_prefix="failover",
                warehouse=str(tmp_path / "warehouse"),
                catalog=str(catalog),
                state_dir=str(tmp_path / "state"),
                # A cut-off node answers nothing and resets nothing: requests to it wait out librdkafka's
                # socket.timeout.ms (60 s by default) before the client looks for the new leader.
                # docs/operations.md recommends 10 s where partitions must fail over sooner; so does this test.
                kafka={"socket.timeout.ms": "10000"} if isolated else {},
                decisions_transactions=decisions_transactions_default(),
            ),
            tmp_path / "keys",
        )
        arbiter = group.start_arbiter(settings, args=["--state-dir", settings.state_dir], timeout=120)
        with CommitClient(settings=settings) as client:
            create = CommitIntent(
                txn_id=f"create-{TABLE}",
                table=TABLE,
                operation=Operation.CREATE_TABLE,
                read_version=0,
                metadata=_metadata(settings),
            )
            assert client.commit(create, timeout=COMMIT_TIMEOUT).id_version == 0
        consumer = group.start_ordo(settings, "consumer", "--no-http", name="consumer")
        consumer.wait_for_line("consumer ready", timeout=120)
        compactor = group.start_ordo(settings, "compactor", "--interval", "2", "--no-metrics", name="compactor")
        compactor.wait_for_line("compactor ready", timeout=240)
        fleet = Fleet(settings, tmp_path)
        timings: dict[str, list[float]] = {}
        heads = []
        try:
            wait_until(lambda: fleet.answered() >= 40 or bool(fleet.errors()), 180, "commits before the faults")
            for round_ in range(ROUNDS):
                topics = [decisions_topic(settings.topic_prefix, TABLE), intents_topic(settings.topic_prefix, TABLE)]
                if round_ % 2:
                    topics.reverse()
                for name, seconds in FAULTS[faults](cluster, topics, fleet).items():
                    timings.setdefault(name, []).append(seconds)
                fleet.quiesce(COMMIT_TIMEOUT + 30)
                heads.append(_check_round(settings, fleet, catalog, group, round_))
                assert arbiter.running, f"the arbiter did not survive: {arbiter.tail()}"
                assert consumer.running, f"the consumer did not survive: {consumer.tail()}"
                assert compactor.running, f"the compactor did not survive: {compactor.tail()}"
                fleet.go()
        finally:
            fleet.close()
        answers = len(fleet.acks())
        compactions = _compactions(settings)
    assert compactions > 0, "the table service committed no compaction while the writers committed"
    what = {
        "crash": f"leader kill -9, controller kill -9, node SIGSTOP {PAUSE:.0f} s",
        "partition": f"decisions leader, intents leader and controller each cut off {CUT:.0f} s",
    }[faults]
    figures.add(f"kafka faults survived ({faults})", sum(map(len, timings.values())))
    figures.add(f"compactions committed during kafka faults ({faults})", compactions)
    worst = ", ".join(f"{max(values):.1f} s ({name})" for name, values in timings.items())
    figures.note(
        f"kafka 3-node faults, {faults}: {ROUNDS} round(s) x ({what}), "
        f"{WRITERS} writer processes, {answers} commits answered, {compactions} compactions beside them, "
        f"head version {heads[-1]}, 0 lost, 0 errors, rows == acknowledged; "
        f"commits resumed ({RESUMED} answers) after at most {worst} (from the fault's start: a freeze's resumption "
        f"includes the freeze; a cut's is the failover, while the node is still cut off, if under {CUT:.0f} s); "
        f"per fault: { {k: [round(x, 1) for x in v] for k, v in timings.items()} }; {time.monotonic() - began:.0f} s"
    )
