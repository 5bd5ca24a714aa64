"""Fault-injection suite (issue 7): kill -9, twin arbiters, broker outage, bad input, tampering, checkpoints.

``CHAOS_PROFILE`` chooses the size: unset or ``quick`` (inside ``make test``, a
few kills and 1,000 fuzzed records) or ``full`` (``make chaos``: 100 kills of
each process, 10,000 fuzzed records). Every test is bounded in time, runs on
loopback only and stops what it started. The figures each test records are
printed at the end of the session (``pytest_terminal_summary``).

Fixtures: everything of ``tests/conftest.py`` plus ``consumer`` (the consumer
process factory of ``tests/integration/conftest.py``).
"""

from __future__ import annotations

from typing import Any

from ..integration.conftest import ConsumerProcess, consumer  # noqa: F401  (re-exported fixture)
from .figures import FIGURES, LINES, PROFILE

SUMMARY_ORDER = (
    ("arbiter kills survived", "arbiter_kills"),
    ("arbiter restarts from a checkpoint", "arbiter_checkpoint_restarts"),
    ("twin arbiters fenced", "arbiters_fenced"),
    ("consumer kills survived", "consumer_kills"),
    ("broker outages survived", "broker_outages"),
    ("intents checked (one decision each)", "intents_checked"),
    ("fuzz cases tried through the arbiter", "fuzz_cases"),
    ("tamper cases detected", "tamper_detected"),
    ("tamper cases tried", "tamper_cases"),
    ("corrupt/missing/foreign checkpoints refused", "checkpoints_refused"),
)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    if not FIGURES and not LINES:
        return
    write = terminalreporter.write_line
    terminalreporter.section(f"chaos summary (profile {PROFILE})")
    for label, key in SUMMARY_ORDER:
        if key in FIGURES:
            write(f"{label:<48} {FIGURES[key]}")
    for key, value in sorted(FIGURES.items()):
        if key not in {k for _, k in SUMMARY_ORDER}:
            write(f"{key:<48} {value}")
    for line in LINES:
        write(f"- {line}")
