"""Arbiter checkpoints (pure part): a loaded checkpoint folds on exactly like the state it was taken from.

The Kafka half (checking a checkpoint against its decisions log, falling back to
a full replay) is exercised on a real broker in ``tests/chaos/test_checkpoints.py``.
"""

from __future__ import annotations

import gc
import os
import random
import stat
import weakref
from pathlib import Path

import pytest

import ordo.arbiter.core as core
from ordo.arbiter.checkpoint import (
    CheckpointError,
    CheckpointTxns,
    checkpoint_path,
    decode_checkpoint,
    encode_checkpoint,
    read_checkpoint,
    states_equal,
    supported,
    write_checkpoint,
)
from ordo.arbiter.core import TableState, TxnRecord, apply, evaluate, new_state
from ordo.schemas import CommitIntent, encode

from .test_catalog_model import Script


def history(seed: int, steps: int) -> list[tuple[CommitIntent, int]]:
    """A random history (rejections, rebases, retried txn ids, compactions) as (intent, record timestamp) pairs."""
    script = Script("t", seed=seed).run(steps)
    return [(intent, record.timestamp_ms - 3) for intent, record in zip(script.intents, script.records, strict=True)]


def fold(state: TableState, pairs: list[tuple[CommitIntent, int]], first_offset: int) -> list[bytes]:
    """Decide and apply each intent; return the decision records."""
    out = []
    for i, (intent, stamp) in enumerate(pairs):
        decision = evaluate(state, intent, stamp, first_offset + i)
        data = encode(decision)
        apply(state, decision, data)
        out.append(data)
    return out


def roundtrip(state: TableState, log_offset: int = 7) -> TableState:
    checkpoint = decode_checkpoint(encode_checkpoint(log_offset, state), state.table)
    assert checkpoint.log_offset == log_offset
    return checkpoint.state


def test_the_checkpoint_format_knows_every_field_of_the_core_state() -> None:
    """Fails when arbiter.core's state changes shape: teach ordo/arbiter/checkpoint.py the new fields."""
    assert supported()


@pytest.mark.parametrize("seed", range(4))
def test_a_loaded_checkpoint_equals_the_state_it_was_taken_from(seed: int) -> None:
    state = new_state("t")
    pairs = history(seed, 150)
    fold(state, pairs, 0)
    assert states_equal(roundtrip(state), state)
    assert states_equal(roundtrip(new_state("t")), new_state("t"))


