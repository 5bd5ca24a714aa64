"""Checkpoints on a real broker: a restart uses a checkpoint only when it provably is a fold of the log.

An ``ArbiterService`` runs in this process (so its state can be compared with a
fold of the whole decisions log) with checkpoints every 50 decisions, written
by a forked child. Between restarts the checkpoint file is corrupted, cut
short, deleted, replaced by one of another history, moved past the log's end,
or swapped with another table's: each time the arbiter must refuse it, say why,
replay the whole log, and end with exactly the state a full replay gives;
decisions made afterwards must still re-derive exactly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ordo.arbiter.checkpoint import checkpoint_path, read_checkpoint, states_equal, write_checkpoint
from ordo.arbiter.core import apply, evaluate_record, new_state, rebuild
from ordo.arbiter.service import ArbiterService
from ordo.producer import CommitClient
from ordo.schemas import encode
from ordo.settings import Settings

from . import figures
from .common import check_exactly_once, create_intent, insert_intent, read_logs

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(180)]


@contextmanager
def running(settings: Settings, state_dir: Path, tables: int = 0) -> Iterator[ArbiterService]:
    """An in-process arbiter; yields once it rebuilt ``tables`` tables."""
    service = ArbiterService(
        settings, discovery_interval=0.2, state_dir=str(state_dir), checkpoint_every=50, checkpoint_interval=0.0
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            service.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(service.tables) < tables and not errors:
            assert time.monotonic() < deadline, "the arbiter did not rebuild its tables"
            time.sleep(0.02)
        yield service
    finally:
        service.stop()
        thread.join(60)
        assert not thread.is_alive(), "the arbiter did not stop"
        assert not errors, errors


def commit(client: CommitClient, table: str, count: int, start: int) -> None:
    futures = [client.submit(insert_intent(table, f"{table}-{start + n}", f"p{start + n}", 0)) for n in range(count)]
    for future in futures:
        assert future.result(timeout=60).accepted


def full_replay(settings: Settings, table: str) -> object:
    return rebuild(table, [r.value for r in read_logs(settings, table).decisions])


def test_a_bad_checkpoint_is_refused_for_a_full_replay_never_for_wrong_state(
    settings: Settings, tmp_path: Path
) -> None:
    began = time.monotonic()
    state_dir = tmp_path / "state"
    path = checkpoint_path(state_dir, settings.topic_prefix, "t")
    other_path = checkpoint_path(state_dir, settings.topic_prefix, "u")
    with CommitClient(settings=settings) as client:
        with running(settings, state_dir) as service:
            for table in ("t", "u"):
                client.commit(create_intent(table), timeout=30)
            commit(client, "t", 120, 0)
            commit(client, "u", 60, 0)
            deadline = time.monotonic() + 30
            while service.metrics.checkpoints_written == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert service.metrics.checkpoints_written > 0, "no periodic checkpoint (forked writer) was written"
        assert path.exists() and other_path.exists()
        written = read_checkpoint(path, "t")
        assert 50 <= written.state.decisions <= 121  # periodic ones; a clean stop adds one only after 50 more

        def restart(expect_loaded: bool, expect_reason: str | None, more: int) -> None:
            with running(settings, state_dir, tables=2) as service:
                reference = full_replay(settings, "t")
                assert states_equal(service.tables["t"], reference), "state differs from a full replay"
                assert service.metrics.checkpoints_loaded == (1 if expect_loaded else 0) + 1  # "u" loads its own
                if expect_reason is not None:
                    assert service.metrics.checkpoints_rejected == 1
                commit(client, "t", more, restart.count)  # type: ignore[attr-defined]
                restart.count += more  # type: ignore[attr-defined]

        restart.count = 120  # type: ignore[attr-defined]
        refused = 0
        restart(True, None, 10)  # a good checkpoint: loaded, then the log's tail

        def corrupt() -> None:
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0x40
            path.write_bytes(bytes(data))

        def foreign() -> None:  # another history of a table with the same name, at an offset inside this log
            state = new_state("t")
            for n, intent in enumerate([create_intent("t"), *(insert_intent("t", f"z{i}", "z") for i in range(9))]):
                decision = evaluate_record(state, encode(intent), 5_000 + n, n)
                apply(state, decision)
            write_checkpoint(path, 9, state)

        def past_the_end() -> None:
            good = read_checkpoint(path, "t")
            write_checkpoint(path, good.log_offset + 1_000_000, good.state)

        tampers: list[tuple[str, Callable[[], None]]] = [
            ("corrupt", corrupt),
            ("truncated", lambda: path.write_bytes(path.read_bytes()[:-100])),
            ("missing", path.unlink),
            ("foreign", foreign),
            ("past the end", past_the_end),
            ("another table's", lambda: path.write_bytes(other_path.read_bytes())),
        ]
        for name, tamper in tampers:
            tamper()
            restart(False, None if name == "missing" else name, 10)
            refused += 1
            restart(True, None, 5)  # the clean stop after the full replay wrote a good checkpoint again
        logs = read_logs(settings, "t")
    checked = check_exactly_once(logs)
    assert checked.accepted == restart.count + 1  # type: ignore[attr-defined]
    figures.add("checkpoints_refused", refused)
    figures.add("intents_checked", checked.intents)
    figures.note(
        f"checkpoints: {refused} bad checkpoints (corrupt, truncated, missing, foreign, past the end, another "
        f"table's) refused for a full replay; every restart's state == a full replay; {time.monotonic() - began:.1f} s"
    )
