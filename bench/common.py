"""Shared benchmark helpers: the machine, interleaved repetition, medians, result records, topics.

Every comparison in ``bench`` runs both sides in the same run on the same
machine, interleaved (A B, B A, A B, ...) and repeated; the median is reported,
with the spread kept in ``samples``. A result record is one JSON object per
figure: our figure, the peer's figure, their ratio, the target, and the machine
(including the load average before and after, because the development machine
is shared).
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

QUICK = "quick"
FULL = "full"


def profile() -> str:
    """``quick`` (default, under 10 minutes) or ``full`` (``BENCH_PROFILE=full``)."""
    value = os.environ.get("BENCH_PROFILE", QUICK).strip().lower() or QUICK
    if value not in (QUICK, FULL):
        raise SystemExit(f"BENCH_PROFILE must be {QUICK!r} or {FULL!r}, got {value!r}")
    return value


def pick(quick: Any, full: Any) -> Any:
    """The quick or full profile's value."""
    return full if profile() == FULL else quick


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def isolate_state(work: Path) -> None:
    """Point arbiters started from here at their own checkpoint directory (``ORDO_STATE_DIR``).

    Child processes inherit it; without it they would share the user's default
    state directory with every other run on the machine.
    """
    os.environ["ORDO_STATE_DIR"] = str(work / "state")


BROKERS = ("tansu", "kafka")


def brokers() -> list[str]:
    """The brokers the broker-facing benchmarks run on: ``BENCH_BROKERS`` (default ``tansu,kafka``), in order."""
    chosen = [k.strip().lower() for k in os.environ.get("BENCH_BROKERS", ",".join(BROKERS)).split(",") if k.strip()]
    unknown = [k for k in chosen if k not in BROKERS]
    if unknown or not chosen:
        raise SystemExit(f"BENCH_BROKERS must name some of {BROKERS}, got {os.environ.get('BENCH_BROKERS')!r}")
    return list(dict.fromkeys(chosen))


def broker_label(kind: str) -> str:
    """How a result names its broker."""
    return "Tansu (embedded, in memory)" if kind == "tansu" else "Apache Kafka (1 node, KRaft)"


def new_broker(kind: str, nodes: int = 1) -> Any:
    """A not yet started broker of ``kind`` on loopback: the embedded Tansu or an Apache Kafka of ``nodes``."""
    if kind == "tansu":
        from ordo.broker import EmbeddedBroker

        return EmbeddedBroker()
    from ordo.broker.kafka import KafkaCluster

    return KafkaCluster(nodes)


@dataclass
class Stack:
    """A benchmark's ordo stack on loopback: the embedded broker, its processes, settings and work directory."""

    broker: Any
    group: Any
    settings: Any
    work: Path
    arbiter: Any
    consumer: Any | None


@contextmanager
def stack(
    name: str, prefix: str = "bench", *, consumer: bool = True, timeout: float = 120.0, broker: str = "tansu"
) -> Iterator[Stack]:
    """A fresh broker of kind ``broker`` (default the embedded Tansu), an ``ordo arbiter`` (signing with a fresh key) and, with ``consumer``, an ``ordo
    consumer`` on a SQLite catalog, all under a new work directory; stopped at the end."""
    from ordo.keys import embedded_keys
    from ordo.services.stack import ProcessGroup
    from ordo.settings import Settings

    work = Path(tempfile.mkdtemp(prefix=f"ordo-bench-{name}-"))
    isolate_state(work)
    with new_broker(broker) as running, ProcessGroup(log_dir=work / "logs") as group:
        settings = Settings(
            bootstrap_servers=running.bootstrap_servers,
            topic_prefix=prefix,
            warehouse=str(work / "warehouse"),
            catalog=str(work / "catalog.db"),
            state_dir=str(work / "state"),
        )
        settings = embedded_keys(settings, work)
        arbiter = group.start_arbiter(settings, timeout=timeout)
        process = None
        if consumer:
            process = group.start_ordo(settings, "consumer", "--no-http", name="consumer")
            process.wait_for_line("consumer ready", timeout=timeout)
        yield Stack(running, group, settings, work, arbiter, process)


