"""The layers contract, from the code's own imports (run by ``make lint`` and the suite).

    schemas            the wire contract: imports nothing of ours
    kernel             settings, errors, topic admin, log reading, group membership: schemas only
    arbiter, consumer  the decision side and the read side: kernel and schemas, never each other
    producer           the writer side: consumer (to read the catalog), kernel, schemas
    ordo               the composition root (CLI, stack, demo, services): anything

Every ``import`` counts, also one inside a function. The few calls a lower
layer makes into ``ordo`` lazily are listed in ``LAZY_UPWARD`` with the reason;
a new one fails this test until it is moved down or listed with its reason.

Size: a class holds one named part. No class grows beyond ``CLASS_LINES``
lines; ``OVERSIZED`` would list an exception (none is left since issue 28:
``CommitClient`` gave its topics to ``producer.topics.TableTopics``, ``Demo``
its readings to ``ReadersView``), and a new one fails this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Each layer's folder: all live under ``ordo`` (``ordo.producer`` is ordo/producer, one name per module).
FOLDERS = {
    "schemas": "ordo/schemas",
    "kernel": "ordo/kernel",
    "arbiter": "ordo/arbiter",
    "consumer": "ordo/consumer",
    "producer": "ordo/producer",
    "broker": "ordo/broker",
    "spark": "ordo/spark",
    "services": "ordo/services",
    "cli": "ordo/cli",
    "ordo": "ordo",
}
OLD_PATHS = {"schemas", "kernel", "arbiter", "consumer", "producer"}  # ordo 0.4's top-level names, gone since 0.6
SUBPACKAGES = set(FOLDERS) - {"ordo"}
ALLOWED = {
    "schemas": set(),
    "kernel": {"schemas"},
    "arbiter": {"schemas", "kernel"},
    "consumer": {"schemas", "kernel"},
    "producer": {"schemas", "kernel", "consumer"},
    "broker": {"schemas", "kernel"},
    "spark": {"schemas", "kernel", "consumer", "producer"},
    "services": {"schemas", "kernel", "arbiter", "consumer", "producer", "broker", "spark"},
    "cli": {"schemas", "kernel", "arbiter", "consumer", "producer", "broker", "spark", "services"},
    # the entry point (``from ordo import DeltaTable``) and the public paths ordo.settings, ordo.errors, ordo.keys
    "ordo": set(SUBPACKAGES),
}
LAZY_UPWARD = {
    # DeltaTable is the user's facade: it registers the format("ordo") source (its registration lives with the
    # Spark session helpers) and hands VACUUM to the vacuum service, both in the layers above.
    ("ordo/producer/handle.py", "ordo.spark"),
    ("ordo/producer/maintenance.py", "ordo.services.vacuum"),
    # The HTTP API's layout view shows what the table service would do next (its planner).
    ("ordo/consumer/http.py", "ordo.services.compactor"),
}


CLASS_LINES = 320
OVERSIZED: set[str] = set()


def imports(path: Path) -> list[tuple[str, bool]]:
    """Each module ``path`` imports (absolute imports), with whether the import is at module level."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, id(node) in top))
    return found


def files(package: str) -> list[Path]:
    """The modules of one layer (``ordo``'s without the layers installed under it)."""
    folder = ROOT / FOLDERS[package]
    inner = {folder / FOLDERS[name].removeprefix("ordo/") for name in FOLDERS if name != "ordo"}
    return sorted(p for p in folder.rglob("*.py") if package != "ordo" or not any(p.is_relative_to(i) for i in inner))


def layer(module: str) -> str | None:
    """The layer an imported module belongs to (``ordo.producer.table`` -> producer), None for a third party's."""
    parts = module.split(".")
    if parts[0] != "ordo":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else "ordo"


def violations() -> list[str]:
    problems = []
    for package, allowed in ALLOWED.items():
        for path in files(package):
            relative = path.relative_to(ROOT).as_posix()
            for module, module_level in imports(path):
                if module.split(".")[0] in OLD_PATHS:
                    problems.append(f"{relative} imports {module}: ordo 0.4's path; import ordo.{module}")
                    continue
                target = layer(module)
                if target is None or target == package or target in allowed:
                    continue
                if not module_level and (relative, module) in LAZY_UPWARD:
                    continue
                where = "at module level" if module_level else "inside a function"
                problems.append(f"{relative} imports {module} {where}: {package} may import only {sorted(allowed)}")
    return problems


