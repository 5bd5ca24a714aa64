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
        import schemas, arbiter, arbiter.core, arbiter.policy
        from arbiter.core import decide, evaluate_record, apply
        assert not any(m.split(".")[0] in ("confluent_kafka", "pyspark") for m in sys.modules)
        own = {m.split(".")[0] for m in sys.modules} & {"producer", "consumer", "ordo"}
        assert not own, own
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_schemas_import_nothing_else_of_ours() -> None:
    probe = "import sys, schemas; print(sorted({m.split('.')[0] for m in sys.modules} & {'arbiter','producer','consumer','ordo'}))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_kernel_imports_nothing_of_ours_but_schemas() -> None:
    probe = (
        "import sys, kernel, kernel.logread; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'arbiter','producer','consumer','ordo'}))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
