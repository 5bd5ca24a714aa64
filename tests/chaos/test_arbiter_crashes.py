"""Arbiter crashes and twins: kill -9 at random moments, and second/third arbiters started by mistake.

8 writer threads keep intents in flight through ``CommitClient.commit``: inserts
into their own partition (accepted), inserts into a shared hot partition at a
stale read version (some rejected with CONFLICT_LATER_FAILS), and retries of
their previous txn id (answered as duplicates). Afterwards both logs are read
back and checked: one decision per intent (first decision per intent offset),
contiguous ID versions with no repeat, the decisions log equal to what the
pure core re-derives from the intents log, and every ``commit()`` returned
exactly the logged decision.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ordo.kernel.keys import reader_trust
from ordo.producer import CommitClient
from ordo.schemas import CommitDecision, CommitIntent
from ordo.services.stack import ARBITER_READY, ManagedProcess, ProcessError, wait_arbiter_ready
from ordo.settings import Settings
from tests.fencing import take_over

from . import figures
from .common import (
    check_exactly_once,
    check_later_are_copies,
    create_intent,
    insert_intent,
    read_logs,
    wait_until,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(figures.pick(240, 1800))]

KILLS = figures.pick(5, 100)
TWIN_ROUNDS = figures.pick(2, 8)


class Writers:
    """``threads`` writers sharing ``clients`` CommitClients; each commit's answer is kept with its intent."""

    def __init__(self, clients: list[CommitClient], table: str, threads: int, seed: int, pause: float = 0.0) -> None:
        self.clients = clients
        self.table = table
        self.pause = pause
        self.results: list[tuple[CommitIntent, CommitDecision]] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._go = threading.Event()  # cleared: each writer finishes its commit in flight, then waits
        self._go.set()
        self._threads = [
            threading.Thread(target=self._run, args=(i, random.Random(seed * 100 + i)), daemon=True)
            for i in range(threads)
        ]

    def _run(self, index: int, rng: random.Random) -> None:
        client = self.clients[index % len(self.clients)]
        seen = 0  # the newest version this writer knows of: its read version
        previous: CommitIntent | None = None
        n = 0
        while not self._stop.is_set():
            self._go.wait()
            roll = rng.random()
            if previous is not None and roll < 0.05:
                intent = previous  # a retry of the same transaction
            elif roll < 0.20:
                intent = insert_intent(self.table, f"w{index}-{n}", "hot", read_version=seen)
            else:
                intent = insert_intent(self.table, f"w{index}-{n}", f"w{index}", read_version=seen)
            n += 1
            try:
                decision = client.commit(intent, timeout=120)
            except BaseException as exc:
                with self._lock:
                    self.errors.append(exc)
                return
            with self._lock:
                self.results.append((intent, decision))
            if decision.id_version is not None:
                seen = max(seen, decision.id_version)
            previous = intent
            if self.pause:
                time.sleep(self.pause * rng.uniform(0.5, 1.5))

    def start(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def count(self) -> int:
        with self._lock:
            return len(self.results)

    def hold(self) -> None:
        """Stop publishing: each writer finishes the commit it has in flight, then waits for ``release()``."""
        self._go.clear()
        deadline = time.monotonic() + 150
        while True:
            with self._lock:
                settled = len(self.results) + len(self.errors)
            time.sleep(0.5)
            with self._lock:
                if len(self.results) + len(self.errors) == settled:
                    return  # nothing answered for half a second: nothing is in flight
            assert time.monotonic() < deadline, "writers did not settle"

    def release(self) -> None:
        """Publish again."""
        self._go.set()

    def stop(self) -> list[tuple[CommitIntent, CommitDecision]]:
        self._stop.set()
        self._go.set()
        for thread in self._threads:
            thread.join(timeout=150)
        assert not any(t.is_alive() for t in self._threads), "a writer is stuck"
        assert not self.errors, f"commit() failed: {self.errors[:3]}"
        return list(self.results)


def check_answers(results: list[tuple[CommitIntent, CommitDecision]], first: dict[int, CommitDecision]) -> None:
    """Every commit() returned exactly the decision the log holds for its intent offset."""
    for intent, decision in results:
        assert decision.txn_id == intent.txn_id
        assert first[decision.intent_offset] == decision, f"txn {intent.txn_id}: commit() and the log disagree"
        if decision.duplicate_of is not None:
            original = first[decision.duplicate_of]
            assert (original.outcome, original.id_version) == (decision.outcome, decision.id_version)


def arbiter_args(state_dir: Path, commit_timeout: float = 10.0) -> list[str]:
    """Frequent checkpoints, so that kills land before, during and after checkpoint writes."""
    return [
        "--state-dir",
        str(state_dir),
        "--checkpoint-every",
        "40",
        "--checkpoint-interval",
        "0.3",
        "--commit-timeout",
        str(commit_timeout),
    ]


def test_arbiter_kill_9_at_random_moments_loses_and_repeats_nothing(
    arbiter: Callable[..., ManagedProcess], settings: Settings, tmp_path: Path, decisions_transactions: bool
) -> None:
    table = "crashy"
    args = arbiter_args(tmp_path / "state")
    rng = random.Random(7)
    clients = [CommitClient(settings=settings) for _ in range(2)]
    current = arbiter(args=args)
    began = time.monotonic()
    try:
        assert clients[0].commit(create_intent(table), timeout=60).id_version == 0
        writers = Writers(clients, table, threads=8, seed=1).start()
        from_checkpoint = 0
        for kill in range(KILLS):
            if kill % 2 == 0:  # while deciding
                before = writers.count()
                wait_until(lambda: writers.count() > before, 60, "decisions after a restart")  # noqa: B023
                time.sleep(rng.uniform(0.0, 1.0))
            else:  # at any point of start-up: fencing, rebuild, checkpoint load
                time.sleep(rng.uniform(0.0, 1.5))
            assert current.kill() == -9
            if "checkpoint of" in current.log_text():
                from_checkpoint += 1
            current = arbiter(args=args, wait_ready=False)
        wait_arbiter_ready(current, 60)
        before = writers.count()
        wait_until(lambda: writers.count() >= before + 50, 90, "decisions after the last restart")
        results = writers.stop()
    finally:
        for client in clients:
            client.close()
    assert current.running
    logs = read_logs(settings, table)
    checked = check_exactly_once(logs, trust=None if decisions_transactions else reader_trust(settings))
    check_answers(results, checked.first)
    copies = check_later_are_copies(logs, settings)  # none with transactions
    assert checked.rejected > 0 and checked.duplicates > 0, "the mix must include conflicts and retries"
    figures.add("arbiter_kills", KILLS)
    figures.add("arbiter_checkpoint_restarts", from_checkpoint)
    figures.add("intents_checked", checked.intents)
    figures.note(
        f"arbiter kill -9 x{KILLS}: {checked.intents} intents, {checked.accepted} accepted, {checked.rejected} "
        f"rejected, {checked.duplicates} retries, {len(results)} commit() answers matched the log, "
        f"{from_checkpoint} restart(s) from a checkpoint, {copies} copies, {time.monotonic() - began:.1f} s"
    )


def test_twin_arbiters_are_fenced_and_nothing_is_decided_twice(
    arbiter: Callable[..., ManagedProcess], settings: Settings, tmp_path: Path, decisions_transactions: bool
) -> None:
    table = "twins"
    # Tansu drops a fenced producer's EndTxn connection: a fenced arbiter caught committing learns it from the
    # commit timeout (docs/tansu.md), hence a short one.
    args = arbiter_args(tmp_path / "state", commit_timeout=5.0)
    clients = [CommitClient(settings=settings) for _ in range(2)]
    fenced = 0
    began = time.monotonic()
    try:
        current = arbiter(args=args)
        assert clients[0].commit(create_intent(table), timeout=60).id_version == 0
        writers = Writers(clients, table, threads=4, seed=2, pause=0.002).start()
        for round_ in range(TWIN_ROUNDS):
            before = writers.count()
            wait_until(lambda: writers.count() >= before + 40, 60, "the current arbiter to decide")  # noqa: B023
            # Never a fence racing a produce of the fenced arbiter: Tansu can then leave a transaction open
            # for good (tests/fencing.py). A single newcomer takes over from a frozen elder (a zombie, paused
            # mid-transaction); a pair starts while the writers hold, so neither produces before both are in.
            if round_ % 2 == 0:
                newcomers = [take_over(current, lambda: arbiter(args=args))]
            else:  # two at once: the younger fences the elder, whichever it is
                writers.hold()
                newcomers = [arbiter(args=args, wait_ready=False) for _ in range(2)]
                wait_until(
                    lambda: all(ARBITER_READY in p.log_text() or not p.running for p in newcomers),  # noqa: B023
                    60,
                    "both newcomers to take the table",
                )
                writers.release()
            assert current.wait(timeout=40) == 3, "the older arbiter must exit as fenced"
            assert "fenced" in current.tail(10)
            fenced += 1
            if len(newcomers) == 2:
                current = _one_survivor(newcomers)
                fenced += 1
            else:
                current = newcomers[0]
            before = writers.count()
            wait_until(lambda: writers.count() >= before + 40, 60, "the newest arbiter to continue")  # noqa: B023
        results = writers.stop()
    finally:
        for client in clients:
            client.close()
    assert current.running
    logs = read_logs(settings, table)
    checked = check_exactly_once(logs, trust=None if decisions_transactions else reader_trust(settings))
    check_answers(results, checked.first)
    copies = check_later_are_copies(logs, settings)  # none with transactions
    figures.add("arbiters_fenced", fenced)
    figures.add("intents_checked", checked.intents)
    figures.note(
        f"twin arbiters: {fenced} fenced (exit 3) in {TWIN_ROUNDS} round(s), {checked.intents} intents decided "
        f"once each ({copies} copies), {time.monotonic() - began:.1f} s"
    )


def _one_survivor(newcomers: list[ManagedProcess]) -> ManagedProcess:
    """Of two arbiters started together, one is fenced (exit 3) and one keeps running."""
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        exited = [p for p in newcomers if not p.running]
        if exited:
            (loser,) = exited
            assert loser.returncode == 3, loser.tail()
            (winner,) = [p for p in newcomers if p is not loser]
            try:
                wait_arbiter_ready(winner, 30)
            except ProcessError:
                pytest.fail(f"the surviving arbiter did not get ready: {winner.tail()}")
            return winner
        time.sleep(0.05)
    pytest.fail("of two arbiters started together, neither was fenced")
