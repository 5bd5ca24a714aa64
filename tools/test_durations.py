"""Where a test run's time went, by tier, from the JUnit XML files pytest wrote (``--junitxml``).

    python tools/test_durations.py build/test-reports/*.xml

prints, for each file, the run's wall time and one line per tier of tests/
(unit, integration, e2e, chaos): its tests, their summed time (setup, call and
teardown) and its share. ``.ci/run`` runs it at the end of every CI run, so the
CI log keeps the cost of each tier next to ``--durations=30`` (tests/README.md).
Standard library only: it runs where the tests failed to install.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Tier:
    """The tests of one directory of tests/ in one run."""

    tests: int = 0
    seconds: float = 0.0


@dataclass
class Run:
    """One JUnit XML file: its wall time and its tiers."""

    name: str
    wall: float
    tiers: dict[str, Tier] = field(default_factory=lambda: defaultdict(Tier))


def tier_of(classname: str) -> str:
    """``tests.e2e.test_writer`` -> ``e2e``; a test outside tests/<tier>/ is its own first component."""
    parts = classname.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0] or "?"


def read_run(path: Path) -> Run:
    """The run recorded in ``path`` (pytest's JUnit XML: testsuites/testsuite/testcase)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    run = Run(path.stem, sum(float(s.get("time", 0)) for s in suites))
    for case in root.iter("testcase"):
        tier = run.tiers[tier_of(case.get("classname", ""))]
        tier.tests += 1
        tier.seconds += float(case.get("time", 0))
    return run


def report(run: Run) -> list[str]:
    """The lines printed for ``run``: the wall time, then each tier, slowest first."""
    total = sum(t.seconds for t in run.tiers.values()) or 1.0
    lines = [f"{run.name}: {sum(t.tests for t in run.tiers.values())} tests in {run.wall:.0f} s"]
    for name, tier in sorted(run.tiers.items(), key=lambda item: -item[1].seconds):
        lines.append(f"  {name:<12} {tier.tests:>5} tests {tier.seconds:>8.0f} s {tier.seconds / total:>6.0%}")
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: test_durations.py REPORT.xml ...", file=sys.stderr)
        return 2
    for name in argv:
        path = Path(name)
        if not path.is_file():
            print(f"{name}: no such report (the run did not get that far)")
            continue
        print("\n".join(report(read_run(path))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
