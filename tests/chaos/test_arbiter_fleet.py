"""The arbiter fleet: three ``ordo arbiter --fleet`` share every table through a Kafka consumer group.

Writers commit to many tables while one instance at a time is killed (kill -9)
or paused (SIGSTOP, then SIGCONT after longer than the group's session
timeout). The group moves the victim's tables to the others; each new owner's
per-table producer fences the old one before it rebuilds. Afterwards every
table's logs are read back: one decision per intent (the first per intent
offset), contiguous ID versions, and the decisions log equal to what the pure
core re-derives from the intents log. Figures: for each table of a killed
instance, the time from the kill to its first decision.
"""

from __future__ import annotations

import multiprocessing
import random
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from ordo.producer import CommitClient
from ordo.services.stack import ManagedProcess, ProcessGroup, owned_tables, wait_arbiter_ready
from ordo.settings import Settings

from . import figures
from .common import check_exactly_once, create_intent, insert_intent, read_logs

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(figures.pick(300, 1800))]

INSTANCES = 3
TABLES = figures.pick(12, 50)
ROUNDS = figures.pick(1, 3)  # each round: one kill -9, then one pause
PAUSE = figures.pick(10.0, 30.0)  # longer than session.timeout.ms (6 s)
WRITERS = 8  # processes


def _write(settings: Settings, tables: list[str], index: int, stop: Any, count: Any, errors: Any) -> None:
    """One writer process: commit one-file inserts to random tables until ``stop`` is set."""
    rng = random.Random(300 + index)
    n = 0
    with CommitClient(settings=settings) as client:
        while not stop.is_set():
            table = rng.choice(tables)
            try:
                client.commit(insert_intent(table, f"w{index}-{n}", f"w{index}"), timeout=90)
            except BaseException as exc:  # reported to the test
                errors.put(f"writer {index}: {type(exc).__name__}: {exc}")
                return
            n += 1
            with count.get_lock():
                count.value += 1


class Writers:
    """``WRITERS`` processes, each with its own ``CommitClient``, committing to random tables until stopped."""

    def __init__(self, settings: Settings, tables: list[str]) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._count = context.Value("q", 0)
        self._errors = context.Queue()
        self._processes = [
            context.Process(
                target=_write, args=(settings, tables, i, self._stop, self._count, self._errors), daemon=True
            )
            for i in range(WRITERS)
        ]

    @property
    def count(self) -> int:
        return int(self._count.value)

    def start(self) -> Writers:
        for process in self._processes:
            process.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for process in self._processes:
            process.join(120)
            if process.is_alive():
                process.kill()
        errors = []
        while not self._errors.empty():
            errors.append(self._errors.get())
        assert not errors, errors[:3]
        assert all(p.exitcode == 0 for p in self._processes), [p.exitcode for p in self._processes]


def first_decision_after_kill(client: CommitClient, tables: set[str], tag: str, killed_at: float) -> list[float]:
    """Commit one intent to each table at once; the seconds from the kill to each one's decision."""
    decided: dict[str, float] = {}
    # The handover's time is a figure (bench/fleet.py measures it; it is reported here too), not this test's
    # check: on Apache Kafka a kill during a rebalance once held the group for the rebalance timeout (60 s then,
    # 10 s now: docs/scaling.md), so the probe waits as long as the writers do, and the test checks what it is
    # for: each intent decided once.
    futures = {t: client.submit(insert_intent(t, f"probe-{tag}-{t}", "probe"), timeout=110) for t in sorted(tables)}
    for table, future in futures.items():
        future.add_done_callback(lambda _, table=table: decided.setdefault(table, time.monotonic()))
    for future in futures.values():
        future.result(timeout=120)
    return [decided[t] - killed_at for t in sorted(tables)]


def wait_all_own_tables(fleet: list[ManagedProcess], timeout: float = 180.0) -> None:
    """Until the group gave every instance some tables (on Tansu a join takes about 11 s)."""
    deadline = time.monotonic() + timeout
    while not all(owned_tables(p) for p in fleet):
        assert time.monotonic() < deadline, "the group did not give every instance a table"
        time.sleep(0.5)


def test_fleet_survives_kill_9_and_pauses_deciding_each_intent_once(
    processes: ProcessGroup, settings: Settings, tmp_path: Path
) -> None:
    def start(i: int) -> ManagedProcess:
        args = ["--fleet", "--state-dir", str(tmp_path / f"state{i}"), "--commit-timeout", "10"]
        return processes.start_arbiter(settings, args=args, wait_ready=False)

    fleet = [start(i) for i in range(INSTANCES)]
    for process in fleet:
        wait_arbiter_ready(process, 120)
    tables = [f"f{i:02d}" for i in range(TABLES)]
    clients = [CommitClient(settings=settings) for _ in range(2)]
    rng = random.Random(5)
    handover: list[float] = []
    started = INSTANCES
    try:
        for future in [clients[0].submit(create_intent(t)) for t in tables]:
            assert future.result(timeout=120).id_version == 0
        writers = Writers(settings, tables).start()
        for round_ in range(ROUNDS):
            wait_all_own_tables(fleet)
            time.sleep(rng.uniform(1.0, 3.0))
            victim = fleet.pop(rng.randrange(len(fleet)))
            assert victim.kill() == -9
            killed_at = time.monotonic()
            lost = owned_tables(victim)
            assert lost, "every instance of the fleet owns some tables"
            handover += first_decision_after_kill(clients[1], lost, f"k{round_}", killed_at)
            fleet.append(start(started))
            started += 1
            time.sleep(rng.uniform(1.0, 3.0))
            paused = rng.choice(fleet)
            paused.pause()
            time.sleep(PAUSE)
            paused.resume()
            before = writers.count
            deadline = time.monotonic() + 90
            while writers.count < before + 30:
                assert time.monotonic() < deadline, "no decisions after the pause"
                time.sleep(0.1)
        writers.stop()
    finally:
        for client in clients:
            client.close()
    assert any(p.running for p in fleet)
    later = 0
    intents = 0
    for table in tables:
        checked = check_exactly_once(read_logs(settings, table))
        later += checked.later
        intents += checked.intents
    figures.add("fleet_intents_checked", intents)
    handover.sort()
    figures.note(
        f"arbiter fleet ({INSTANCES} instances, {TABLES} tables, {WRITERS} writers, {ROUNDS} kill -9 + "
        f"{ROUNDS} pause(s) of {PAUSE:g} s): {intents} intents, each decided once; {later} later decision(s) "
        f"skipped by readers; first decision after a kill -9 for {len(handover)} table(s): "
        f"min {handover[0]:.1f} s, median {statistics.median(handover):.1f} s, max {handover[-1]:.1f} s"
    )
