"""The dependency rule (STYLE.md): the contract and the decision core import neither Kafka nor Spark."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_core_and_schemas_import_without_kafka_or_spark() -> None:
    probe = textwrap.dedent(
        """
        import sys
        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("confluent_kafka", "pyspark", "py4j"):
                    raise ImportError(f"blocked: {name}")
                return None
        sys.meta_path.insert(0, Blocker())
        import ordo.schemas, ordo.arbiter, ordo.arbiter.core, ordo.arbiter.policy
        from ordo.arbiter.core import decide, evaluate_record, apply
        assert not any(m.split(".")[0] in ("confluent_kafka", "pyspark") for m in sys.modules)
        own = {m for m in sys.modules if m.startswith("ordo.")}
        assert all(m.split(".")[1] in ("schemas", "kernel", "arbiter") for m in own), own
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_schemas_import_nothing_else_of_ours() -> None:
    probe = "import sys, ordo.schemas; print(sorted({m for m in sys.modules if m.startswith('ordo.') and not m.startswith('ordo.schemas')}))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_kernel_imports_nothing_of_ours_but_schemas() -> None:
    probe = (
        "import sys, ordo.kernel, ordo.kernel.logread; "
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('ordo.')} - {'kernel', 'schemas'}))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
