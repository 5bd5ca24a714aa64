"""Figures the chaos tests record for the session summary (printed by ``conftest.pytest_terminal_summary``)."""

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
