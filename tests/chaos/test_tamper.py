"""Tamper evidence: forged decisions produced straight to decisions topics by a plain Kafka producer.

Each case gets its own table. Its intents log is published with the record
timestamps the pure core decides with; its decisions log is the core's own
answer (what the arbiter would write), signed with the arbiter's key as the
arbiter signs it, with one forgery applied (a forger has no key: what it
writes or rewrites is unsigned). Then:

* ``ordo replay TABLE --verify`` (the real CLI, as a process) must exit 1 and
  name the forgery's decisions-log offset (a faithful log exits 0);
* the consumer must never materialize a forged decision, chain-correct or not
  (a forger who recomputes the chain behind an edit, or appends a
  chain-correct decision, is refused for want of a signature): it applies the
  authentic records no forgery displaced and refuses the rest, by offset.

A last case uses a real arbiter: while it is stopped, a forger publishes an
intent and a chain-correct forged decision for it; the restarted arbiter does
not fold the forgery (unsigned), decides the intent itself and keeps deciding
every table; the audit replay reports the forgery at its offset.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from ordo.arbiter.core import apply, evaluate_record, new_state
from ordo.producer import CommitClient
from ordo.schemas import (
    CommitDecision,
    DataFile,
    Operation,
    Outcome,
    Rebase,
    chain_hash,
    decisions_topic,
    decode,
    encode,
    intents_topic,
)
from ordo.schemas.signing import SIGNATURE_HEADER, Signer
from ordo.services.audit import read_partition
from ordo.services.stack import ManagedProcess, ordo_args, settings_env
from ordo.settings import Settings

from ..integration.conftest import ConsumerProcess
from ..unit.test_catalog_model import IntentSource, LiveModel
from . import figures
from .common import insert_intent, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(figures.pick(180, 300))]

STEPS = figures.pick(40, 400)


@dataclass(frozen=True)
class Case:
    table: str
    replay_offset: int | None  # where ``ordo replay`` must put the first divergence (None: faithful)
    applied: int  # how many decisions the consumer applies (the authentic ones no forgery displaced)


def rechain(values: list[bytes], start: int) -> list[bytes]:
    """Recompute ``prev_hash`` from ``start`` on, as a careful forger would."""
    out = list(values)
    for i in range(max(start, 1), len(out)):
        decision = decode(out[i])
        out[i] = encode(decision.model_copy(update={"prev_hash": chain_hash(out[i - 1])}))
    return out


def forge(decision: CommitDecision) -> CommitDecision:
    """The forgery: an accepted commit that also adds a file nobody wrote (otherwise consistent)."""
    first = decision.added_files[0]
    extra = DataFile(path=f"{first.path}.evil", partition=first.partition, record_count=1, size_bytes=1)
    return decision.model_copy(update={"added_files": (*decision.added_files, extra), "writer": "mallory"})


def target(values: list[bytes]) -> int:
    """Where to forge: the first accepted commit adding files in the second half of the log."""
    for index in range(len(values) // 2, len(values) - 2):
        decision = decode(values[index])
        if decision.accepted and decision.duplicate_of is None and decision.added_files and not decision.removed_files:
            return index
    raise AssertionError("no accepted insert in the second half of the history")


def publish(
    settings: Settings,
    topic: str,
    values: list[bytes | None],
    timestamps: list[int] | None = None,
    signatures: dict[bytes, bytes] | None = None,
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from ordo.broker import DECISIONS_CONFIG, create_topics

    create_topics(AdminClient(settings.kafka_config()), {topic: DECISIONS_CONFIG})
    producer = Producer(settings.kafka_config(**{"enable.idempotence": True, "linger.ms": 5}))
    for i, value in enumerate(values):
        signature = (signatures or {}).get(value or b"")
        headers = [(SIGNATURE_HEADER, signature)] if signature is not None else None
        if timestamps is None:
            producer.produce(topic, value, headers=headers)
        else:
            producer.produce(topic, value, timestamp=timestamps[i], headers=headers)
    assert producer.flush(30) == 0


def genuine(settings: Settings, table: str, seed: int) -> list[bytes]:
    """Publish a random intents log for ``table`` and return the decisions the arbiter's core derives from it."""
    source, model = IntentSource(table, seed=seed), LiveModel()
    state = new_state(table)
    intents = [encode(source.create(f"/warehouse/{table}"))]
    stamps = [1_700_000_000_000]
    values: list[bytes] = []
    decision = evaluate_record(state, intents[0], stamps[0], 0)
    apply(state, decision, data := encode(decision))
    values.append(data)
    model.apply(decision)
    for step in range(STEPS):
        raw = encode(source.next(model)) if step % 13 else b"not an intent"
        intents.append(raw)
        stamps.append(stamps[-1] + (step * 7919) % 1000)
        decision = evaluate_record(state, raw, stamps[-1], len(intents) - 1)
        data = encode(decision)
        apply(state, decision, data)
        values.append(data)
        model.apply(decision)
    publish(settings, intents_topic(settings.topic_prefix, table), list(intents), stamps)
    stored = read_partition(settings, intents_topic(settings.topic_prefix, table))
    assert [(o, t) for o, t, _ in stored] == list(enumerate(stamps)), "the broker must keep offsets and timestamps"
    return values


