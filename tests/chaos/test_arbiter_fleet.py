"""The arbiter fleet: ``ordo arbiter --fleet`` instances share every table through a Kafka consumer group.

Writers commit to many tables while one instance at a time is killed (kill -9)
or paused (SIGSTOP, then SIGCONT after longer than the group's session
timeout). The group moves the victim's tables to the others; each new owner's
per-table producer fences the old one before it rebuilds. Afterwards every
table's logs are read back: one decision per intent (the first per intent
offset), contiguous ID versions, and the decisions log equal to what the pure
core re-derives from the intents log. Figures: for each table of a killed
instance, the time from the kill to its first decision.

A pause that lands in the middle of a transaction (issue 30) is made
deterministic: the member freezes itself exactly there
(``stop_in_transaction``), and every table must be decided again within
``HANDOVER`` seconds of each time the group hands it to a member.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import statistics
import sys
import threading
import time
from concurrent.futures import Future
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ordo.kernel.keys import reader_trust
from ordo.producer import CommitClient
from ordo.schemas import CommitDecision
from ordo.services.stack import (
    ManagedProcess,
    ProcessGroup,
    owned_tables,
    settings_env,
    start_process,
    wait_arbiter_ready,
)
from ordo.settings import Settings

from . import figures
from .common import check_exactly_once, create_intent, insert_intent, read_logs, wait_until
from .stop_in_transaction import STOP_FILE

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


# ------------------------------------------------------------------ a pause in the middle of a transaction (issue 30)

PAUSED_TABLES = 8
PAUSE_IN_TXN = figures.pick(15.0, 30.0)  # longer than the session timeout (6 s) plus the others' rebalance
HANDOVER = 10.0  # each table is decided within this many seconds of each time the group hands it to a member
PROBE_EVERY = 0.1  # seconds from a table's probe answered to its next one
PROBES = 3  # probes in flight per table: a batch holds several decisions of a table
ROOT = Path(__file__).resolve().parents[2]
STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "  # the text log format's asctime


class Prober:
    """``PROBES`` intents in flight per table at all times, the next submitted once one is answered; when each
    table's answers came (wall clock, as in the members' logs)."""

    def __init__(self, settings: Settings, tables: list[str]) -> None:
        self.client = CommitClient(settings=settings)
        self.tables = tables
        self.answers: dict[str, list[float]] = {t: [] for t in tables}
        self._inflight: dict[tuple[str, int], Future[CommitDecision]] = {}
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)

    def start(self) -> Prober:
        self._thread.start()
        return self

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            for slot in [(table, i) for table in self.tables for i in range(PROBES)]:
                future = self._inflight.get(slot)
                if future is not None and not future.done():
                    continue
                if future is not None and future.exception() is not None:
                    self._errors.append(f"{slot[0]}: {future.exception()!r}")
                n += 1
                future = self.client.submit(insert_intent(slot[0], f"probe-{n}", f"q{n}"), timeout=120)
                future.add_done_callback(lambda _, table=slot[0]: self.answers[table].append(time.time()))
                self._inflight[slot] = future
            self._stop.wait(PROBE_EVERY)

    def first_answer(self, table: str, after: float) -> float | None:
        """When ``table``'s first answer after ``after`` came, or None."""
        return min((at for at in list(self.answers[table]) if at >= after), default=None)

    def finish(self) -> None:
        """Stop probing and wait for every probe in flight: each must be answered."""
        self._stop.set()
        self._thread.join(10)
        for (table, _), future in self._inflight.items():
            try:
                future.result(timeout=60)
            except BaseException as exc:  # reported below
                self._errors.append(f"{table}: {exc!r}")
        assert not self._errors, self._errors[:3]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()


def stamped(process: ManagedProcess, pattern: str, since: float) -> list[tuple[float, re.Match[str]]]:
    """``(wall-clock time, match)`` of each line of ``process``'s log matching ``pattern`` logged at ``since`` or
    later (the line's own time stamp)."""
    found = []
    for line in process.log_text().splitlines():
        match = re.match(STAMP + pattern, line)
        if match is not None:
            at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if at >= since:
                found.append((at, match))
    return found


def assigned(process: ManagedProcess, since: float) -> list[tuple[float, str]]:
    """``(time, table)`` of every table the group assigned ``process`` at ``since`` or later."""
    lines = stamped(process, r".*group \S+ assigned table\(s\) (.+)$", since)
    return [(at, name) for at, match in lines for name in match.group(2).split(", ")]


