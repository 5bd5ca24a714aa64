"""Figure 4: scale. Decision cost against history and live files, memory per live file, restart, consumer.

* Time per decision (pure path: decode, decide, encode, hash, apply; CPU time)
  after H commits of history with L live files, for H in {1k, 1M} (quick
  profile: 1k, 100k) and L in {100, 100k}. History is built through the real
  path: L/100 INSERT_INTOs of 100 files into their own partitions, then
  INSERT_OVERWRITEs of 4 files cycling over 25 partitions (which keeps 100
  files live there). Then 4-file INSERT_INTOs into those partitions at the
  head version are timed in blocks; median block. Each case runs in its own
  interpreter (its own heap, as an arbiter would have), cases alternating.
  The arbiter's cost should not depend on history or on the live set.
* Arbiter RSS per live file: resident memory grown while folding commits that
  leave L live files (100 files per commit, and 4 per commit), divided by L.
* Restart to first decision with 1M decisions of history: ``bench/restart.py``
  (the checkpoint engineer's) when present, else pending.
* Consumer apply rate: ``bench/consumer_quick.py``'s catalog apply (decode,
  chain check, SQLite rows per decision) over INSERT decisions of 4 files.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import ROOT, Result, machine, median, pending, pick, ratio, rss_kib, run_module

BENCHMARK = "scale"
CHURN_PARTITIONS = 25


def _history(history: int, live: int, files_per_bulk_commit: int = 100) -> Iterator[bytes]:
    """Encoded intents: CREATE, bulk inserts to ``live`` files, then overwrites up to ``history`` commits."""
    from bench.workload import create_intent, insert_intent
    from ordo.schemas import Operation, encode

    yield encode(create_intent())
    bulk = live // files_per_bulk_commit if live >= 1000 else 0
    for i in range(bulk):
        yield encode(insert_intent(i, files_per_bulk_commit, partition=f"b{i}", txn_prefix="bulk"))
    for i in range(max(0, history - bulk)):
        yield encode(
            insert_intent(
                i,
                4,
                partition=f"c{i % CHURN_PARTITIONS}",
                read_version=0,
                operation=Operation.INSERT_OVERWRITE,
                txn_prefix="churn",
            )
        )


def _fold(values: Iterator[bytes]) -> Any:
    from bench.workload import BASE_TS, TABLE
    from ordo.arbiter.core import apply, evaluate_record, new_state
    from ordo.schemas import encode

    state = new_state(TABLE)
    for offset, value in enumerate(values):
        decision = evaluate_record(state, value, BASE_TS + offset, offset)
        if not decision.accepted:
            raise RuntimeError(f"history intent {offset} rejected: {decision.reason} {decision.message}")
        apply(state, decision, encode(decision))
    return state


def _full_collection_ms() -> float:
    """Milliseconds of one full (generation-2) GC collection now."""
    started = time.perf_counter()
    gc.collect()
    return (time.perf_counter() - started) * 1000


def decide_case(history: int, live: int, blocks: int, block: int) -> dict[str, Any]:
    """Build the history, then time ``blocks`` x ``block`` decisions (CPU µs per decision per block).

    Also the time of a full GC collection right after the build, and again after ``freeze_state`` (as the
    arbiter does after a rebuild); the decisions are timed with the state frozen, as in the arbiter.
    """
    from bench.workload import BASE_TS, insert_intent
    from ordo.arbiter.checkpointer import freeze_state
    from ordo.arbiter.core import apply, evaluate_record
    from ordo.schemas import encode

    started = time.perf_counter()
    state = _fold(_history(history, live))
    build_s = time.perf_counter() - started
    live_files = len(state.files)
    gc_ms = _full_collection_ms()  # it walks every tracked object of the state: a pause of the arbiter's loop
    freeze_state(full=True)  # what the arbiter does after a rebuild
    frozen_ms = _full_collection_ms()  # the same collection, the state frozen
    per_decision: list[float] = []
    n = 0
    for _ in range(blocks):
        values = [
            encode(
                insert_intent(
                    n + i,
                    4,
                    partition=f"c{(n + i) % CHURN_PARTITIONS}",
                    read_version=state.head_version + i,
                    txn_prefix="t",
                )
            )
            for i in range(block)
        ]
        offset = state.next_offset
        cpu = time.process_time()
        for i, value in enumerate(values):
            decision = evaluate_record(state, value, BASE_TS + offset + i, offset + i)
            apply(state, decision, encode(decision))
        per_decision.append((time.process_time() - cpu) / block * 1e6)
        n += block
    gc.unfreeze()  # the next case starts from a heap like this one's
    return {
        "history": history,
        "live_files": live_files,
        "build_s": round(build_s, 1),
        "gc_full_collection_ms": round(gc_ms, 1),
        "gc_full_collection_frozen_ms": round(frozen_ms, 1),
        "us_per_decision": [round(x, 2) for x in per_decision],
        "median_us": round(median(per_decision), 2),
    }


def rss_case(live: int, files_per_commit: int) -> dict[str, Any]:
    """Resident memory grown by folding commits that leave ``live`` live files."""
    gc.collect()
    before = rss_kib()
    state = _fold(_history(0, live, files_per_commit) if live >= 1000 else _history(0, 0))
    gc.collect()
    after = rss_kib()
    return {
        "live_files": len(state.files),
        "commits": state.head_version,
        "files_per_commit": files_per_commit,
        "rss_growth_mib": round((after - before) / 1024, 1),
        "bytes_per_live_file": round((after - before) * 1024 / max(1, len(state.files))),
    }


def _child(*args: str) -> dict[str, Any]:
    output = run_module("bench.scale", *args, timeout=3600)
    return json.loads(output.strip().splitlines()[-1])


def _decisions(results: list[Result]) -> None:
    big = pick(100_000, 1_000_000)
    cases = [(1_000, 100), (big, 100), (1_000, 100_000), (big, 100_000)]
    blocks, block = pick((7, 2_000), (7, 5_000))
    measured: dict[tuple[int, int], list[dict[str, Any]]] = {case: [] for case in cases}
    rounds = 2
    for round_ in range(rounds):
        order = cases if round_ % 2 == 0 else list(reversed(cases))
        for history, live in order:
            measured[(history, live)].append(_child("decide", str(history), str(live), str(blocks), str(block)))
    med = {case: median(r["median_us"] for r in runs) for case, runs in measured.items()}

    def flat(figure: str, large: float, peer: str, small: float, samples: dict[str, Any]) -> Result:
        """A per-decision cost that must not grow with the case: ``large`` against ``small``."""
        return Result(
            BENCHMARK,
            figure,
            "µs",
            round(large, 2),
            peer=peer,
            peer_value=round(small, 2),
            ratio=ratio(large, small),
            target="flat (ratio ~1)",
            met=(ratio(large, small) or 9) <= 1.25,
            samples=samples,
            notes="pure path, CPU time, median of blocks; each case in its own interpreter",
            machine=machine(),
        )

    for live in (100, 100_000):
        results.append(
            flat(
                f"µs per decision, {big:,} vs 1,000 commits of history ({live:,} live files)",
                med[(big, live)],
                "1,000 commits of history",
                med[(1_000, live)],
                {str(k): v for k, v in measured.items() if k[1] == live},
            )
        )
    pause = median(r["gc_full_collection_ms"] for r in measured[(big, 100_000)])
    results.append(
        Result(
            BENCHMARK,
            f"full GC collection with {big:,} commits of history (100k live files)",
            "ms",
            round(pause, 1),
            peer="1,000 commits of history",
            peer_value=round(median(r["gc_full_collection_ms"] for r in measured[(1_000, 100_000)]), 1),
            samples={
                "gc_full_collection_ms": {str(k): [r["gc_full_collection_ms"] for r in v] for k, v in measured.items()}
            },
            notes="gc.collect() right after the build: CPython's generation-2 collections walk the whole state, a "
            "pause of the arbiter's loop that grows with history (the arbiter freezes the state after a rebuild: "
            "next figure)",
            machine=machine(),
        )
    )
    frozen = median(r["gc_full_collection_frozen_ms"] for r in measured[(big, 100_000)])
    results.append(
        Result(
            BENCHMARK,
            f"full GC collection with {big:,} commits of history (100k live files), state frozen",
            "ms",
            round(frozen, 1),
            peer="the same collection, state not frozen",
            peer_value=round(pause, 1),
            ratio=ratio(frozen, pause),
            samples={
                "gc_full_collection_frozen_ms": {
                    str(k): [r["gc_full_collection_frozen_ms"] for r in v] for k, v in measured.items()
                }
            },
            notes="gc.collect() after arbiter.checkpointer.freeze_state(full=True), which the arbiter runs after "
            "every rebuild (and, for the young generations, before forking a checkpoint)",
            machine=machine(),
        )
    )
    for history in (1_000, big):
        results.append(
            flat(
                f"µs per decision, 100k vs 100 live files ({history:,} commits of history)",
                med[(history, 100_000)],
                "100 live files",
                med[(history, 100)],
                {str(k): v for k, v in measured.items() if k[0] == history},
            )
        )


def _memory(results: list[Result]) -> None:
    live = pick(100_000, 1_000_000)
    for files_per_commit in (100, 4):
        r = _child("rss", str(live), str(files_per_commit))
        results.append(
            Result(
                BENCHMARK,
                f"arbiter RSS per live file ({files_per_commit} files per commit)",
                "bytes",
                r["bytes_per_live_file"],
                samples=r,
                notes=f"RSS grown by folding {r['commits']:,} commits leaving {r['live_files']:,} live files "
                "(state incl. the dedupe window of txn ids)",
                machine=machine(),
            )
        )


def _restart(results: list[Result]) -> None:
    """``bench/restart.py`` (the checkpoint engineer's script) as a subprocess; its JSON gives the figure."""
    decisions = pick(300_000, 1_000_000)
    figure = f"arbiter restart to first decision, {decisions:,} decisions of history"
    path = ROOT / "bench" / "restart.py"
    if not path.exists():
        results.append(pending(BENCHMARK, figure, "s", "bench/restart.py (checkpoints) not present yet", "<= 3 s"))
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "restart.json"
        done = subprocess.run(
            [sys.executable, str(path), "--decisions", str(decisions), "--restarts", "3", "--json", str(out)],
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=ROOT,
        )
        if done.returncode != 0 or not out.exists():
            why = f"bench/restart.py exited {done.returncode}: {done.stderr[-1500:]}"
            results.append(pending(BENCHMARK, figure, "s", why, "<= 3 s"))
            return
        data = json.loads(out.read_text())
    restart = data["restart_to_first_decision_s"]
    full = data.get("full_replay", {}).get("spawn_to_ready_s")
    results.append(
        Result(
            BENCHMARK,
            figure,
            "s",
            restart["median"],
            peer="full replay of the log (no checkpoint)",
            peer_value=full,
            ratio=ratio(restart["median"], full),
            target="<= 3 s (1M decisions)",
            met=restart["median"] <= 3 if decisions >= 1_000_000 else None,
            samples=data,
            notes="bench/restart.py: kill -9, one intent waiting, new arbiter from its checkpoint; "
            "spawn to that intent's decision; median of 3",
            machine=machine(),
        )
    )


def _consumer(results: list[Result]) -> None:
    from bench import consumer_quick

    decisions = pick(25_000, 100_000)
    records = consumer_quick.build_log(decisions)
    runs = []
    for _ in range(pick(3, 5)):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(consumer_quick.bench_apply(records, Path(tmp) / "catalog.db"))
    rate = median(r["decisions_per_s"] for r in runs)
    results.append(
        Result(
            BENCHMARK,
            "consumer apply rate (SQLite catalog, 4 files per decision)",
            "decisions/s",
            round(rate),
            target=">= 50,000/s",
            met=rate >= 50_000,
            samples={
                "decisions": len(records),
                "decisions_per_s": [r["decisions_per_s"] for r in runs],
                "decisions_per_cpu_s": [r["decisions_per_cpu_s"] for r in runs],
            },
            notes="bench/consumer_quick.py bench_apply: CatalogWriter.apply in batches of 5000, no Kafka",
            machine=machine(),
        )
    )


def run() -> list[Result]:
    results: list[Result] = []
    _decisions(results)
    _memory(results)
    _consumer(results)
    _restart(results)
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("decide", "rss"):
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        if sys.argv[1] == "decide":
            out = decide_case(*(int(x) for x in sys.argv[2:6]))
        else:
            out = rss_case(int(sys.argv[2]), int(sys.argv[3]))
        print(json.dumps(out))
    else:
        from bench.common import table

        print(table(run()))
