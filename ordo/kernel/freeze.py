"""Freezing a process for a fault (SIGSTOP) and knowing that it is frozen.

``kill(pid, SIGSTOP)`` returns before the process stops: each of its threads
stops when the kernel next gets hold of it, and a thread that is running
meanwhile may still answer a request. A test that freezes a broker or an
arbiter and then sends it something must wait until every thread is stopped.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def stopped(pid: int) -> bool | None:
    """Whether every thread of process ``pid`` is stopped (``/proc``: state ``T`` or ``t``); None where the
    system has no ``/proc`` or the process is gone."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        names = os.listdir(tasks)
    except OSError:
        return None
    for name in names:
        try:
            stat = (tasks / name / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # a thread that exited meanwhile
        state = stat.rsplit(")", 1)[-1].split()[:1]  # the command in parentheses may hold spaces
        if state and state[0] not in ("T", "t"):
            return False
    return True


def freeze(pid: int, timeout: float = 10.0) -> bool:
    """SIGSTOP ``pid`` and wait until every thread of it is stopped (at most ``timeout`` seconds): True once it
    is, False when it did not stop in time or cannot be watched (no ``/proc``)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while True:
        state = stopped(pid)
        if state is not False:
            return bool(state)
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)


__all__ = ["freeze", "stopped"]