def run_replays(settings: Settings, tables: list[str]) -> dict[str, tuple[int, dict]]:
    """``ordo replay TABLE --verify --json`` for every table, as concurrent processes."""
    env = {**os.environ, **settings_env(settings)}
    running = {
        t: subprocess.Popen(ordo_args("replay", t, "--verify", "--json"), env=env, stdout=subprocess.PIPE, text=True)
        for t in tables
    }
    results = {}
    for table, process in running.items():
        out, _ = process.communicate(timeout=120)
        results[table] = (process.returncode, json.loads(out.strip().splitlines()[-1]))
    return results


def test_forged_decisions_are_reported_by_replay_and_refused_by_the_consumer(
    consumer: Callable[..., ConsumerProcess], settings: Settings
) -> None:
    began = time.monotonic()
    cases: list[Case] = []

    def edited(values: list[bytes], i: int) -> list[bytes]:
        values = list(values)
        values[i] = encode(forge(decode(values[i])))  # keeps its own prev_hash: the next record no longer chains
        return values

    def injected(values: list[bytes], i: int) -> list[bytes]:
        fake = forge(decode(values[i])).model_copy(update={"prev_hash": chain_hash(values[i - 1])})
        return [*values[:i], encode(fake), *values[i:]]

    def appended(values: list[bytes], i: int) -> list[bytes]:
        decisions = [decode(v) for v in values]
        accepted = [d for d in decisions if d.accepted and d.duplicate_of is None]
        model = decisions[i]
        fake = model.model_copy(
            update={
                "txn_id": "mallory",
                "intent_offset": decisions[-1].intent_offset + 1,
                "id_version": accepted[-1].id_version + 1,
                "time_version": max(d.time_version for d in accepted if d.time_version) + timedelta(milliseconds=1),
                "operation": Operation.INSERT_INTO,
                "read_version": accepted[-1].id_version,
                "added_files": tuple(f.model_copy(update={"path": f"{f.path}.evil"}) for f in model.added_files),
                "removed_files": (),
                "rebase": Rebase.NONE,
                "writer": "mallory",
                "prev_hash": chain_hash(values[-1]),
            }
        )
        return [*values, encode(fake)]

    # (table, tamper, replay's first divergence, decisions the consumer applies) with i = the forged index.
    # A forgery that displaces authentic records (edit, drop, reorder) stops the table's authentic chain
    # there: what follows chains to a record the log no longer holds. An added one is refused, the rest applied.
    whole = STEPS + 1
    plans: list[
        tuple[str, Callable[[list[bytes], int], list[bytes]], Callable[[int], int | None], Callable[[int], int]]
    ] = [
        ("faithful", lambda v, i: v, lambda i: None, lambda i: whole),
        ("edited", edited, lambda i: i, lambda i: i),
        ("edited_rechained", lambda v, i: rechain(edited(v, i), i + 1), lambda i: i, lambda i: i),
        ("dropped", lambda v, i: v[:i] + v[i + 1 :], lambda i: i, lambda i: i),
        ("reordered", lambda v, i: [*v[:i], v[i + 1], v[i], *v[i + 2 :]], lambda i: i, lambda i: i + 1),
        ("injected", injected, lambda i: i, lambda i: whole),
        ("appended", appended, lambda i: STEPS + 1, lambda i: whole),
        ("garbage", lambda v, i: [*v[:i], b"\x00garbage", *v[i:]], lambda i: i, lambda i: whole),
    ]
    signer = Signer.from_file(settings.arbiter_key)  # the arbiter's key: the genuine log is signed as it signs
    for seed, (name, tamper, replay_at, applied) in enumerate(plans, start=1):
        values = genuine(settings, name, seed)
        signatures = {value: signer.header(name, value) for value in values}
        i = target(values)
        publish(settings, decisions_topic(settings.topic_prefix, name), tamper(values, i), signatures=signatures)
        cases.append(Case(name, replay_at(i), applied(i)))

    results = run_replays(settings, [c.table for c in cases])
    detected = 0
    for case in cases:
        code, report = results[case.table]
        if case.replay_offset is None:
            assert code == 0 and report["ok"], report
            continue
        assert code == 1 and not report["ok"], report
        assert report["first_divergence"]["decision_offset"] == case.replay_offset, (case, report["first_divergence"])
        detected += 1
    # The consumer applies the authentic records and never a forged one, chain-correct or not.
    started = consumer(http=False)
    catalog = started.catalog()
    for case in cases:
        wait_until(lambda: _decisions(catalog, case.table) == case.applied, 30, f"{case.table}: {case.applied}")  # noqa: B023
    for case in cases:
        if case.replay_offset is not None and case.table != "appended":  # an appended forgery just waits, unvouched
            line = f"decision at offset {case.replay_offset} refused"
            wait_until(lambda: line in started.process.log_text(), 30, f"{case.table}: {line}")  # noqa: B023
    time.sleep(1.0)  # nothing more arrives: the refused records stay out
    for case in cases:
        info = catalog.table(case.table)
        assert info.error is None and info.decisions == case.applied, (case, info)
        assert all(d.writer != "mallory" for d in catalog.history(case.table)), case
    refused = len(cases) - 1
    figures.add("tamper_cases", len(cases) - 1)
    figures.add("tamper_detected", detected)
    figures.note(
        f"tampering: {detected}/{len(cases) - 1} forged logs reported by `ordo replay --verify` at the forged offset "
        f"(faithful log: exit 0); the consumer refused all {refused} forgeries (chain-correct ones included, for want "
        f"of a signature) and applied only authentic decisions; {time.monotonic() - began:.1f} s"
    )


