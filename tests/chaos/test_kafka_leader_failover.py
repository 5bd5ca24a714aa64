"""A 3-node Apache Kafka loses the leader of a table's partitions under load (issue 20, item 7).

Kafka only (Tansu has no cluster): a ``KafkaCluster`` of 3 nodes of its own.
Writers commit closed-loop with a timeout long enough to wait out a leader
election while the node leading the decisions partition, then the one leading
the intents partition, is killed with SIGKILL and started again. Every commit
must return its decision (a leader moving is a transient state, waited out, not
an error); afterwards each intent has exactly one decision and the decisions log
re-derives exactly from the intents log.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kernel.keys import embedded_keys
from ordo.kafka import KafkaCluster
from ordo.settings import Settings
from ordo.stack import ProcessGroup
from producer import CommitClient
from schemas import CommitDecision, decisions_topic, intents_topic

from . import figures
from .common import check_exactly_once, create_intent, insert_intent, read_logs, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(figures.pick(300, 900))]

ROUNDS = figures.pick(1, 5)
COMMIT_TIMEOUT = 60.0


class Writers:
    """Threads committing inserts closed-loop; answers and errors kept with their time."""

    def __init__(self, client: CommitClient, table: str, threads: int) -> None:
        self.client, self.table = client, table
        self.answers: list[tuple[float, CommitDecision]] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, index: int) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                decision = self.client.commit(
                    insert_intent(self.table, f"w{index}-{n}", f"w{index}"), timeout=COMMIT_TIMEOUT
                )
            except Exception as exc:  # every error is a failure here
                with self._lock:
                    self.errors.append(exc)
                return
            n += 1
            with self._lock:
                self.answers.append((time.monotonic(), decision))

    def answered_since(self, moment: float) -> int:
        with self._lock:
            return sum(1 for at, _ in self.answers if at > moment)

    def start(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(COMMIT_TIMEOUT + 30)


def _kill_leader_and_restart(cluster: KafkaCluster, topic: str, writers: Writers) -> tuple[float, float]:
    """kill -9 the leader of ``topic``; wait for commits without it; start it again; returns the seconds each took."""
    leader = cluster.leader_of(topic)
    killed = time.monotonic()
    cluster.kill_node(leader)
    wait_until(lambda: writers.answered_since(killed) >= 10 or bool(writers.errors), 120, f"commits without {leader}")
    resumed = time.monotonic() - killed
    began = time.monotonic()
    cluster.start_node(leader)
    return resumed, time.monotonic() - began


def test_commits_wait_out_a_killed_partition_leader(tmp_path: Path) -> None:
    table = "failover"
    began = time.monotonic()
    with KafkaCluster(3, tmp_path / "kafka") as cluster, ProcessGroup(log_dir=tmp_path / "logs") as group:
        settings = embedded_keys(
            Settings(
                bootstrap_servers=cluster.bootstrap_servers,
                topic_prefix="failover",
                warehouse=str(tmp_path / "warehouse"),
                catalog=str(tmp_path / "catalog.db"),
                state_dir=str(tmp_path / "state"),
            ),
            tmp_path / "keys",
        )
        arbiter = group.start_arbiter(settings, args=["--state-dir", settings.state_dir])
        with CommitClient(settings=settings) as client:
            assert client.commit(create_intent(table), timeout=COMMIT_TIMEOUT).id_version == 0
            writers = Writers(client, table, threads=4).start()
            wait_until(lambda: writers.answered_since(0) >= 20, 60, "commits before the first kill")
            timings = []
            for _ in range(ROUNDS):
                for topic in (
                    decisions_topic(settings.topic_prefix, table),
                    intents_topic(settings.topic_prefix, table),
                ):
                    timings.append(_kill_leader_and_restart(cluster, topic, writers))
                    assert not writers.errors, writers.errors[:3]
            writers.stop()
        assert not writers.errors, writers.errors[:3]
        assert arbiter.running, f"the arbiter did not survive: {arbiter.tail()}"
        logs = read_logs(settings, table)
        checked = check_exactly_once(logs)
        assert checked.later == 0
        for _, decision in writers.answers:
            assert checked.first[decision.intent_offset] == decision  # every answer is the logged decision
    figures.add("kafka partition leaders killed", len(timings))
    figures.note(
        f"kafka leader failover: {len(timings)} leader(s) killed (3 nodes), {len(writers.answers)} commits answered, "
        f"0 errors; commits resumed after {max(t[0] for t in timings):.1f} s at most, a node restarted in "
        f"{max(t[1] for t in timings):.1f} s at most; {time.monotonic() - began:.0f} s"
    )
