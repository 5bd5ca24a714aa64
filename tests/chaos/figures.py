"""Figures the chaos tests record for the session summary (printed by ``tests/conftest.py``'s
``pytest_terminal_summary``; under pytest-xdist each worker hands its figures to the controller, which merges them)."""

from __future__ import annotations

import os
import threading
from typing import Any

PROFILE = os.environ.get("CHAOS_PROFILE", "quick").strip().lower() or "quick"
FULL = PROFILE == "full"

_LOCK = threading.Lock()
FIGURES: dict[str, Any] = {}
LINES: list[str] = []


def pick(quick: Any, full: Any) -> Any:
    """The quick-profile value, or the full one under ``CHAOS_PROFILE=full``."""
    return full if FULL else quick


def add(name: str, amount: int = 1) -> None:
    """Add to a counter of the summary."""
    with _LOCK:
        FIGURES[name] = FIGURES.get(name, 0) + amount


def note(line: str) -> None:
    """A line for the summary (and printed at once, visible with ``-s``)."""
    with _LOCK:
        LINES.append(line)
    print(f"\n[chaos] {line}", flush=True)


def export() -> dict[str, Any]:
    """This process's figures and lines, as plain values (a pytest-xdist worker sends them to the controller)."""
    with _LOCK:
        return {"figures": dict(FIGURES), "lines": list(LINES)}


def merge(exported: dict[str, Any] | None) -> None:
    """Add the figures and lines another process exported (counters add up)."""
    if not exported:
        return
    with _LOCK:
        for name, amount in exported["figures"].items():
            FIGURES[name] = FIGURES.get(name, 0) + amount
        LINES.extend(exported["lines"])


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


def summary() -> list[str]:
    """The lines of the session summary: the known figures in order, the others by name, then the notes."""
    with _LOCK:
        figures, lines = dict(FIGURES), list(LINES)
    known = dict(SUMMARY_ORDER)
    out = [f"{label:<48} {figures[key]}" for label, key in SUMMARY_ORDER if key in figures]
    out += [f"{key:<48} {value}" for key, value in sorted(figures.items()) if key not in known.values()]
    return out + [f"- {line}" for line in lines]
