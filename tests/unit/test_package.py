"""What ``pip install ordo`` puts into site-packages, and the names a user imports (issue 21, item 6).

The wheel is built from this checkout and installed into a directory of its own, then imported by a fresh
interpreter that sees that directory (``.pth`` files included) before this venv's: what a user gets.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

import ordo

ROOT = Path(__file__).resolve().parents[2]
OLD = ("producer", "arbiter", "consumer", "schemas", "kernel")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")  # a copy: no build/ left in the checkout, none reused from it
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("ordo", *OLD[:-1]):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
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
        site.addsitedir({str(site)!r})  # the installed wheel, its .pth run as at start-up
        site.addsitedir({sysconfig.get_paths()["purelib"]!r})  # its dependencies
        warnings.simplefilter("always")
        """
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=site.parent,  # not the checkout: its folders would be importable by their old names
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_wheel_installs_ordo_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"ordo", "ordo-legacy.pth"}
    for part in (*OLD, "_legacy.py"):
        assert any(name.startswith(f"ordo/{part}") for name in names), part
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


def test_the_0_4_paths_are_the_same_modules_with_a_warning(site: Path) -> None:
    found = run_installed(
        site,
        """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import producer.table, kernel.settings
            from producer import DeltaTable
            from schemas import Operation
        import ordo, ordo.producer.table, ordo.kernel.settings
        print(json.dumps({
            "same": [producer.table is ordo.producer.table, kernel.settings is ordo.kernel.settings,
                     DeltaTable is ordo.DeltaTable, Operation is ordo.Operation],
            "warned": sorted({str(w.message).split("`")[1] for w in caught if w.category is DeprecationWarning}),
            "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("producer", "kernel", "schemas")
                              and sys.modules[m] is not sys.modules.get("ordo." + m)),
        }))
        """,
    )
    assert found["same"] == [True, True, True, True]
    assert found["warned"] == ["import kernel", "import producer", "import schemas"]
    assert found["modules"] == [], "an old name bound to a second copy of a module"


def test_another_projects_package_of_an_old_name_wins(site: Path, tmp_path: Path) -> None:
    """The 0.4 paths never shadow a package of the same name that the user has installed."""
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


def test_a_checkout_binds_the_old_names_to_the_same_modules() -> None:
    """From the repository's root the folders are importable by their 0.4 names: one module each, a warning."""
    code = textwrap.dedent(
        """
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import producer.table, consumer.catalog
        import ordo.producer.table, ordo.consumer.catalog
        print(json.dumps([producer.table is ordo.producer.table, consumer.catalog is ordo.consumer.catalog,
                          sorted(str(w.message).split("`")[1] for w in caught if w.category is DeprecationWarning)]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [True, True, ["import consumer", "import producer"]]


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
