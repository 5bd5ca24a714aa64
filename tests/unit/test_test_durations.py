"""``tools/test_durations.py``: the per-tier summary .ci/run prints from the JUnit XML of a real pytest run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "test_durations.py"


def test_the_summary_counts_each_tiers_tests_and_time(tmp_path: Path) -> None:
    for tier, body in (("unit", "pass"), ("e2e", "time.sleep(0.3)")):
        (tmp_path / "tests" / tier).mkdir(parents=True)
        (tmp_path / "tests" / tier / f"test_{tier}.py").write_text(
            f"import time\n\ndef test_one():\n    {body}\n\ndef test_two():\n    {body}\n"
        )
    report = tmp_path / "test.xml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    done = subprocess.run(
        [sys.executable, str(TOOL), str(report), str(tmp_path / "missing.xml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("test: 4 tests in ")
    e2e, unit = lines[1].split(), lines[2].split()  # slowest tier first
    assert e2e[:3] == ["e2e", "2", "tests"] and int(e2e[3]) >= 1  # two 0.3 s sleeps, in whole seconds
    assert int(e2e[5].rstrip("%")) >= 90  # the unit tests' share is their setup and teardown
    assert unit[:3] == ["unit", "2", "tests"]
    assert lines[3] == f"{tmp_path / 'missing.xml'}: no such report (the run did not get that far)"


def test_without_a_report_it_says_how_to_call_it() -> None:
    done = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage" in done.stderr
