"""Profile the arbiter's hot path: the pure path in-process, or the real ``ordo arbiter`` under py-spy.

    python -m bench.profiling core [-n 20000]          # cProfile of decode -> decide -> encode -> apply
    python -m bench.profiling core --pyinstrument      # the same under pyinstrument (the bench extra)
    python -m bench.profiling arbiter [-n 30000]       # py-spy sampling the arbiter process on the broker

Prints self and inclusive time per function (py-spy's raw stacks aggregated
by function, not by line). This is how the optimizations in docs/benchmarks.md
were found.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.common import ROOT, isolate_state, output_timestamps, publish, rate_between
from bench.workload import TABLE, fold, insert_records


def profile_core(n: int, use_pyinstrument: bool) -> None:
    values = [value for _, value in insert_records(n)]
    fold(values[:1000], keep=False)  # warm-up
    if use_pyinstrument:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005)
        profiler.start()
        fold(values, keep=False)
        profiler.stop()
        print(profiler.output_text(unicode=True, color=False, show_all=False))
        return
    stats_path = Path(tempfile.mkdtemp(prefix="ordo-prof-")) / "core.prof"
    cProfile.runctx("fold(values, keep=False)", {"fold": fold}, {"values": values}, str(stats_path))
    stats = pstats.Stats(str(stats_path))
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)


def _function(frame: str) -> str:
    """``name (file:line)`` -> ``name (file)``: py-spy's raw frames carry the line, aggregate by function."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def print_py_spy(path: Path, top: int = 30, lines_of: str | None = None) -> None:
    """Self and inclusive share per function from py-spy's collapsed stacks (and per line of ``lines_of``)."""
    if not path.exists():
        print("py-spy wrote no profile (is ptrace allowed?)")
        return
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    by_line: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        raw = stack.split(";")
        frames = [_function(f) for f in raw]
        self_time[frames[-1]] += count
        if lines_of and raw[-1].startswith(lines_of + " ("):
            by_line[raw[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
        total += count
    print(f"py-spy: {total} samples")
    print("self time:")
    for frame, count in self_time.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}")
    print("inclusive time:")
    for frame, count in inclusive.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}")
    if lines_of:
        print(f"self time by line of {lines_of}:")
        for frame, count in by_line.most_common(top):
            print(f"  {100 * count / total:5.1f}%  {frame}")


def profile_arbiter(n: int, lines_of: str | None = None) -> None:
    from confluent_kafka.admin import AdminClient

    from ordo.broker import EmbeddedBroker, create_table_topics
    from ordo.keys import embedded_keys
    from ordo.schemas import decisions_topic, intents_topic
    from ordo.services.stack import ProcessGroup
    from ordo.settings import Settings

    records = insert_records(n)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    work = Path(tempfile.mkdtemp(prefix="ordo-prof-"))
    isolate_state(work)
    out = work / "arbiter.txt"
    with EmbeddedBroker() as broker, ProcessGroup(log_dir=work) as group:
        bootstrap = broker.bootstrap_servers
        prefix = "prof"
        create_table_topics(AdminClient({"bootstrap.servers": bootstrap}), prefix, TABLE)
        publish(bootstrap, intents_topic(prefix, TABLE), records)
        settings = embedded_keys(
            Settings(bootstrap_servers=bootstrap, topic_prefix=prefix, state_dir=str(work / "state")), work
        )
        arbiter = group.start_arbiter(settings, wait_ready=True, timeout=120)
        profiler = subprocess.Popen(
            [py_spy, "record", "--pid", str(arbiter.pid), "--format", "raw", "--output", str(out), "--rate", "500"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started = time.perf_counter()
        stamps = output_timestamps(bootstrap, decisions_topic(prefix, TABLE), len(records), timeout=max(120, n / 200))
        print(f"{len(records)} decisions in {time.perf_counter() - started:.1f} s: {rate_between(stamps):,.0f}/s")
        arbiter.terminate()  # py-spy writes its output when the process it samples exits
        profiler.wait(timeout=60)
    print_py_spy(out, lines_of=lines_of)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("core", "arbiter"))
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--pyinstrument", action="store_true")
    parser.add_argument("--lines-of", default=None, help="also show self time per line of this function (py-spy)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.what == "core":
        profile_core(args.n, args.pyinstrument)
    else:
        profile_arbiter(args.n, args.lines_of)


if __name__ == "__main__":
    main()