def machine() -> dict[str, Any]:
    """What the figures were measured on (load average included: other work on the machine skews them)."""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def median(values: Iterable[float]) -> float:
    """The median of ``values``."""
    return float(statistics.median(list(values)))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, nearest-rank."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return float(ordered[rank])


def interleave(sides: dict[str, Callable[[int], Any]], repeats: int) -> dict[str, list[Any]]:
    """Run each side ``repeats`` times, alternating the order every round (A B, B A, ...).

    Each callable gets the round number; returns every side's results in order.
    """
    names = list(sides)
    results: dict[str, list[Any]] = {name: [] for name in names}
    for round_ in range(repeats):
        order = names if round_ % 2 == 0 else list(reversed(names))
        for name in order:
            results[name].append(sides[name](round_))
    return results


@dataclass
class Result:
    """One figure: ours, the peer's on the same machine in the same run, their ratio, the target."""

    benchmark: str
    figure: str
    unit: str
    value: float | None
    peer: str | None = None
    peer_value: float | None = None
    ratio: float | None = None
    target: str | None = None
    met: bool | None = None
    status: str = "ok"  # ok | pending | error
    samples: dict[str, Any] = field(default_factory=dict)
    notes: str = ""
    machine: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` rounded, or None."""
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)


def pending(benchmark: str, figure: str, unit: str, why: str, target: str | None = None) -> Result:
    """A figure that could not be measured in this run (the reason says why)."""
    return Result(benchmark, figure, unit, None, target=target, status="pending", notes=why, machine=machine())


def fmt(value: float | None) -> str:
    """A figure for the table: thousands separators, 3 significant digits below 100."""
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def table(results: Sequence[Result]) -> str:
    """The results as a Markdown table (printed, and pasted into docs/benchmarks.md)."""
    header = ("benchmark", "figure", "ordo", "peer", "peer figure", "ratio", "target", "met")
    rows = [header, tuple("---" for _ in header)]
    for r in results:
        met = "-" if r.met is None else ("yes" if r.met else "no")
        value = f"{fmt(r.value)} {r.unit}" if r.status == "ok" else r.status
        peer_value = f"{fmt(r.peer_value)} {r.unit}" if r.peer_value is not None else "-"
        rows.append((r.benchmark, r.figure, value, r.peer or "-", peer_value, fmt(r.ratio), r.target or "-", met))
    return "\n".join("| " + " | ".join(str(c) for c in row) + " |" for row in rows)


# --------------------------------------------------------------------------- Kafka helpers


def publish(bootstrap: str, topic: str, records: Sequence[tuple[bytes | None, bytes]]) -> None:
    """Produce ``(key, value)`` records to ``topic`` (idempotent, batched) and wait for all acks."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20, "allow.auto.create.topics": False}
    )
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records to {topic} not delivered")


def output_timestamps(
    bootstrap: str, topic: str, expected: int, timeout: float, on_first: Callable[[], Any] | None = None
) -> list[int]:
    """Record timestamps (ms) of the first ``expected`` records of ``topic`` (read_committed, from offset 0).

    ``on_first`` is called as soon as the first record is read.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ordo-bench",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "allow.auto.create.topics": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    stamps: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while len(stamps) < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(stamps)} of {expected} records on {topic} after {timeout:.0f} s")
            for message in consumer.consume(num_messages=10_000, timeout=0.05):
                if message.error() is None:
                    if not stamps and on_first is not None:
                        on_first()
                    stamps.append(message.timestamp()[1])
    finally:
        consumer.close()
    return stamps[:expected]


def rate_between(stamps: Sequence[int]) -> float:
    """Records per second between the first and the last timestamp (ms)."""
    span = (stamps[-1] - stamps[0]) / 1000.0
    return (len(stamps) - 1) / span if span > 0 else float("inf")


def rss_kib(pid: int | None = None) -> int:
    """Resident set size of ``pid`` (default: this process) in KiB, from /proc."""
    path = Path(f"/proc/{pid or 'self'}/status")
    for line in path.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc status")


def run_module(module: str, *args: str, timeout: float = 600.0) -> str:
    """Run ``python -m <module> args`` in a fresh interpreter; return its stdout (raise with stderr on failure)."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout
