"""Every code block of README.md is checked: here the commands (make targets, ``ordo`` flags), without running them.

Running them is ``tests/e2e/test_readme.py`` (``ordo up``, the Python quick
start on Spark, the ``ordo`` read commands) and ``tests/e2e/test_demo.py``
(``ordo demo``, what ``make demo`` runs). ``make test`` is not run from a
test (it would run this test again): ``make -n`` checks the target exists and
what it would do.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from ordo.cli import main

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def readme_blocks() -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block in README.md, in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer((ROOT / "README.md").read_text())]


def commands(code: str) -> list[list[str]]:
    """The command lines of a shell block, comments stripped."""
    result = []
    for line in code.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            result.append(shlex.split(line))
    return result


def test_every_block_is_a_kind_some_test_runs() -> None:
    kinds = [lang for lang, _ in readme_blocks()]
    assert kinds.count("python") == 1, "tests/e2e/test_readme.py runs exactly one Python block"
    assert set(kinds) <= {"", "bash", "python"}, kinds
    for lang, code in readme_blocks():
        if lang == "bash":
            for argv in commands(code):
                assert argv[0] in {"make", "ordo", "source"}, f"no test runs {argv}"


def test_the_diagram_names_the_real_topics() -> None:
    from ordo.schemas import decisions_topic, intents_topic

    figures = [code for lang, code in readme_blocks() if lang == ""]
    assert len(figures) == 1
    assert intents_topic("p", "t") == "p.t.intents" and decisions_topic("p", "t") == "p.t.decisions"
    assert "<prefix>.<table>.intents" in figures[0] and "<prefix>.<table>.decisions" in figures[0]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_targets_exist() -> None:
    targets = [argv[1] for _, code in readme_blocks() for argv in commands(code) if argv[0] == "make"]
    assert set(targets) >= {"demo", "test"}
    for target in targets:
        done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        if target == "demo":  # Apache Kafka, its broker, is fetched (once) before the demo starts
            assert "ordo.broker.kafka fetch" in done.stdout and "ordo demo" in done.stdout
            assert done.stdout.index("ordo.broker.kafka fetch") < done.stdout.index("ordo demo")
        if target == "test":
            assert "pytest" in done.stdout


def test_ordo_commands_parse() -> None:
    lines = [argv for _, code in readme_blocks() for argv in commands(code) if argv[0] == "ordo"]
    assert ["ordo", "up"] in lines
    for argv in lines:
        name, *rest = argv[1:]
        assert name in main.commands, f"README runs `ordo {name}`, which does not exist"
        main.commands[name].make_context(name, rest)  # unknown options raise


def test_the_virtualenv_it_sources_is_the_makefiles() -> None:
    sourced = [argv[1] for _, code in readme_blocks() for argv in commands(code) if argv[0] == "source"]
    makefile = (ROOT / "Makefile").read_text()
    for path in sourced:
        venv = path.split("/bin/")[0]
        assert re.search(rf"^VENV\s*:=\s*{re.escape(venv)}\s*$", makefile, re.M), path
