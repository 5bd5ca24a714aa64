"""README.md, run as written: ``ordo up``, then the Python quick start on Spark, then the ``ordo`` commands.

The settings come only from what ``ordo up`` printed (its ``export`` lines),
as for a user who copies them into a second terminal. ``ordo up`` runs as the
README writes it, so on its default broker, Apache Kafka, whose data goes to
``$XDG_DATA_HOME/ordo/up-kafka``: the test's own directory.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_readme import commands, readme_blocks

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


def start_up(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], list[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "ordo", *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines: list[str] = []
    deadline = time.monotonic() + 120
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError("ordo up exited early:\n" + "".join(lines))
        lines.append(line)
        if line.startswith("ordo is up"):
            return process, lines
    process.kill()
    raise AssertionError("ordo up did not come up:\n" + "".join(lines))


def test_readme_runs_as_written(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shell = [commands(code) for lang, code in readme_blocks() if lang == "bash"]
    python = next(code for lang, code in readme_blocks() if lang == "python")
    up_line = next(argv for block in shell for argv in block if argv[:2] == ["ordo", "up"])
    reads = [argv for block in shell for argv in block if argv[0] == "ordo" and argv[1] != "up"]
    assert reads, "the README shows the read commands"

    env = {k: v for k, v in os.environ.items() if not k.startswith("ORDO_")}
    env.update(PYTHONUNBUFFERED="1", ORDO_HTTP_PORT="0", COLUMNS="200")  # any free port: 8765 may be taken
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")  # a fresh ~/.local/share: the flow creates the table events
    process, lines = start_up(up_line, env)
    assert any(line.startswith("broker    Apache Kafka ") for line in lines), "".join(lines)  # the default broker
    namespace: dict[str, Any] = {}
    try:
        exports = dict(re.findall(r"^export (ORDO_\w+)=(\S+)$", "".join(lines), re.M))
        assert {"ORDO_BOOTSTRAP_SERVERS", "ORDO_TOPIC_PREFIX", "ORDO_WAREHOUSE", "ORDO_CATALOG"} <= set(exports)
        for key in [k for k in os.environ if k.startswith("ORDO_")]:
            monkeypatch.delenv(key)
        for key, value in exports.items():
            monkeypatch.setenv(key, value)

        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(python, "README.md", "exec"), namespace)
        text = printed.getvalue()
        assert "CommitResult(" in text and "id_version=2" in text, text
        assert re.search(r"\|\s*2\|\s*buy\|2024-05-01\|", text), text  # the update, at the head
        assert re.search(r"\|\s*2\|\s*view\|2024-05-01\|", text), text  # version 1, before it
        assert re.search(r"\|\s*2\|\s*view\|\s*update_preimage\|\s*2\|", text), text  # the feed's pre-image
        assert re.search(r"\|\s*3\|\s*view\|\s*insert\|\s*3\|", text), text  # the streamed row
        events = namespace["events"]
        assert events.version == 3 and events.read().count() == 3

        for argv in reads:
            done = subprocess.run(
                [sys.executable, "-m", "ordo", *argv[1:]],
                capture_output=True,
                text=True,
                env={**env, **exports},
                timeout=120,
            )
            assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
            assert "Traceback" not in done.stderr
            if argv[1] == "history":
                assert "UPDATE" in done.stdout and "INSERT_INTO" in done.stdout and "CREATE_TABLE" in done.stdout
            if argv[1] == "show":
                assert "2 rows (merge-on-read)" in done.stdout
            if argv[1] == "changes":
                assert "upsert" in done.stdout and "UPDATE" in done.stdout
    finally:
        table = namespace.get("events")
        if table is not None:
            table.client.close()
            table.catalog.close()
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0
