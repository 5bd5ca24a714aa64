"""Closed-loop writers (issue 32): 8 writer processes commit to their own partitions, round after round.

Each writer is its own process with its own ``CommitClient`` and commits
INSERT_INTOs one at a time to its own partition ``p=w<n>`` of the round's
table (a fresh table per round), with ``read_version`` = the version of its
previous commit: no two writers ever conflict. A commit that times out is not
retried; the writer goes on with its next one, whose ``read_version`` is then
older than its own timed-out (and, later, accepted) commit, which the arbiter
rejects with ``CONFLICT_LATER_FAILS`` naming the writer's own txn. So the
figures that matter: every commit's latency (the slowest, p99, p50), timeouts,
and rejections naming the writer's own commit (there must be none).

``ClosedLoop`` runs the writers for ``tests/chaos/test_closed_loop_writers.py``
too; ``run()`` is the benchmark (``python -m bench closed-loop``): one ``ordo
arbiter`` per broker, ``rounds`` rounds of ``commits`` commits per writer
(quick 3 x 200, full 5 x 400, the issue's size), the load average recorded
beside each round. Before the fix the arbiter's idle hand-over could stall a
loaded machine's rounds for minutes (docs/reliability.md, "Closed-loop
writers on a loaded machine").
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.common import Result, broker_label, brokers, machine, percentile, pick, stack
from bench.workload import create_intent, insert_intent

BENCHMARK = "closed-loop writers"
WRITERS = 8
COMMIT_TIMEOUT = 30.0  # CommitClient's default


@dataclass
class WriterRound:
    """What one writer saw in one round."""

    writer: int
    latencies: list[float] = field(default_factory=list)  # seconds per commit, timeouts included
    timeouts: list[str] = field(default_factory=list)  # txn ids
    own_conflicts: list[str] = field(default_factory=list)  # "txn rejected: conflicts with <own earlier txn>"
    rejections: list[str] = field(default_factory=list)  # any other rejection (none expected)
    errors: list[str] = field(default_factory=list)
    resubmits: int = 0
    rereads: int = 0
    recovered: int = 0


@dataclass(frozen=True)
class Job:
    """One round for one writer: ``commits`` commits to ``table`` within ``timeout`` each.

    The writer stops early after ``max_timeouts`` timeouts or ``budget`` seconds (a stalled round ends).
    """

    table: str
    commits: int
    timeout: float = COMMIT_TIMEOUT
    max_timeouts: int = 3
    budget: float = 600.0


def _commit_round(client: Any, writer: int, job: Job) -> WriterRound:
    from ordo.errors import CommitTimeoutError
    from ordo.schemas import Outcome

    seen = WriterRound(writer)
    resubmits, gaps = client.resubmits, client.gap_stats.snapshot()
    version = 0  # the version of this writer's previous commit: only it writes its partition
    ends = time.monotonic() + job.budget
    for i in range(job.commits):
        if len(seen.timeouts) >= job.max_timeouts or time.monotonic() > ends:
            break
        txn = f"w{writer}-{i}"
        intent = insert_intent(
            i, 1, table=job.table, partition=f"w{writer}", read_version=version, txn_prefix=f"w{writer}"
        )
        began = time.monotonic()
        try:
            decision = client.commit(intent, timeout=job.timeout)
        except CommitTimeoutError:
            seen.latencies.append(time.monotonic() - began)
            seen.timeouts.append(txn)
            continue
        except Exception as exc:  # counted and reported: the round goes on
            seen.errors.append(f"{txn}: {type(exc).__name__}: {exc}"[:300])
            continue
        seen.latencies.append(time.monotonic() - began)
        if decision.outcome is Outcome.ACCEPTED and decision.id_version is not None:
            version = decision.id_version
        elif str(decision.conflicting_txn_id or "").startswith(f"w{writer}-"):
            seen.own_conflicts.append(f"{txn} rejected {decision.reason}: conflicts with {decision.conflicting_txn_id}")
        else:
            seen.rejections.append(f"{txn} {decision.outcome.value} {decision.reason}: {decision.message}"[:300])
    seen.resubmits = client.resubmits - resubmits
    after = client.gap_stats.snapshot()
    seen.rereads, seen.recovered = after["rereads"] - gaps["rereads"], after["recovered"] - gaps["recovered"]
    return seen


def _writer(settings: Any, writer: int, jobs: Any, results: Any, prepare: Callable[[Any], None] | None) -> None:
    """A writer process: one ``CommitClient``; a ``Job`` per round from ``jobs`` until None."""
    from ordo.producer import CommitClient

    if prepare is not None:
        prepare(settings)  # a test's fault injection, installed in this process
    with CommitClient(settings=settings) as client:
        results.put(("ready", writer))
        for job in iter(jobs.get, None):
            results.put(("round", _commit_round(client, writer, job)))


class ClosedLoop:
    """``writers`` writer processes (spawned once), each its own ``CommitClient``; ``round()`` runs one round."""

    def __init__(
        self,
        settings: Any,
        writers: int = WRITERS,
        prepare: Callable[[Any], None] | None = None,
        start_timeout: float = 120.0,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self.settings = settings
        self.results = context.Queue()
        self.jobs = [context.Queue() for _ in range(writers)]
        self.processes = [
            context.Process(target=_writer, args=(settings, w, self.jobs[w], self.results, prepare), daemon=True)
            for w in range(writers)
        ]
        for process in self.processes:
            process.start()
        try:
            for _ in self.processes:
                self._next("ready", start_timeout)
        except BaseException:
            self.close()
            raise

    def _next(self, kind: str, timeout: float) -> Any:
        got, value = self.results.get(timeout=timeout)
        if got != kind:
            raise RuntimeError(f"expected {kind!r} from a writer, got {got!r}")
        return value

    def round(self, job: Job) -> list[WriterRound]:
        """Create ``job.table`` (its CREATE decided), run the job on every writer at once; each writer's account."""
        from ordo.producer import CommitClient

        with CommitClient(settings=self.settings) as client:
            client.commit(create_intent(job.table), timeout=job.timeout)  # a stalled arbiter fails here already
        for jobs in self.jobs:
            jobs.put(job)
        wait = job.budget + job.timeout + 120
        return sorted((self._next("round", wait) for _ in self.processes), key=lambda r: r.writer)

    def close(self) -> None:
        """Stop the writers (killed if they do not end within 30 s)."""
        for jobs in self.jobs:
            jobs.put(None)
        for process in self.processes:
            process.join(30)
            if process.is_alive():
                process.kill()

    def __enter__(self) -> ClosedLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def summary(rounds: list[list[WriterRound]]) -> dict[str, Any]:
    """The figures of ``rounds``: commits, timeouts, own conflicts, slowest, p99 and p50 (seconds), resubmits."""
    latencies = [x for writers in rounds for w in writers for x in w.latencies]
    return {
        "commits": len(latencies),
        "timeouts": sum(len(w.timeouts) for writers in rounds for w in writers),
        "own_conflicts": sum(len(w.own_conflicts) for writers in rounds for w in writers),
        "other_rejections": sum(len(w.rejections) for writers in rounds for w in writers),
        "errors": sum(len(w.errors) for writers in rounds for w in writers),
        "slowest_s": round(max(latencies), 3) if latencies else None,
        "p99_s": round(percentile(latencies, 99), 3) if latencies else None,
        "p50_s": round(percentile(latencies, 50), 4) if latencies else None,
        "resubmits": sum(w.resubmits for writers in rounds for w in writers),
        "client_rereads": sum(w.rereads for writers in rounds for w in writers),
    }


def _measure(kind: str, rounds: int, commits: int) -> dict[str, Any]:
    done: list[list[WriterRound]] = []
    per_round: list[dict[str, Any]] = []
    with stack(f"closed-loop-{kind}", "loop", consumer=False, broker=kind) as bench_stack:
        with ClosedLoop(bench_stack.settings) as loop:
            for r in range(rounds):
                began = time.monotonic()
                writers = loop.round(Job(f"loop{r}", commits))
                done.append(writers)
                figures = summary([writers])
                figures.update(
                    seconds=round(time.monotonic() - began, 1), load_average=[round(x, 2) for x in os.getloadavg()]
                )
                per_round.append(figures)
                print(f"  {kind} round {r}: {figures}", flush=True)
    return {"total": summary(done), "rounds": per_round}


def run() -> list[Result]:
    rounds, commits = pick((3, 200), (5, 400))
    results: list[Result] = []
    for kind in brokers():
        measured = _measure(kind, rounds, commits)
        total = measured["total"]
        notes = (
            f"{broker_label(kind)}; {WRITERS} writers x {commits} commits x {rounds} rounds, own partitions; "
            f"timeouts {total['timeouts']}, own conflicts {total['own_conflicts']}, resubmits {total['resubmits']}; "
            f"load average per round {[r['load_average'] for r in measured['rounds']]}"
        )
        for figure, key in (("slowest commit", "slowest_s"), ("p99 commit latency", "p99_s")):
            results.append(
                Result(
                    BENCHMARK,
                    f"{figure} ({kind})",
                    "s",
                    total[key],
                    target=f"< {COMMIT_TIMEOUT:g} s (the client's timeout), 0 timeouts, 0 own conflicts",
                    met=total["timeouts"] == 0 and total["own_conflicts"] == 0 and total[key] < COMMIT_TIMEOUT,
                    samples=measured,
                    notes=notes,
                    machine=machine(),
                )
            )
    return results
