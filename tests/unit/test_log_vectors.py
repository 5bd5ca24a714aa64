"""Auditors verify without ordo's code: the standalone verifier agrees with ordo's on every record.

``tools/verify_log.py`` (fastavro, cryptography and the standard library only) implements
docs/log-format.md. Over the test vectors (``tests/vectors``) both it and ordo's own verifier (the
functions behind ``ordo replay --verify``) must give each record its expected verdict; over the golden
logs of every release, and over forgeries made from them here, both must give the same verdict.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ordo.arbiter.replay import DIVERGENCE_OF
from ordo.schemas.codec import DEFAULT_CODEC
from ordo.schemas.decisionlog import LogProblem
from ordo.schemas.operations import TRAITS
from ordo.services.audit import audit

from .golden_log import RELEASES, tables
from .log_vectors import (
    VECTORS_DIR,
    decision_records,
    golden_log,
    intent_records,
    load,
    ordo_verdicts,
    trust,
    vector_paths,
)

ROOT = Path(__file__).resolve().parents[2]
VERIFIER = ROOT / "tools" / "verify_log.py"
VECTORS = vector_paths()
GOLDEN = [(release, table) for release in RELEASES for table in tables(release)]


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


verifier = _module(VERIFIER, "verify_log")


def standalone(log: dict[str, Any]) -> list[tuple[int, str, str]]:
    """The standalone verifier's verdicts."""
    return [tuple(v) for v in verifier.verify(log)]  # type: ignore[misc]


def expected(log: dict[str, Any]) -> list[tuple[int, str, str]]:
    return [(e["offset"], e["verdict"], e["signature"]) for e in log["expected"]]


def test_there_is_a_vector_for_every_verdict_and_every_signature_check() -> None:
    verdicts = {v for path in VECTORS for _, verdict, _ in expected(load(path)) for v in verdict.split("+")}
    refusals = {"unsigned:empty", "unsigned:not_chained", "unsigned:not_vouched", "unsigned:no_signature"}
    problems = {kind.value for kind in LogProblem} - {"lost"}  # lost: a reader's finding about a topic, not a record
    assert verdicts == {"ok", "copy"} | refusals | problems
    signatures = {s for path in VECTORS for _, _, s in expected(load(path))}
    assert signatures == {"valid", "none", "malformed", "unknown_key", "bad_signature"}


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_the_standalone_verifier_gives_every_record_its_expected_verdict(path: Path) -> None:
    log = load(path)
    assert standalone(log) == expected(log)


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_ordo_gives_every_record_its_expected_verdict(path: Path) -> None:
    log = load(path)
    assert ordo_verdicts(log) == expected(log)


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_ordo_replay_verify_reports_exactly_the_records_not_ok(path: Path) -> None:
    """The whole audit (re-derivation from the intents included) fails on a vector's bad records only."""
    log = load(path)
    result = audit(log["table"], intent_records(log), decision_records(log), verify=True, trust=trust(log))
    found: dict[int | None, set[str]] = defaultdict(set)
    for problem in result.problems:
        found[problem.decision_offset].add(problem.kind)
    bad = {offset: verdict for offset, verdict, _ in expected(log) if verdict not in ("ok", "copy")}
    assert set(found) == set(bad), (dict(found), bad)
    for offset, verdict in bad.items():
        kinds = (
            {"unsigned"}
            if verdict.startswith("unsigned:")
            else {DIVERGENCE_OF[LogProblem(k)] for k in verdict.split("+")}
        )
        assert kinds <= found[offset], (offset, verdict, found[offset])
    assert result.ok == (not bad)


@pytest.mark.parametrize(("release", "table"), GOLDEN, ids=[f"{r}-{t}" for r, t in GOLDEN])
def test_the_standalone_verifier_agrees_with_ordo_on_the_golden_logs(release: str, table: str) -> None:
    log = golden_log(release, table)
    verdicts = standalone(log)
    assert verdicts == ordo_verdicts(log)
    assert {verdict for _, verdict, _ in verdicts} == {"ok"}
    assert {signature for _, _, signature in verdicts} == ({"none"} if release == "0.1" else {"valid"})
    result = audit(table, intent_records(log), decision_records(log), verify=True, trust=trust(log))
    assert result.ok, result.problems