def _decisions(catalog: object, table: str) -> int:
    try:
        return catalog.table(table).decisions  # type: ignore[attr-defined,no-any-return]
    except Exception:
        return -1


def test_forgeries_while_the_arbiter_is_down_are_caught_by_replay_and_never_crash_it(
    arbiter: Callable[..., ManagedProcess], settings: Settings, tmp_path: Path, decisions_transactions: bool
) -> None:
    """Table ``live`` gets a chain-correct, consistent forged acceptance, table ``poisoned`` an inconsistent
    one. Neither is signed: the restarted arbiter folds neither, decides the forger's intents itself and keeps
    deciding every table. ``ordo replay`` reports both at the forged record's offset."""
    from confluent_kafka import Producer

    from .common import create_intent

    state = ["--state-dir", str(tmp_path / "state")]
    first = arbiter(args=state)
    forged: dict[str, tuple[int, int]] = {}  # table -> (forged record offset, intent offset)
    with CommitClient(settings=settings) as client:
        heads = {}
        for table in ("live", "poisoned"):
            client.commit(create_intent(table), timeout=30)
            head = 0
            for n in range(6):
                head = client.commit(insert_intent(table, f"ok{n}", "a", head), timeout=30).id_version or head
            heads[table] = head
        assert first.terminate(timeout=15) == 0
        producer = Producer(settings.kafka_config())
        for table in ("live", "poisoned"):
            offset = client.publish_raw(table, encode(insert_intent(table, "mallory", "a", 0)))
            _, _, last_value = read_partition(settings, decisions_topic(settings.topic_prefix, table))[-1]
            model = decode(last_value or b"")
            if table == "live":  # chain-correct and consistent: an acceptance of a file nobody wrote
                fake = model.model_copy(
                    update={
                        "txn_id": "mallory",
                        "intent_offset": offset,
                        "id_version": heads[table] + 1,
                        "time_version": model.time_version + timedelta(milliseconds=1),
                        "added_files": (model.added_files[0].model_copy(update={"path": "p=a/evil.parquet"}),),
                        "writer": "mallory",
                        "prev_hash": chain_hash(last_value or b""),
                    }
                )
            else:  # chain-correct but not a decision any arbiter could write
                fake = CommitDecision(
                    txn_id="mallory",
                    table=table,
                    intent_offset=offset,
                    outcome=Outcome.ACCEPTED,
                    prev_hash=chain_hash(last_value or b""),
                )
            delivered: list[int] = []
            producer.produce(
                decisions_topic(settings.topic_prefix, table),
                encode(fake),
                on_delivery=lambda error, message, sink=delivered: sink.append(message.offset()),
            )
            assert producer.flush(10) == 0 and delivered
            forged[table] = (delivered[0], offset)
        second = arbiter(args=state)
        for table, (record_offset, _) in forged.items():
            assert f"decision at offset {record_offset} not folded" in second.log_text(), table
        assert "left undecided" not in second.log_text()
        for table, (_, intent_offset) in forged.items():
            # The forger's intent is decided by the arbiter, in the authentic chain.
            wait_until(lambda t=table: "mallory" in {d.txn_id for d in client.decisions(t)}, 30, f"{table}: mallory")  # type: ignore[misc]
            history = client.decisions(table)
            answer = next(d for d in history if d.txn_id == "mallory")
            assert answer.intent_offset == intent_offset and answer.writer != "mallory"
            assert all("evil" not in f.path for d in history for f in d.added_files)
            head = max(d.id_version for d in history if d.accepted and d.id_version is not None)
            after = client.commit(insert_intent(table, f"after-{table}", "b", head), timeout=30)
            assert after.accepted and after.id_version == head + 1, "the arbiter keeps deciding from authentic state"
        client.commit(create_intent("bystander"), timeout=30)  # the shard keeps working
    assert second.running
    results = run_replays(settings, ["live", "poisoned"])
    for table, (record_offset, intent_offset) in forged.items():
        code, report = results[table]
        assert code == 1, report
        assert report["first_divergence"]["decision_offset"] == record_offset, report["first_divergence"]
        assert report["first_divergence"]["intent_offset"] == intent_offset
    figures.add("tamper_cases", 2)
    figures.add("tamper_detected", 2)
    figures.note(
        "forged decisions published while the arbiter was down: the restarted arbiter folded neither (unsigned), "
        "decided the forger's intents itself and kept deciding both tables; `ordo replay` reported both at the "
        "forged offset"
    )
