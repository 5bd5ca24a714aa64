"""A real ordo stack for the writer's end-to-end tests: broker, arbiter and consumer processes.

The broker is the run's session broker (``bootstrap_servers`` from
tests/conftest.py: the embedded Tansu or a single-node Apache Kafka, one run per
``broker_kind``, or ``ORDO_TEST_BOOTSTRAP_SERVERS``).
Each test module gets its own arbiter and consumer processes on a fresh topic
prefix, warehouse and SQLite catalog (``writer_stack``), so modules never see
each other's tables. Use it with::

    from tests.e2e.stack import writer_stack  # noqa: F401  (the fixture)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ordo.services.stack import ManagedProcess, ProcessGroup
from ordo.settings import Settings

CONSUMER_READY = r"consumer ready"
START_TIMEOUT = 60.0


@dataclass
class WriterStack:
    """The processes and settings of one module's stack."""

    settings: Settings
    arbiter: ManagedProcess
    consumer: ManagedProcess
    group: ProcessGroup

    @property
    def warehouse(self) -> Path:
        return Path(self.settings.warehouse)

    def logs(self) -> str:
        """The tails of the process logs (for assertion messages)."""
        return "\n".join(f"--- {p.name}\n{p.tail(20)}" for p in (self.arbiter, self.consumer))


def start_consumer(group: ProcessGroup, settings: Settings) -> ManagedProcess:
    """``ordo consumer`` for ``settings``, returned once it logged that it is ready."""
    process = group.start_ordo(settings, "consumer", "--no-http", name=f"consumer-{settings.topic_prefix}")
    process.wait_for_line(CONSUMER_READY, timeout=START_TIMEOUT)
    return process


@pytest.fixture(scope="module")
def writer_stack(make_settings: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An arbiter and a consumer on a fresh prefix for this module; stopped (and their clients closed) at the end."""
    from ordo.producer.table import close_connections

    settings = make_settings()
    group = ProcessGroup(log_dir=tmp_path_factory.mktemp("writer-logs"))
    try:
        arbiter = group.start_arbiter(settings, timeout=START_TIMEOUT)
        consumer = start_consumer(group, settings)
        yield WriterStack(settings, arbiter, consumer, group)
    finally:
        close_connections()
        group.stop()


def objects(location: str) -> dict[str, int]:
    """Every object under ``location`` (relative key -> size), directory markers included."""
    from pyarrow.fs import FileSelector, FileType

    from ordo.kernel.objectstore import filesystem

    fs, root = filesystem(location)
    infos = fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
    return {i.path[len(root) + 1 :]: int(i.size or 0) for i in infos if i.type == FileType.File}


def parquet_files(root: Path | str) -> list[str]:
    """Every Parquet file under ``root`` (relative paths; a local directory or an object store location), staging
    area excluded."""
    from ordo.kernel.objectstore import is_s3

    if is_s3(str(root)):
        return sorted(p for p in objects(str(root)) if p.endswith(".parquet"))
    root = Path(root)
    found = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "_staging"]
        for name in names:
            if name.endswith(".parquet"):
                found.append(str((Path(directory) / name).relative_to(root)))
    return sorted(found)


def files_of_txn(root: Path | str, txn_id: str) -> list[str]:
    """Parquet files written by transaction ``txn_id`` (their names start with it)."""
    return [p for p in parquet_files(root) if Path(p).name.startswith(f"{txn_id}-")]
