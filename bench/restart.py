"""Arbiter restart time with a long history: checkpoint + log tail vs full replay.

    .venv/bin/python bench/restart.py [--decisions 1000000] [--restarts 3] [--json bench/results/restart.json]

1. Builds a history of ``--decisions`` decisions with the pure core (no arbiter):
   a streaming-ingestion table of ``--partitions`` partitions, mostly one-file
   INSERT_INTOs, a MINOR_COMPACT of a partition every ~25 of its inserts (which
   keeps live files bounded and fills the lineage window), some stale inserts
   into a hot partition (rejected), some retried txn ids (duplicates) and
   streaming (app_id, batch_id) commits. Every txn id is distinct, so the
   dedupe window ends up full (its size is what dominates the state).
2. Publishes the intents (with the record timestamps the core used) and the
   decisions (in Kafka transactions of 50,000, as the arbiter writes them) to a
   dedicated embedded Tansu broker.
3. Starts ``ordo arbiter --state-dir``: a full replay (the baseline); it writes a
   checkpoint right after the rebuild (forked child).
4. ``--restarts`` times: kill -9 the arbiter, publish one intent, start a new
   arbiter and time process start -> that intent's decision is readable (the
   ``CommitClient`` future resolves): "restart to first decision".

Figures are printed and written as JSON (``--json``). Tansu keeps everything in
memory: the broker holds ~2 x decisions records for the run.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ordo.arbiter.checkpoint import checkpoint_path, read_checkpoint
from ordo.arbiter.core import apply, evaluate, new_state
from ordo.broker import EmbeddedBroker, create_table_topics
from ordo.keys import embedded_keys
from ordo.schemas import CommitIntent, DataFile, Operation, TableMetadata, decisions_topic, encode, intents_topic
from ordo.schemas.signing import SIGNATURE_HEADER, Signer
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings

TABLE = "events"
TXN_SIZE = 50_000


def history(decisions: int, partitions: int, seed: int) -> Any:
    """Yield ``(intent bytes, record timestamp, decision bytes)`` for ``decisions`` intents; returns the state."""
    rng = random.Random(seed)
    state = new_state(TABLE)
    clock = 1_700_000_000_000
    create = CommitIntent(
        txn_id="create",
        table=TABLE,
        operation=Operation.CREATE_TABLE,
        read_version=0,
        metadata=TableMetadata(
            location="s3a://warehouse/events",
            schema="id BIGINT, payload STRING, p STRING",
            primary_key=("id",),
            partition_columns=("p",),
        ),
    )
    inserts_since_compaction = [0] * partitions
    recent: list[CommitIntent] = []
    batch_of: dict[str, int] = {}
    for offset in range(decisions):
        clock += rng.choice((0, 1, 1, 2, 5))
        if offset == 0:
            intent = create
        else:
            intent = _next(rng, state, offset, partitions, inserts_since_compaction, recent, batch_of)
        decision = evaluate(state, intent, clock, offset)
        data = encode(decision)
        apply(state, decision, data)
        yield encode(intent), clock, data
    return state


def _next(
    rng: random.Random,
    state: Any,
    n: int,
    partitions: int,
    since: list[int],
    recent: list[CommitIntent],
    batch_of: dict[str, int],
) -> CommitIntent:
    head = state.head_version
    roll = rng.random()
    if recent and roll < 0.01:
        return rng.choice(recent)  # a writer retrying: answered as a duplicate
    k = rng.randrange(partitions)
    spec = {"p": f"{k:04d}"}
    part = state.partitions.get((spec["p"],))
    if since[k] >= 25 and part is not None and len(part.live) > 1:
        since[k] = 0
        return CommitIntent(
            txn_id=f"compact-{n}",
            table=TABLE,
            operation=Operation.MINOR_COMPACT,
            read_version=head,
            partitions=(spec,),
            added_files=(
                DataFile(path=f"p={spec['p']}/compact-{n}-0.parquet", partition=spec, record_count=1, size_bytes=1),
            ),
            removed_files=tuple(sorted(part.live)),
            writer="compactor",
        )
    if roll < 0.04:  # a stale insert into the hot partition: often concurrent with another one
        spec = {"p": "hot"}
        read = max(0, head - rng.randint(0, 3))
    else:
        since[k] += 1
        read = head
    app_id = batch_id = None
    if roll > 0.9:
        app_id = f"stream-{k % 4}"
        batch_id = batch_of[app_id] = batch_of.get(app_id, 0) + 1
    intent = CommitIntent(
        txn_id=f"w{k}-{n}",
        table=TABLE,
        operation=Operation.INSERT_INTO,
        read_version=read,
        partitions=(spec,),
        added_files=(
            DataFile(path=f"p={spec['p']}/w{k}-{n}-0.parquet", partition=spec, record_count=1000, size_bytes=65536),
        ),
        app_id=app_id,
        batch_id=batch_id,
        writer="ingest",
    )
    recent.append(intent)
    if len(recent) > 100:
        recent.pop(0)
    return intent


def publish(bootstrap: str, prefix: str, decisions: int, partitions: int, seed: int, signer: Any) -> Any:
    """Build the history and publish it, signed as the arbiter signs (each transaction's last decision)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    create_table_topics(AdminClient({"bootstrap.servers": bootstrap}), prefix, TABLE)
    common = {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "none"}
    intents = Producer({**common, "enable.idempotence": True})
    decided = Producer({**common, "transactional.id": f"{prefix}.bench-history"})
    decided.init_transactions(30)
    decided.begin_transaction()
    intents_name, decisions_name = intents_topic(prefix, TABLE), decisions_topic(prefix, TABLE)
    generator = history(decisions, partitions, seed)
    count = 0
    began = time.perf_counter()
    held: bytes | None = None  # the newest decision: produced signed at commit, or unsigned once another follows
    while True:
        try:
            intent, stamp, decision = next(generator)
        except StopIteration as stop:
            state = stop.value
            break
        _produce(intents, intents_name, intent, stamp)
        if held is not None:
            _produce(decided, decisions_name, held, None)
        held = decision
        count += 1
        if count % TXN_SIZE == 0:
            _produce(decided, decisions_name, held, None, signer.header(TABLE, held))
            held = None
            decided.commit_transaction(120)
            decided.begin_transaction()
            print(f"  {count:,} decisions built and published ({time.perf_counter() - began:.0f} s)", flush=True)
    if held is not None:
        _produce(decided, decisions_name, held, None, signer.header(TABLE, held))
    decided.commit_transaction(120)
    if intents.flush(120) or decided.flush(120):
        raise SystemExit("records not delivered")
    return state


def _produce(producer: Any, topic: str, value: bytes, timestamp: int | None, signature: bytes | None = None) -> None:
    while True:
        try:
            if signature is not None:
                producer.produce(topic, value, headers=[(SIGNATURE_HEADER, signature)])
            elif timestamp is None:
                producer.produce(topic, value)
            else:
                producer.produce(topic, value, timestamp=timestamp)
            return
        except BufferError:
            producer.poll(0.05)


def _line(process: Any, pattern: str, timeout: float = 600.0) -> re.Match[str]:
    return process.wait_for_line(pattern, timeout=timeout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=1_000_000, help="decisions of history (default 1,000,000)")
    parser.add_argument("--partitions", type=int, default=50, help="partitions (default 50)")
    parser.add_argument("--restarts", type=int, default=3, help="timed restarts from the checkpoint (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()

    from ordo.producer import CommitClient

    result: dict[str, Any] = {"decisions": args.decisions, "broker": "embedded Tansu (in memory)"}
    with ExitStack() as stack:
        broker = stack.enter_context(EmbeddedBroker())
        prefix = f"restart{int(time.time())}"
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ordo-bench-restart-")))
        settings = embedded_keys(
            Settings(bootstrap_servers=broker.bootstrap_servers, topic_prefix=prefix, state_dir=str(work / "state")),
            work,
        )
        began = time.perf_counter()
        signer = Signer.from_file(settings.arbiter_key)
        state = publish(broker.bootstrap_servers, prefix, args.decisions, args.partitions, args.seed, signer)
        result["build_and_publish_s"] = round(time.perf_counter() - began, 1)
        result["state"] = {
            "head_version": state.head_version,
            "txn_ids_in_dedupe_window": len(state.txns),
            "live_files": len(state.files),
            "partitions": len(state.partitions),
            "lineage_paths": len(state.lineage),
            "lineage_entries": len(state.lineage_order),
        }
        print(f"history: {result['state']} in {result['build_and_publish_s']} s", flush=True)
        del state

        group = stack.enter_context(ProcessGroup(log_dir=work / "logs"))
        client = stack.enter_context(CommitClient(settings=settings))
        args_ = ["--state-dir", settings.state_dir]

        # Baseline: no checkpoint, the whole log.
        spawn = time.perf_counter()
        first = group.start_arbiter(settings, wait_ready=False, args=args_)
        ready = _line(first, r"arbiter ready: .* ([0-9.]+) s after start")
        full_ready = time.perf_counter() - spawn
        origin = _line(first, r"table events: rebuilt .* resuming intents at offset \d+ \((.*)\)$").group(1)
        written = _line(first, r"checkpoint: 1 table\(s\) written in ([0-9.]+) s")
        path = checkpoint_path(settings.state_dir, prefix, TABLE)
        size = path.stat().st_size
        t = time.perf_counter()
        loaded = read_checkpoint(path, TABLE)
        load_s = time.perf_counter() - t
        result["full_replay"] = {
            "spawn_to_ready_s": round(full_ready, 2),
            "in_process_ready_s": float(ready.group(1)),
            "rebuild": origin,
        }
        result["checkpoint"] = {
            "bytes": size,
            "write_s_forked_child": float(written.group(1)),
            "read_and_decode_s_in_process": round(load_s, 3),
            "decisions": loaded.state.decisions,
        }
        del loaded
        print(f"full replay: ready {full_ready:.2f} s after spawn ({origin})", flush=True)
        print(f"checkpoint: {size / 1e6:.1f} MB, written in {written.group(1)} s (forked), read in {load_s:.2f} s")

        # Timed restarts: kill -9, one intent waiting, start, time to its decision.
        current = first
        timings: list[float] = []
        breakdown: list[dict[str, Any]] = []
        for attempt in range(args.restarts):
            current.kill()
            future = client.submit(_probe(attempt, loaded_head=result["state"]["head_version"] + attempt), timeout=120)
            spawn = time.perf_counter()
            current = group.start_arbiter(settings, wait_ready=False, args=args_)
            decision = future.result(timeout=120)
            elapsed = time.perf_counter() - spawn
            if not decision.accepted:
                raise SystemExit(f"the probe intent was rejected: {decision.reason} {decision.message}")
            timings.append(elapsed)
            ready = _line(current, r"arbiter ready: .* ([0-9.]+) s after start")
            origin = _line(current, r"table events: rebuilt .* resuming intents at offset \d+ \((.*)\)$").group(1)
            breakdown.append(
                {
                    "spawn_to_decision_s": round(elapsed, 3),
                    "ready_in_process_s": float(ready.group(1)),
                    "rebuild": origin,
                }
            )
            print(f"restart {attempt + 1}: first decision {elapsed:.2f} s after spawn ({origin})", flush=True)
        result["restart_to_first_decision_s"] = {
            "median": round(statistics.median(timings), 3),
            "min": round(min(timings), 3),
            "max": round(max(timings), 3),
            "runs": breakdown,
        }
        current.terminate()
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


def _probe(attempt: int, loaded_head: int) -> CommitIntent:
    """A fresh insert at the head (in its own partition): accepted by the restarted arbiter."""
    spec = {"p": f"probe{attempt}"}
    return CommitIntent(
        txn_id=f"probe-{attempt}",
        table=TABLE,
        operation=Operation.INSERT_INTO,
        read_version=loaded_head,
        partitions=(spec,),
        added_files=(
            DataFile(path=f"p=probe{attempt}/probe-{attempt}-0.parquet", partition=spec, record_count=1, size_bytes=1),
        ),
    )


if __name__ == "__main__":
    main()
