"""What ``pip install ordo`` puts into site-packages, and the names a user imports (issue 21, item 6).

The wheel is built from this checkout and installed into a directory of its own, then imported by a fresh
interpreter that sees that directory (``.pth`` files included) before this venv's: what a user gets.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

import ordo

pytestmark = pytest.mark.slow  # builds a wheel and installs it with pip: make test runs it, make test-fast does not

ROOT = Path(__file__).resolve().parents[2]
OLD = ("producer", "arbiter", "consumer", "schemas", "kernel")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")  # a copy: no build/ left in the checkout, none reused from it
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "ordo", source / "ordo", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("ordo-*.whl")
    return built


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return target


def run_installed(site: Path, code: str, *extra_paths: Path) -> dict:
    """Run ``code`` (which prints one JSON document) in a fresh interpreter that imports the installed ordo."""
    prelude = textwrap.dedent(
        f"""
        import json, site, sys, warnings
        for path in {[str(p) for p in extra_paths]!r}:
            sys.path.append(path)
        site.addsitedir({str(site)!r})  # the installed wheel
        site.addsitedir({sysconfig.get_paths()["purelib"]!r})  # its dependencies
        warnings.simplefilter("always")
        """
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=site.parent,  # not the checkout
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},  # a developer's checkout would come first
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_wheel_installs_ordo_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"ordo"}
    for part in OLD:
        assert any(name.startswith(f"ordo/{part}/") for name in names), part
    assert not any("legacy" in name for name in names), "0.4's import paths are gone in 0.6"
    # the data the code reads at run time: every released schema (old logs) and the policies
    assert "ordo/schemas/avro/history/CommitIntent.0.1.avsc" in names
    assert "ordo/arbiter/policies/maxcompute.csv" in names


def test_the_entry_point_gives_every_name_it_lists_and_imports_no_engine_up_front(site: Path) -> None:
    found = run_installed(
        site,
        """
        import ordo
        heavy = sorted(m for m in ("pyspark", "confluent_kafka", "pydantic", "pyarrow") if m in sys.modules)
        missing = [name for name in ordo.__all__ if getattr(ordo, name, None) is None]
        print(json.dumps({"file": ordo.__file__, "heavy": heavy, "missing": missing, "n": len(ordo.__all__),
                          "delta": ordo.DeltaTable.__module__, "client": ordo.CommitClient.__module__}))
        """,
    )
    assert found["file"].startswith(str(site)), found["file"]
    assert found["heavy"] == [] and found["missing"] == []
    assert found["n"] == len(ordo.__all__) > 30
    assert found["delta"].startswith("ordo.producer.") and found["client"] == "ordo.producer.client"


OWN_MODULES = (
    "ordo.producer.table",
    "ordo.arbiter.core",
    "ordo.consumer.catalog",
    "ordo.schemas.codec",
    "ordo.kernel.settings",
)
PROBE = f"""
import importlib, json, sys
files = {{name: importlib.import_module(name).__file__ for name in {OWN_MODULES!r}}}
gone = []
for old in {OLD!r}:
    try:
        importlib.import_module(old)
    except ModuleNotFoundError:
        gone.append(old)
print(json.dumps({{"files": files, "gone": gone}}))
"""


def check_one_name_per_module(found: dict, root: Path) -> None:
    """Every module is found under ``root`` by its ``ordo.`` name, and by that name only."""
    for name, file in found["files"].items():
        expected = root.joinpath(*name.split("."))
        assert Path(file).resolve().parent in (expected.parent, expected), (name, file)
        assert Path(file).resolve().is_relative_to(root.resolve()), (name, file, root)
    assert found["gone"] == list(OLD), "ordo 0.4's import paths were dropped in 0.6 (docs/upgrading.md)"


def test_the_wheel_gives_one_name_per_module(site: Path) -> None:
    check_one_name_per_module(run_installed(site, PROBE), site)


def test_the_editable_install_gives_the_same_names_from_any_directory(tmp_path: Path) -> None:
    """The venv running the tests is ``pip install -e .`` of this checkout (make setup): from another directory
    its modules are the checkout's files under their ``ordo.`` names, and the 0.4 names are gone."""
    direct = json.loads(
        next(p for p in Path(sysconfig.get_paths()["purelib"]).glob("ordo-*.dist-info/direct_url.json")).read_text()
    )
    assert direct.get("dir_info", {}).get("editable"), direct
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    check_one_name_per_module(json.loads(done.stdout.strip().splitlines()[-1]), ROOT)


def test_the_checkout_gives_the_same_names_without_an_install(tmp_path: Path) -> None:
    """From the repository's root with no install at all (site-packages for the dependencies only, no .pth run)."""
    code = f"import sys; sys.path[:0] = [{str(ROOT)!r}]; sys.path.append({sysconfig.get_paths()['purelib']!r})\n"
    done = subprocess.run(
        [sys.executable, "-S", "-c", code + PROBE], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    check_one_name_per_module(json.loads(done.stdout.strip().splitlines()[-1]), ROOT)


def test_another_projects_package_of_an_old_name_is_its_own(site: Path, tmp_path: Path) -> None:
    """ordo claims no top-level name but ``ordo``: a user's own ``schemas`` package is theirs."""
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "__init__.py").write_text("MINE = True\n")
    (tmp_path / "schemas" / "models.py").write_text("THEIRS = True\n")
    found = run_installed(
        site,
        """
        import schemas, schemas.models, ordo.schemas.models
        print(json.dumps([getattr(schemas, "MINE", False), getattr(schemas.models, "THEIRS", False),
                          schemas.models is ordo.schemas.models]))
        """,
        tmp_path,
    )
    assert found == [True, True, False]


def test_the_entry_point_lists_every_public_name_of_the_writer_side_and_the_errors() -> None:
    """``ordo._EXPORTS`` is written out (so ``import ordo`` imports nothing); it must not drift from the modules."""
    import importlib

    by_module: dict[str, set[str]] = {}
    for name, module in ordo._EXPORTS.items():
        by_module.setdefault(module, set()).add(name)
    for module, names in by_module.items():
        public = set(getattr(importlib.import_module(module), "__all__", names))
        assert names <= public, f"ordo exports {sorted(names - public)} that {module} does not"
    for module in ("ordo.producer", "ordo.errors"):
        missing = set(importlib.import_module(module).__all__) - by_module[module]
        assert not missing, f"{module} has public names ordo does not export: {sorted(missing)}"
