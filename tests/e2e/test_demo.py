"""``ordo demo`` (what ``make demo`` runs), end to end: its own stack on Apache Kafka, real Spark, real conflicts.

It runs in this process through the click CLI (the session's Spark is reused,
so the test costs no second JVM). The conflict summary is checked twice: the
demo's own verdict, and here against ``ordo/arbiter/policies/maxcompute.csv`` read
with the csv module.
"""

from __future__ import annotations

import csv
import re
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ordo.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

POLICY = Path(__file__).resolve().parents[2] / "ordo" / "arbiter" / "policies" / "maxcompute.csv"
SECTIONS = (
    "1. a partitioned table",
    "5. the table service",
    "history (oldest first)",
    "conflict summary",
    "time travel",
    "change feed between time versions",
    "demo finished in",
)
# Cells the demo's fixed commit order always produces (the stream and the threads add more, timing permitting).
ALWAYS = {
    ("MINOR_COMPACT", "MAJOR_COMPACT"),
    ("MINOR_COMPACT", "UPDATE"),
    ("MAJOR_COMPACT", "UPDATE"),
    ("UPDATE", "UPDATE"),
    ("INSERT", "CLUSTER"),
    ("CLUSTER", "INSERT"),
    ("INSERT", "OVERWRITE"),
    ("OVERWRITE", "INSERT"),
}
CLASSES = "OVERWRITE|INSERT|UPDATE|MINOR_COMPACT|MAJOR_COMPACT|CLUSTER"


def summary_rows(output: str) -> list[list[str]]:
    """The conflict summary's rows: earlier, later, times, matrix cell, observed, instances, verdict."""
    section = output.split("conflict summary", 1)[1].split("time travel", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) == 7 and re.fullmatch(CLASSES, cells[0]) and re.fullmatch(CLASSES, cells[1]):
            rows.append(cells)
    return rows


def test_demo_agrees_with_the_matrix(spark: Any) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(main, ["demo"], env={"COLUMNS": "220"}, catch_exceptions=False)
    elapsed = time.monotonic() - started
    output = result.output
    assert result.exit_code == 0, output
    for section in SECTIONS:
        assert section in output, f"missing section {section!r}:\n{output}"
    assert "matrix agreement" in output and "DISAGREE" not in output
    assert re.search(r"Apache Kafka \(1 node, KRaft\) ready in \d+\.\d s", output), "the default broker is Kafka"
    assert "Tansu" not in output

    with POLICY.open() as handle:
        matrix = {(r["earlier"], r["later"]): r["outcome"] for r in csv.DictReader(handle)}
    rows = summary_rows(output)
    pairs = {(r[0], r[1]) for r in rows}
    assert pairs >= ALWAYS, f"pairs seen: {sorted(pairs)}"
    for earlier, later, times, cell, observed, _instances, verdict in rows:
        assert cell == matrix[(earlier, later)], f"{earlier}->{later}: summary says {cell}"
        assert int(times) >= 1
        assert verdict in ("agree", "agree/masked", "masked"), (earlier, later, verdict)
        if cell == "later_fails" and verdict == "agree":
            assert observed.startswith("rejected, CONFLICT_LATER_FAILS"), observed
        elif verdict == "agree":
            assert observed.startswith("accepted"), observed
            assert cell in observed, f"{earlier}->{later}: expected rebase {cell}, observed {observed}"

    # the history shows rejections that consumed no version, and the story's operations
    history = output.split("history (oldest first)", 1)[1].split("conflict summary", 1)[0]
    for operation in ("CREATE_TABLE", "INSERT_INTO", "MINOR_COMPACT", "MAJOR_COMPACT", "UPDATE", "DELETE", "CLUSTER"):
        assert operation in history
    assert "INSERT_OVERWRITE" in history and "rejected" in history
    # time travel: version and timestamp reads agree
    assert "give the same snapshot" in output
    # the change feed has the overwrite's truncate marker and no rows from compactions
    feed = output.split("change feed between time versions", 1)[1]
    assert "truncate" in feed and "delete" in feed and "upsert" in feed
    assert "MINOR_COMPACT" not in feed.split("groups from", 1)[0]
    # the table service compacted beside the stream and failed no INSERT
    service = re.search(
        r"compactor commits: (\d+) accepted \(([A-Z_, ]*)\), (\d+) rejected; "
        r"INSERTs rejected because of it: (\d+)",
        output,
    )
    assert service is not None, output
    assert int(service.group(1)) >= 1 and "COMPACT" in service.group(2) and service.group(4) == "0", service.group(0)
    # "finishes on its own in under four minutes" (three before the table service act)
    reported = int(re.search(r"demo finished in (\d+) s", output).group(1))  # type: ignore[union-attr]
    assert reported < 240 and elapsed < 240, f"the demo took {elapsed:.0f} s"
