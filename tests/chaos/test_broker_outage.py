"""Broker outage: freeze the broker (SIGSTOP) for 10 s under load, then thaw it.

Runs on each broker (``broker_kind``), its own one (``new_broker``, never the
session's shared one): the embedded Tansu or a single-node Apache Kafka. Writers
keep committing with a short timeout while an arbiter and a consumer run.
During the outage a commit must end with a clear error (``CommitTimeoutError``
or ``BrokerUnavailableError``) or with its decision; afterwards everything is
consistent: the arbiter survived, each intent that reached the log has exactly
one decision (an intent whose commit timed out may still be decided later, once),
the decisions log re-derives exactly, every answer a writer got is the logged
one, and the consumer's catalog matches the log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ordo.consumer import Catalog
from ordo.errors import BrokerUnavailableError, CommitTimeoutError
from ordo.producer import CommitClient
from ordo.schemas import CommitDecision, CommitIntent
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings

from . import figures
from .common import check_exactly_once, create_intent, insert_intent, read_logs, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(figures.pick(180, 400))]

PAUSE = 10.0
OUTAGES = figures.pick(1, 2)
COMMIT_TIMEOUT = 4.0


class Writers:
    """Threads committing inserts with a short timeout; answers and errors are kept with their time."""

    def __init__(self, clients: list[CommitClient], table: str, threads: int) -> None:
        self.clients = clients
        self.table = table
        self.answers: list[tuple[float, CommitIntent, CommitDecision]] = []
        self.errors: list[tuple[float, CommitIntent, BaseException]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, index: int) -> None:
        client = self.clients[index % len(self.clients)]
        n = 0
        while not self._stop.is_set():
            intent = insert_intent(self.table, f"w{index}-{n}", f"w{index}")
            n += 1
            try:
                decision = client.commit(intent, timeout=COMMIT_TIMEOUT)
            except Exception as exc:  # checked below: only clear, expected errors
                with self._lock:
                    self.errors.append((time.monotonic(), intent, exc))
                time.sleep(0.2)
                continue
            with self._lock:
                self.answers.append((time.monotonic(), intent, decision))
            time.sleep(0.01)

    def start(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def answered_since(self, moment: float) -> int:
        with self._lock:
            return sum(1 for at, _, _ in self.answers if at > moment)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        assert not any(t.is_alive() for t in self._threads), "a writer is stuck"


def test_broker_paused_for_10_s_under_load_then_everything_is_consistent(
    make_settings: Callable[..., Settings], new_broker: Callable[..., Any], tmp_path: Path
) -> None:
    table = "outage"
    began = time.monotonic()
    with new_broker() as broker, ProcessGroup(log_dir=tmp_path / "logs") as group:
        settings = make_settings(bootstrap_servers=broker.bootstrap_servers)
        arbiter = group.start_arbiter(settings, args=["--state-dir", str(tmp_path / "state")])
        catalog_path = str(tmp_path / "catalog.db")
        consumer = group.start_ordo(settings, "consumer", "--no-http", "--catalog", catalog_path, name="consumer")
        consumer.wait_for_line("consumer ready", timeout=60)
        clients = [CommitClient(settings=settings) for _ in range(2)]
        try:
            assert clients[0].commit(create_intent(table), timeout=30).id_version == 0
            writers = Writers(clients, table, threads=4).start()
            outages: list[tuple[float, float]] = []
            for _ in range(OUTAGES):
                start = time.monotonic()
                wait_until(lambda: writers.answered_since(start) >= 20, 60, "commits before the outage")  # noqa: B023
                paused = time.monotonic()
                broker.pause()
                try:
                    time.sleep(PAUSE)
                finally:
                    broker.resume()
                resumed = time.monotonic()
                outages.append((paused, resumed))
                wait_until(lambda: writers.answered_since(resumed) >= 40, 90, "commits after the outage")  # noqa: B023
            writers.stop()
        finally:
            for client in clients:
                client.close()  # flushes intents still queued
        assert arbiter.running, f"the arbiter did not survive the outage: {arbiter.tail()}"
        assert consumer.running, f"the consumer did not survive the outage: {consumer.tail()}"

        # Errors: only the two clear ones, each naming its transaction.
        for _, intent, error in writers.errors:
            assert isinstance(error, (CommitTimeoutError, BrokerUnavailableError)), repr(error)
            assert intent.txn_id in str(error), str(error)
        during = [e for at, _, e in writers.errors if any(p <= at <= r + COMMIT_TIMEOUT for p, r in outages)]
        assert during, "the outage must be felt by the writers"
        assert len(during) == len(writers.errors), "commits failed outside the outage"

        # Every intent that reached the log is decided once; the log re-derives exactly.
        wait_until(lambda: _all_decided(settings, table), 60, "decisions for every intent in the log")
        logs = read_logs(settings, table)
        checked = check_exactly_once(logs)
        assert checked.later == 0
        by_txn: dict[str, list[CommitDecision]] = {}
        for decision in checked.first.values():
            by_txn.setdefault(decision.txn_id, []).append(decision)
        for _, _intent, decision in writers.answers:
            assert checked.first[decision.intent_offset] == decision
        for _, intent, _ in writers.errors:
            assert len(by_txn.get(intent.txn_id, [])) <= 1, f"txn {intent.txn_id} decided twice"
        assert all(len(found) == 1 for found in by_txn.values()), "an intent reached the log twice"
        late = sum(1 for _, intent, _ in writers.errors if intent.txn_id in by_txn)

        # The consumer's catalog matches the log.
        catalog = Catalog(catalog_path)
        catalog.wait_for_version(table, checked.accepted - 1, timeout=60)
        wait_until(lambda: len(catalog.history(table)) == len(logs.models), 30, "the catalog to hold every decision")
        assert [d.txn_id for d in reversed(catalog.history(table))] == [d.txn_id for d in logs.models]
    figures.add("broker_outages", OUTAGES)
    figures.add("intents_checked", checked.intents)
    figures.note(
        f"broker SIGSTOP {PAUSE:.0f} s x{OUTAGES}: {len(writers.answers)} commits answered, {len(writers.errors)} clear "
        f"timeouts ({late} of those intents were decided after the outage, once), {checked.intents} intents decided "
        f"once each, arbiter and consumer survived, {time.monotonic() - began:.1f} s"
    )


def _all_decided(settings: Settings, table: str) -> bool:
    from .common import first_decisions

    logs = read_logs(settings, table)
    first, _ = first_decisions(logs)
    return len(first) == len(logs.intents)
