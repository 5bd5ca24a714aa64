"""``ordo.kernel.freeze``: a frozen process is known to be frozen, every thread of it, before the caller goes on."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from ordo.kernel.freeze import freeze, stopped

BUSY = """
import threading
def spin():
    while True:
        pass
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
print("spinning", flush=True)
spin()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_freeze_returns_once_every_busy_thread_is_stopped() -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"spinning"
        assert stopped(child.pid) is False  # five threads running
        assert freeze(child.pid) is True
        assert stopped(child.pid) is True
        child.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 10
        while stopped(child.pid):
            assert time.monotonic() < deadline, "the thawed process stayed stopped"
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait()
    assert stopped(child.pid) is None  # gone