def is_stopped(pid: int) -> bool:
    """True while process ``pid`` is stopped (SIGSTOP)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def retries_on_lost_tables(process: ManagedProcess, since: float) -> dict[str, int]:
    """Per table, the commit/abort retries ``process`` logged after it had lost the table (and before the group
    assigned it the table again). A retry line that names no table counts against every table lost."""
    events = sorted(
        [(at, "lost", m.group(2).split(", ")) for at, m in stamped(process, r".*: lost table\(s\) (.+) \(", since)]
        + [(at, "assigned", [name]) for at, name in assigned(process, since)]
        + [
            (at, "retry", [m.group(3)] if m.group(3) else [])
            for at, m in stamped(process, r".*(commit|abort)_transaction(?: of table (\w+))?: .*; retrying", since)
        ],
        key=lambda event: event[0],
    )
    lost: set[str] = set()
    retries: dict[str, int] = {}
    for _, kind, names in events:
        if kind == "lost":
            lost |= set(names)
        elif kind == "assigned":
            lost -= set(names)
        else:
            for name in names or sorted(lost):
                if name in lost:
                    retries[name] = retries.get(name, 0) + 1
    return retries


def test_a_member_paused_in_the_middle_of_a_transaction_serves_every_table_it_holds_again(
    processes: ProcessGroup, settings: Settings, tmp_path: Path
) -> None:
    """Issue 30: two members; one freezes (SIGSTOP) with the transactions of several tables open, for longer than
    the session timeout, and is thawed (SIGCONT). The other takes its tables during the pause; back, it learns it
    lost them and rejoins, and the group hands it a share again. Every table is decided again within ``HANDOVER``
    seconds of each handover, the resumed member never retries the transaction of a table it lost (more than the
    one attempt that may race the news), and every intent is decided once."""
    trigger = tmp_path / "stop-now"
    staying = processes.start_arbiter(
        settings, args=["--fleet", "--state-dir", str(tmp_path / "state0")], wait_ready=False
    )
    env = {
        **settings_env(settings),
        STOP_FILE: str(trigger),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    command = [sys.executable, "-m", "tests.chaos.stop_in_transaction", "arbiter", "--fleet"]
    command += ["--state-dir", str(tmp_path / "state1"), "--metrics-port", "0"]
    paused = processes.add(
        start_process(command, env, name=f"arbiter-paused-{settings.topic_prefix}", log_dir=processes.log_dir, cwd=ROOT)
    )
    for process in (staying, paused):
        wait_arbiter_ready(process, 120)
    tables = [f"p{i:02d}" for i in range(PAUSED_TABLES)]
    with CommitClient(settings=settings) as client:
        for future in [client.submit(create_intent(t)) for t in tables]:
            assert future.result(timeout=120).id_version == 0
    wait_all_own_tables([staying, paused])
    prober = Prober(settings, tables).start()
    try:
        time.sleep(1.0)
        trigger.touch()
        wait_until(lambda: is_stopped(paused.pid), 60, "the member to stop in the middle of a transaction")
        stopped_at = time.time()
        time.sleep(PAUSE_IN_TXN)
        resumed_at = time.time()
        paused.resume()
        wait_until(lambda: bool(assigned(paused, resumed_at)), 90, "the resumed member to be assigned tables again")

        def handovers() -> list[tuple[float, str]]:
            return sorted(assigned(staying, stopped_at) + assigned(paused, stopped_at))

        def late() -> list[tuple[str, float]]:
            """``(table, seconds)`` of each handover not followed by a decision within ``HANDOVER`` seconds (nor by
            the table's next handover)."""
            found = []
            events = handovers()
            for i, (at, table) in enumerate(events):
                answered = prober.first_answer(table, at)
                moved = next((a for a, t in events[i + 1 :] if t == table), None)
                if (answered is None or answered > at + HANDOVER) and (moved is None or moved > at + HANDOVER):
                    found.append((table, (answered or time.time()) - at))
            return found

        while time.time() < max(at for at, _ in handovers()) + HANDOVER + 1.0 and late():
            time.sleep(0.2)
        delays = sorted(
            (prober.first_answer(t, at) or time.time()) - at for at, t in handovers() if prober.first_answer(t, at)
        )
        assert not late(), f"tables not decided within {HANDOVER:g} s of their handover: {late()}"
        prober.finish()
    finally:
        prober.close()
    assert stamped(paused, r".*: lost table\(s\) ", resumed_at), "the pause did not outlast the member's session"
    retries = retries_on_lost_tables(paused, resumed_at)
    assert all(n <= 1 for n in retries.values()), f"the resumed member retried lost tables' transactions: {retries}"
    trust = reader_trust(settings)  # readers fold only signed records: Tansu shows the lost transactions' ones
    intents = sum(check_exactly_once(read_logs(settings, table), trust=trust).intents for table in tables)
    figures.add("fleet_intents_checked", intents)
    figures.note(
        f"arbiter fleet, a member frozen {PAUSE_IN_TXN:g} s in the middle of a transaction: {len(delays)} "
        f"handover(s), first decision after each: median {statistics.median(delays):.1f} s, max {delays[-1]:.1f} s; "
        f"{intents} intents, each decided once"
    )