@pytest.mark.parametrize("windows", [(40, 15), (1_000_000, 100_000)], ids=["small-windows", "default-windows"])
@pytest.mark.parametrize("seed", range(4))
def test_deciding_on_from_a_checkpoint_gives_the_same_decisions_as_never_stopping(
    seed: int, windows: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small windows: dedupe eviction and lineage expiry happen on both sides of the cut.
    monkeypatch.setattr(core, "DEDUPE_WINDOW", windows[0])
    monkeypatch.setattr(core, "LINEAGE_WINDOW", windows[1])
    rng = random.Random(seed)
    pairs = history(seed, 160)
    # Retried txn ids after the cut, including ones decided long before it.
    pairs += [rng.choice(pairs[: len(pairs) // 2]) for _ in range(10)] + [rng.choice(pairs) for _ in range(10)]
    cut = rng.randrange(20, 140)
    straight = new_state("t")
    expected = fold(straight, pairs, 0)
    resumed = new_state("t")
    fold(resumed, pairs[:cut], 0)
    resumed = roundtrip(resumed)
    assert isinstance(resumed.txns, CheckpointTxns)
    assert fold(resumed, pairs[cut:], cut) == expected[cut:]
    assert states_equal(resumed, straight)
    assert any(b"already decided" in d for d in expected[cut:]), "the history must repeat txn ids after the cut"


def test_the_dedupe_window_turns_rows_into_records_on_lookup() -> None:
    state = new_state("t")
    fold(state, history(1, 40), 0)
    loaded = roundtrip(state)
    key = next(iter(state.txns))
    record = loaded.txns.get(key)
    assert isinstance(record, TxnRecord) and record == state.txns[key]
    assert loaded.txns[key] == state.txns[key]
    assert loaded.txns.get("no such txn", "absent") == "absent"
    assert list(loaded.txns) == list(state.txns)


def _bytes(tmp_path: Path) -> tuple[bytes, TableState]:
    state = new_state("t")
    fold(state, history(2, 60), 0)
    return encode_checkpoint(59, state), state


def test_every_corrupted_byte_is_detected(tmp_path: Path) -> None:
    data, _ = _bytes(tmp_path)
    rng = random.Random(3)
    positions = {0, 8, 12, len(data) // 2, len(data) - 1} | {rng.randrange(len(data)) for _ in range(40)}
    for position in sorted(positions):
        corrupted = bytearray(data)
        corrupted[position] ^= 0x01
        with pytest.raises(CheckpointError):
            decode_checkpoint(bytes(corrupted), "t")
    for length in (0, 5, 40, len(data) // 2, len(data) - 1):
        with pytest.raises(CheckpointError):
            decode_checkpoint(data[:length], "t")


def test_a_checkpoint_of_another_table_or_another_core_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, _ = _bytes(tmp_path)
    with pytest.raises(CheckpointError, match="belongs to table 't'"):
        decode_checkpoint(data, "other")
    import ordo.arbiter.checkpoint as checkpoint_module

    monkeypatch.setattr(checkpoint_module, "fingerprint", lambda: "0" * 32)
    with pytest.raises(CheckpointError, match="different version of the arbiter core"):
        decode_checkpoint(data, "t")


def test_written_atomically_privately_and_read_back(tmp_path: Path) -> None:
    _, state = _bytes(tmp_path)
    path = checkpoint_path(tmp_path / "state", "prefix", "t")
    with pytest.raises(CheckpointError, match="no checkpoint file"):
        read_checkpoint(path, "t")
    size = write_checkpoint(path, 59, state)
    assert path.stat().st_size == size
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    fold(state, history(2, 70)[60:], 60)
    write_checkpoint(path, 69, state)
    assert os.listdir(path.parent) == ["t.ckpt"], "no temporary file left behind"
    loaded = read_checkpoint(path, "t")
    assert loaded.log_offset == 69 and states_equal(loaded.state, state)


def test_data_versions_and_write_ids_survive_a_checkpoint() -> None:
    """What the hostile-writer rules need (write ids spent, data versions of live files) is restored, not rebuilt."""
    from ordo.arbiter.core import Reason
    from ordo.schemas import DataFile, Operation

    state = new_state("t")
    fold(state, history(5, 150), 0)
    assert state.write_ids and state.data_versions
    assert any(v < state.head_version for v in state.data_versions.values())
    loaded = roundtrip(state)
    assert loaded.data_versions == state.data_versions and loaded.write_ids == state.write_ids
    spent = sorted(state.write_ids)[0]
    key = next(iter(state.partitions))
    reuse = CommitIntent(
        txn_id="reuse",
        table="t",
        operation=Operation.INSERT_INTO,
        read_version=state.head_version,
        partitions=({"dt": key[0]},),
        added_files=(
            DataFile(path=f"dt={key[0]}/{spent}-999.parquet", partition={"dt": key[0]}, record_count=1, size_bytes=1),
        ),
    )
    decision = evaluate(loaded, reuse, 10**12, loaded.last_intent_offset + 1)
    assert decision.reason == Reason.PATH_REUSED


def test_a_checkpoint_of_the_previous_format_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Format 2 (before RESTORE's stays of removed files) cannot seed this core: the arbiter replays in full instead."""
    import ordo.arbiter.checkpoint as checkpoint_module

    assert checkpoint_module.FORMAT_VERSION == 3
    monkeypatch.setattr(checkpoint_module, "FORMAT_VERSION", 2)
    old = encode_checkpoint(59, _bytes(tmp_path)[1])
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="different version of the arbiter core"):
        decode_checkpoint(old, "t")


def test_freeze_state_collects_cyclic_garbage_first_then_freezes_what_lives() -> None:
    from ordo.arbiter.checkpointer import freeze_state

    class Node:
        ref: object = None

    live = {"files": ["part-0.parquet"]}  # stands for a table's state
    garbage = Node()
    garbage.ref = garbage  # a cycle only the cyclic GC can free
    dead = weakref.ref(garbage)
    del garbage
    try:
        freeze_state(full=True)
        assert dead() is None, "cyclic garbage was frozen instead of collected: it would never be freed"
        assert not any(o is live for o in gc.get_objects()), "the live state is still walked by full collections"
    finally:
        gc.unfreeze()
