"""delta-spark and ordo in one Spark session: a Delta table copied into ordo reads the same (issue 21, item 6).

delta-spark is not a dependency of ordo; ``make test-spark-min`` installs it (its newest release supports
PySpark up to ordo's minimum, 4.2.0) and runs this test there. The session runs in a child process
(``tests/e2e/delta_child.py``): Delta's jars must be on the JVM's class path from the start, and the suite's
shared session has none.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ordo.services.stack import settings_env
from tests.e2e.stack import writer_stack  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        importlib.util.find_spec("delta") is None,
        reason="delta-spark is not installed in this venv: `make test-spark-min` installs it and runs this test",
    ),
]


def model() -> tuple[list[list[Any]], list[list[Any]]]:
    """The Delta table's head and its version 0, from the same steps in plain Python."""
    v0 = [[i, f"v{i}", ["a", "b", "c"][i % 3]] for i in range(60)]
    head = [[i, v + "-x" if i % 5 == 0 else v, dt] for i, v, dt in v0 if not (dt == "c" and i > 40)]
    return sorted(head), sorted(v0)


def test_a_delta_table_copied_into_ordo_in_one_session_reads_the_same(writer_stack: Any, tmp_path: Path) -> None:  # noqa: F811
    env = {**os.environ, **settings_env(writer_stack.settings)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.e2e.delta_child", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=800,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    head, v0 = model()
    assert found["delta"] == head, "delta-spark itself disagrees with the model"
    assert found["ordo"] == head and found["ordo_head"] == head
    assert found["v0"] == v0
    assert found["delta_history"][:1] == ["DELETE"] and found["ordo_history"][0] == "WRITE", found
