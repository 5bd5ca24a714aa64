"""The arbiter's checkpointer: when to write each table's checkpoint, and writing it off the loop.

Checkpoints (``arbiter.checkpoint``: the file format and its proofs) make a
restart cheap: each table's state is written to ``<state_dir>/<prefix>/<table>.ckpt``
every ``every`` decisions, at most every ``interval`` seconds and at most
1/``CHECKPOINT_DUTY`` of the time, from a forked child so the loop never waits
for the disk; after a long rebuild; and synchronously on a clean stop. A
checkpoint is only a cache of a fold of the decisions log: a failure to write
one is counted and logged, never raised.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ordo.arbiter import checkpoint as checkpoints
from ordo.arbiter.core import TableState
from ordo.arbiter.loader import OwnedTable
from ordo.arbiter.metrics import ArbiterMetrics
from ordo.schemas import chain_hash

log = logging.getLogger("ordo.arbiter")


def freeze_state(*, full: bool) -> None:
    """Move the objects alive now, the tables' state above all, out of the cyclic GC's way (``gc.freeze``).

    Each of CPython's full collections walks every tracked object: with a
    large state (1M decisions of history: 278 ms, docs/benchmarks.md, "Scale")
    that is a pause of the decide loop at a moment nobody chooses. Frozen
    objects are still freed by reference counting when the state lets go of
    them; only cyclic garbage among them would stay, so a collection runs
    first: a full one after a rebuild (once per table taken), the young
    generations before a checkpoint is forked (which also keeps the child's
    copy-on-write pages shared: the GC no longer writes to the frozen objects).
    """
    gc.collect(2 if full else 1)
    gc.freeze()


DEFAULT_CHECKPOINT_EVERY = 10_000
DEFAULT_CHECKPOINT_INTERVAL = 10.0
# A checkpoint child may use at most 1/CHECKPOINT_DUTY of the time between two checkpoints.
CHECKPOINT_DUTY = 5

Job = tuple[Path, int, TableState]  # (file, log offset of the record folded last, state)


@dataclass(slots=True)
class _Child:
    """A forked child writing checkpoints."""

    pid: int
    started: float
    tables: list[str]


def _die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this (forked) process when the thread that forked it ends."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Checkpointer:
    """Writes the checkpoints of the tables that are due; reads a table's checkpoint for the state loader."""

    def __init__(
        self,
        state_dir: str,
        prefix: str,
        metrics: ArbiterMetrics,
        *,
        every: int = DEFAULT_CHECKPOINT_EVERY,
        interval: float = DEFAULT_CHECKPOINT_INTERVAL,
        fork: bool | None = None,
    ) -> None:
        """``state_dir`` ``""`` or ``every`` 0 turn checkpoints off; ``fork`` (default: where ``os.fork``
        exists) writes periodic checkpoints from a child process."""
        self.state_dir = state_dir
        self.prefix = prefix
        self.metrics = metrics
        self.every = every
        self.interval = interval
        self.fork = hasattr(os, "fork") if fork is None else fork
        self.enabled = bool(state_dir) and every > 0 and checkpoints.supported()
        if bool(state_dir) and every > 0 and not self.enabled:
            log.warning("checkpoints disabled: the arbiter core's state has fields arbiter.checkpoint does not know")
        self._child: _Child | None = None
        self._next = 0.0
        self.cost = 0.0  # seconds the last checkpoint took

    def path(self, table: str) -> Path:
        """The checkpoint file of ``table``."""
        return checkpoints.checkpoint_path(self.state_dir, self.prefix, table)

    def remove_stale(self) -> None:
        """Remove temporary files a killed writer left (at start-up)."""
        if self.enabled:
            checkpoints.remove_stale_temporaries(os.path.join(self.state_dir, self.prefix))

    def read(self, table: str) -> checkpoints.Checkpoint | None:
        """The table's checkpoint if the file is intact and fits this code, else None (the reason is logged)."""
        if not self.enabled:
            return None
        path = self.path(table)
        if not path.exists():
            return None
        try:
            return checkpoints.read_checkpoint(path, table)
        except checkpoints.CheckpointError as exc:
            log.warning("table %s: checkpoint %s not used (%s); full replay", table, path, exc)
            self.metrics.checkpoints_rejected += 1
            return None

    def maybe(
        self,
        tables: Iterable[OwnedTable],
        last_record: Callable[[str], tuple[int, bytes] | None],
        *,
        refresh: Callable[[], None] | None = None,
        after_rebuild: bool = False,
        final: bool = False,
    ) -> None:
        """Write checkpoints of the tables that are due; never raises (a checkpoint is only a cache).

        Due: at least ``every`` decisions since the table's last checkpoint
        (``min(every, 1000)`` on a clean stop), and the newest record known to
        be in its decisions log (``last_record(decisions topic)``) is the one
        the state folded last, so the checkpoint's log offset is exact
        (``refresh`` first serves pending delivery reports). The caller calls
        it between transactions only.
        """
        if not self.enabled:
            return
        try:
            self._reap()
            if self._child is not None:
                return
            if not (after_rebuild or final) and time.monotonic() < self._next:
                return
            threshold = min(self.every, 1000) if final else self.every
            if refresh is not None:
                refresh()
            jobs: list[Job] = []
            for table in tables:
                state = table.state
                if state.decisions - table.checkpointed < threshold:
                    continue
                last = last_record(table.decisions)
                if last is None or chain_hash(last[1]) != state.chain:
                    continue
                jobs.append((self.path(table.name), last[0], state))
                table.checkpointed = state.decisions
            if not jobs:
                return
            if self.fork and not final:
                self._fork(jobs)
            else:
                self._write(jobs)
        except Exception:
            self.metrics.checkpoint_failures += 1
            log.exception("writing checkpoints failed (the decisions log is unaffected)")

    def final(
        self,
        tables: Iterable[OwnedTable],
        last_record: Callable[[str], tuple[int, bytes] | None],
        refresh: Callable[[], None] | None = None,
    ) -> None:
        """On a clean stop: let a running child finish, then write what changed since (synchronously)."""
        if not self.enabled:
            return
        self.wait(60.0)
        self.maybe(tables, last_record, refresh=refresh, final=True)

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a running checkpoint child."""
        deadline = time.monotonic() + timeout
        while self._child is not None and time.monotonic() < deadline:
            self._reap()
            if self._child is not None:
                time.sleep(0.02)

    def _write(self, jobs: list[Job]) -> None:
        began = time.monotonic()
        size = 0
        for path, offset, state in jobs:
            size += checkpoints.write_checkpoint(path, offset, state)
        elapsed = time.monotonic() - began
        self.metrics.checkpoints_written += len(jobs)
        self._schedule(elapsed)
        log.info("checkpoint: %d table(s), %d bytes, %.3f s", len(jobs), size, elapsed)

    def _fork(self, jobs: list[Job]) -> None:
        """Write ``jobs`` from a forked child: it sees a copy-on-write snapshot of the states, the loop goes on."""
        freeze_state(full=False)
        pid = os.fork()
        if pid == 0:  # the child: write, report failures on stderr, exit without running any cleanup
            code = 0
            try:
                _die_with_parent()
                os.closerange(3, 65536)  # let go of the parent's Kafka sockets: only files are written here
                for path, offset, state in jobs:
                    checkpoints.write_checkpoint(path, offset, state)
            except BaseException as exc:
                code = 1
                try:
                    os.write(2, f"checkpoint writer failed: {type(exc).__name__}: {exc}\n".encode())
                except Exception:
                    pass
            os._exit(code)
        self._child = _Child(pid, time.monotonic(), [str(path) for path, _, _ in jobs])

    def _reap(self, block: bool = False) -> None:
        child = self._child
        if child is None:
            return
        try:
            pid, status = os.waitpid(child.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status = child.pid, 1 << 8
        if pid == 0:
            return
        self._child = None
        elapsed = time.monotonic() - child.started
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            self.metrics.checkpoints_written += len(child.tables)
            log.info("checkpoint: %d table(s) written in %.3f s by pid %d", len(child.tables), elapsed, child.pid)
        else:
            self.metrics.checkpoint_failures += 1
            log.warning(
                "checkpoint writer pid %d failed (exit %s); the next one is due after more decisions", child.pid, code
            )
        self._schedule(elapsed)

    def _schedule(self, cost: float) -> None:
        self.cost = cost
        self._next = time.monotonic() + max(self.interval, CHECKPOINT_DUTY * cost)


__all__ = ["CHECKPOINT_DUTY", "DEFAULT_CHECKPOINT_EVERY", "DEFAULT_CHECKPOINT_INTERVAL", "Checkpointer"]