def test_every_package_imports_only_the_layers_below_it() -> None:
    assert violations() == []


def test_the_lazy_upward_imports_listed_still_exist() -> None:
    """An entry nobody needs any more is removed, so the list stays the truth."""
    present = {
        (path.relative_to(ROOT).as_posix(), module)
        for package in ALLOWED
        for path in files(package)
        for module, _ in imports(path)
    }
    assert LAZY_UPWARD <= present, LAZY_UPWARD - present


# Import circles between modules (imports inside functions count: they run too). None is left: the Spark
# writer's circle (DeltaTable and the format("ordo") data source calling each other through 13 modules) was
# untangled in issue 28 by moving what both need down (producer.definition: a table's metadata;
# producer.connection: the settings options and the streaming query id property; the builder is given its
# DeltaTable class). A circle fails the test and is named; one that must stay is listed here with its reason.
KNOWN_CIRCLES: set[frozenset[str]] = set()


def module_graph() -> dict[str, set[str]]:
    """Each module of ordo -> the modules of ordo it imports (``from pkg import sub`` is an arrow to ``sub``)."""
    names = {}
    for path in (ROOT / "ordo").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(module: str) -> str | None:
        while module and module not in names:
            module = module.rpartition(".")[0]
        return module or None

    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        tree = ast.parse(path.read_text(), str(path))
        typing_only = {  # ``if TYPE_CHECKING:`` imports never run
            id(inner)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for statement in block.body
            for inner in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [sub for sub in subs if sub in names] or [node.module]
            else:
                continue
            graph[name] |= {t for t in map(resolve, (t for t in targets if t.startswith("ordo"))) if t and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_no_import_circles() -> None:
    new = [sorted(c) for c in circles(module_graph()) if not any(c <= known for known in KNOWN_CIRCLES)]
    assert not new, f"import circle(s): {new}"


def test_the_circle_check_can_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ordo" / "arbiter").mkdir(parents=True)
    (tmp_path / "ordo" / "__init__.py").write_text("")
    (tmp_path / "ordo" / "arbiter" / "__init__.py").write_text("")
    (tmp_path / "ordo" / "arbiter" / "a.py").write_text("from ordo.arbiter import b\n")
    (tmp_path / "ordo" / "arbiter" / "b.py").write_text("def f():\n    import ordo.arbiter.a\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert circles(module_graph()) == [frozenset({"ordo.arbiter.a", "ordo.arbiter.b"})]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ordo.settings import Settings\n", "imports ordo.settings at module level"),
        ("def f():\n    import ordo.consumer.catalog\n", "imports ordo.consumer.catalog inside a function"),
        ("from consumer.catalog import Catalog\n", "ordo 0.4's path; import ordo.consumer.catalog"),
    ],
)
def test_the_check_can_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, expected: str) -> None:
    """A layer violation planted in a copy of the tree is reported."""
    for package in ALLOWED:
        (tmp_path / FOLDERS[package]).mkdir(parents=True, exist_ok=True)
    (tmp_path / "ordo" / "arbiter" / "planted.py").write_text(source)
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert any(expected in problem for problem in violations()), violations()


def oversized() -> list[str]:
    """Every class above ``CLASS_LINES`` lines that ``OVERSIZED`` does not list, with its size."""
    found = []
    for package in ALLOWED:
        for path in files(package):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                    name = f"{path.relative_to(ROOT).as_posix()}::{node.name}"
                    size = node.end_lineno - node.lineno + 1
                    if size > CLASS_LINES and name not in OVERSIZED:
                        found.append(f"{name}: {size} lines (at most {CLASS_LINES}: split it into named parts)")
    return found


def test_no_class_grows_beyond_the_size_of_one_named_part() -> None:
    assert oversized() == []


def test_the_size_check_can_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for package in ALLOWED:
        (tmp_path / FOLDERS[package]).mkdir(parents=True, exist_ok=True)
    body = "".join(f"    def m{i}(self) -> None:\n        pass\n" for i in range(CLASS_LINES))
    (tmp_path / "ordo" / "arbiter" / "big.py").write_text(f"class Big:\n{body}")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert [p.split(":")[0] for p in oversized()] == ["ordo/arbiter/big.py"]