def _forgeries(log: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Variants of a golden log: a bit flipped in a value, a header dropped or emptied, records swapped or lost."""
    records = log["records"]
    import base64

    def flipped(record: dict[str, Any], at: int) -> dict[str, Any]:
        value = bytearray(base64.b64decode(record["value"]))
        value[at % len(value)] ^= 0x01
        return {**record, "value": base64.b64encode(bytes(value)).decode()}

    out = []
    for index in (0, len(records) // 2, len(records) - 1):
        for at in (1, 5, 40, -3):
            out.append((f"flip {index}@{at}", [*records[:index], flipped(records[index], at), *records[index + 1 :]]))
        out.append(
            (f"no header {index}", [*records[:index], {**records[index], "headers": None}, *records[index + 1 :]])
        )
        out.append((f"drop {index}", records[:index] + records[index + 1 :]))
        out.append((f"repeat {index}", [*records, {**records[index], "offset": records[-1]["offset"] + 1}]))
    out.append(("swap 1 2", [records[0], {**records[2], "offset": 1}, {**records[1], "offset": 2}, *records[3:]]))
    return [(name, {**log, "records": variant}) for name, variant in out]


@pytest.mark.parametrize("release", RELEASES)
def test_the_standalone_verifier_agrees_with_ordo_on_forgeries_of_the_golden_logs(release: str) -> None:
    refused = 0
    for table in tables(release):
        for name, forged in _forgeries(golden_log(release, table)):
            verdicts = standalone(forged)
            assert verdicts == ordo_verdicts(forged), (table, name)
            refused += any(verdict not in ("ok", "copy") for _, verdict, _ in verdicts)
    assert refused > 0


def test_the_standalone_verifier_imports_only_fastavro_cryptography_and_the_standard_library() -> None:
    tree = ast.parse(VERIFIER.read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    roots = {name.split(".")[0] for name in imported}
    assert roots - sys.stdlib_module_names == {"fastavro", "cryptography"}


def test_the_standalone_verifier_runs_with_ordo_blocked() -> None:
    """Run as a script with every package of ordo made unimportable: verdicts on stdout, exit 1 on a bad record."""
    blocker = (
        "import runpy, sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'schemas', 'kernel', 'arbiter', 'producer', 'consumer', 'ordo', 'tests'}:\n"
        "            raise ImportError(f'{name} is ordo')\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    for name, status in (("valid", 0), ("signed_invalid", 1)):
        path = VECTORS_DIR / f"{name}.json"
        run = subprocess.run(
            [sys.executable, "-I", "-c", blocker, str(VERIFIER), str(path)], capture_output=True, text=True, cwd="/"
        )
        assert run.returncode == status, run.stderr
        got = [json.loads(line) for line in run.stdout.splitlines()]
        assert [(g["offset"], g["verdict"], g["signature"]) for g in got] == expected(load(path))


def test_the_standalone_verifier_knows_every_released_schema_and_operation() -> None:
    """A release adds its fingerprints (and an operation its traits) to the verifier, or this fails."""
    known = {
        fp.hex(): f"{DEFAULT_CODEC._by_fingerprint[fp].model.__name__}.{r}.avsc"
        for fp, r in DEFAULT_CODEC.releases.items()
    }
    assert verifier.FINGERPRINTS == known
    assert verifier.DATA_CHANGES == {op.value for op, traits in TRAITS.items() if traits.data_change}
    assert verifier.CARRY_METADATA == {op.value for op, traits in TRAITS.items() if traits.metadata_only}


def test_the_spec_lists_every_released_fingerprint_and_computes_them() -> None:
    """docs/log-format.md's fingerprint table is the codec's, and its CRC-64-AVRO code gives the wire bytes."""
    import re

    import fastavro
    from fastavro.schema import to_parsing_canonical_form

    from ordo.schemas.history import HISTORY_DIR

    spec = (ROOT / "docs" / "log-format.md").read_text()
    rows = re.findall(r"^\| (\d+\.\d+) \| v\d+ \| (\w+) \| `([0-9a-f]{16})` \|", spec, re.M)
    listed = {fp: f"{event}.{release}.avsc" for release, event, fp in rows}
    assert listed == verifier.FINGERPRINTS
    scope: dict[str, Any] = {}
    exec(re.search(r"```python\n(EMPTY = .*?)```", spec, re.S).group(1), scope)  # type: ignore[union-attr]
    for fp, name in listed.items():
        if not name.endswith(".0.1.avsc"):  # 0.1 fingerprinted a form with the shared types as references
            schema = fastavro.parse_schema(json.loads((HISTORY_DIR / name).read_text()))
            assert scope["wire_fingerprint"](to_parsing_canonical_form(schema)).hex() == fp, name


def test_the_verifier_stays_small() -> None:
    """At most 100 lines of code (docstrings, comments and blank lines aside): small enough to read in one sitting."""
    tree = ast.parse(VERIFIER.read_text())
    docstrings = {
        line
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }
    code = [
        line
        for number, line in enumerate(VERIFIER.read_text().splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and number not in docstrings
    ]
    assert len(code) <= 100, len(code)


def test_the_vectors_are_what_the_generator_writes() -> None:
    """The files are the generator's output (deterministic), so neither drifts from the other."""
    generator = _module(VECTORS_DIR / "make_vectors.py", "make_vectors")
    written = {path.stem: path.read_text() for path in VECTORS}
    made = {vector.name: json.dumps(vector.document(), indent=1) + "\n" for vector in generator.vectors()}
    assert made == written
    assert (VECTORS_DIR / "vectors.pub").read_bytes() == generator.SIGNER.public_pem()
