"""Signed decisions through real processes: a forged decision with a correct ``prev_hash`` is history to no one.

A forger with produce rights on a decisions topic appends a decision for a
pending intent, chained correctly to the last record. The CommitClient waiting
for that intent does not take it, the restarted arbiter does not fold it (and
decides the intent itself), the consumer never shows it and ``ordo replay
--verify`` names its offset. Then key rotation, and the fail-closed settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ordo.producer import CommitClient
from ordo.schemas import Outcome, chain_hash, decisions_topic, decode, encode, intents_topic
from ordo.schemas.signing import SIGNATURE_HEADER, Signer, write_keypair
from ordo.services.audit import read_partition
from ordo.services.stack import ManagedProcess, ProcessGroup, ordo_args, settings_env
from ordo.settings import Settings

from ..chaos.common import create_intent, insert_intent, wait_until
from .conftest import ConsumerProcess


def replay_verify(settings: Settings, table: str, *extra: str) -> tuple[int, dict]:
    """``ordo replay TABLE --verify --json`` as a process: (exit status, report)."""
    env = {**os.environ, **settings_env(settings)}
    done = subprocess.run(
        ordo_args("replay", table, "--verify", "--json", *extra), env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def produce_raw(settings: Settings, topic: str, value: bytes, headers: list[tuple[str, bytes]] | None) -> int:
    """What a forger with produce rights does: one record, straight to the topic; returns its offset."""
    from confluent_kafka import Producer

    producer = Producer(settings.kafka_config())
    delivered: list[int] = []
    producer.produce(
        topic, value, headers=headers, on_delivery=lambda error, message: delivered.append(message.offset())
    )
    assert producer.flush(10) == 0 and delivered
    return delivered[0]


@pytest.mark.parametrize("how", ["unsigned", "unknown key"])
def test_a_forged_decision_with_a_correct_prev_hash_is_refused_by_every_reader(
    how: str,
    arbiter: Callable[..., ManagedProcess],
    consumer: Callable[..., ConsumerProcess],
    settings: Settings,
    decisions_transactions: bool,
) -> None:
    table = "signed"
    first = arbiter()
    with CommitClient(settings=settings) as client:
        client.commit(create_intent(table), timeout=30)
        head = 0
        for n in range(3):
            head = client.commit(insert_intent(table, f"ok{n}", "a", head), timeout=30).id_version or head
        assert first.terminate(timeout=15) == 0

        # A writer's intent is pending (no arbiter); the forger answers it first, chain-correct.
        future = client.submit(insert_intent(table, "victim", "b", head), timeout=120)
        intents = intents_topic(settings.topic_prefix, table)
        wait_until(lambda: len(read_partition(settings, intents)) == 5, 30, "the victim's intent in the log")
        intent_offset = read_partition(settings, intents)[-1][0]
        _, _, last = read_partition(settings, decisions_topic(settings.topic_prefix, table))[-1]
        model = decode(last or b"")
        fake = model.model_copy(
            update={
                "txn_id": "victim",
                "intent_offset": intent_offset,
                "outcome": Outcome.REJECTED,
                "id_version": None,
                "time_version": None,
                "reason": "CONFLICT",
                "message": "forged",
                "writer": "mallory",
                "prev_hash": chain_hash(last or b""),
            }
        )
        data = encode(fake)
        headers = [(SIGNATURE_HEADER, Signer.generate().header(table, data))] if how == "unknown key" else None
        forged_offset = produce_raw(settings, decisions_topic(settings.topic_prefix, table), data, headers)
        time.sleep(3.0)
        assert not future.done(), "the CommitClient took a forged decision as the answer"

        # The restarted arbiter does not fold the forgery and decides the intent itself.
        second = arbiter()
        answer = future.result(timeout=60)
        assert answer.accepted and answer.id_version == head + 1 and answer.message != "forged"
        assert f"decision at offset {forged_offset} not folded" in second.log_text()
        after = client.commit(insert_intent(table, "after", "c", head + 1), timeout=30)
        assert after.accepted and after.id_version == head + 2, "the arbiter keeps deciding from the authentic chain"
        history = client.decisions(table)
        assert all(d.writer != "mallory" for d in history)
        # six answers (a repeat of the victim's intent, resubmitted while it was overdue, is a duplicate)
        assert len([d for d in history if d.duplicate_of is None]) == 6

    # The consumer applies every authentic decision and never the forged one.
    started = consumer(http=False)
    catalog = started.catalog()
    wait_until(lambda: _decisions(catalog, table) == len(history), 30, "the consumer to apply the authentic decisions")
    info = catalog.table(table)
    assert info.error is None and info.head_version == head + 2
    assert all(d.writer != "mallory" for d in catalog.history(table))
    assert f"decision at offset {forged_offset} refused" in started.process.log_text()

    # The audit names the forged record.
    code, report = replay_verify(settings, table)
    assert code == 1, report
    assert report["first_divergence"]["decision_offset"] == forged_offset, report
    assert report["first_divergence"]["kind"] == "unsigned"


def test_key_rotation_keeps_history_verifiable_while_the_old_key_is_trusted(
    arbiter: Callable[..., ManagedProcess],
    consumer: Callable[..., ConsumerProcess],
    settings: Settings,
    tmp_path: Path,
    decisions_transactions: bool,
) -> None:
    table = "rotated"
    write_keypair(tmp_path / "key1")
    write_keypair(tmp_path / "key2")
    both = f"{tmp_path / 'key1'}.pub,{tmp_path / 'key2'}.pub"
    old = settings.with_overrides(arbiter_key=str(tmp_path / "key1"), trusted_keys=both)
    new = settings.with_overrides(arbiter_key=str(tmp_path / "key2"), trusted_keys=both)
    process = arbiter(settings=old)
    with CommitClient(settings=old) as client:
        client.commit(create_intent(table), timeout=30)
        client.commit(insert_intent(table, "k1", "a", 0), timeout=30)
    assert process.terminate(timeout=15) == 0
    arbiter(settings=new)  # step 2 of the rotation: every reader trusts both keys already
    with CommitClient(settings=new) as client:
        assert client.commit(insert_intent(table, "k2", "b", 1), timeout=30).id_version == 2
        assert len(client.decisions(table)) == 3

    assert replay_verify(new, table)[0] == 0
    started = consumer(settings=new, http=False)
    wait_until(lambda: _decisions(started.catalog(), table) == 3, 30, "the consumer to apply both keys' decisions")

    # Without the old key the prefix it signed is refused (and so is what chains on it).
    only_new = settings.with_overrides(trusted_keys=f"{tmp_path / 'key2'}.pub")
    code, report = replay_verify(only_new, table)
    assert code == 1 and report["first_divergence"]["decision_offset"] == 0, report
    assert report["first_divergence"]["kind"] == "unsigned"


def test_without_keys_the_arbiter_and_readers_fail_closed_naming_the_setting(
    processes: ProcessGroup, settings: Settings
) -> None:
    keyless = settings.with_overrides(arbiter_key="", trusted_keys="")
    arbiter = processes.start_ordo(keyless, "arbiter", name="keyless-arbiter")
    assert arbiter.wait(timeout=60) != 0
    assert "ORDO_ARBITER_KEY" in arbiter.log_text()
    reader = processes.start_ordo(keyless, "consumer", "--no-http", name="keyless-consumer")
    assert reader.wait(timeout=60) != 0
    assert "ORDO_TRUSTED_KEYS" in reader.log_text()
    code, report = replay_verify(keyless, "anything")
    assert code != 0 and "ORDO_TRUSTED_KEYS" in report.get("error", ""), report


def test_the_upgrade_switch_reads_a_log_with_no_signature_at_all(
    processes: ProcessGroup, settings: Settings, tmp_path: Path, decisions_transactions: bool
) -> None:
    """A log wholly written by a release without signing: refused by default, read with --allow-unsigned."""
    table = "legacy"
    unsigned = settings.with_overrides(arbiter_key="", require_signatures=False)
    arbiter = processes.start_arbiter(unsigned)
    assert "UNSIGNED" in arbiter.log_text()
    with CommitClient(settings=unsigned) as client:
        client.commit(create_intent(table), timeout=30)
        client.commit(insert_intent(table, "old", "a", 0), timeout=30)
    code, report = replay_verify(settings, table)
    assert code == 1 and report["first_divergence"]["kind"] == "unsigned", report
    code, report = replay_verify(settings, table, "--allow-unsigned")
    assert code == 0, report


def _decisions(catalog: object, table: str) -> int:
    try:
        return catalog.table(table).decisions  # type: ignore[attr-defined,no-any-return]
    except Exception:
        return -1
