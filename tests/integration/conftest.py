"""Integration fixtures of the consumer (real broker, real ``ordo consumer`` processes).

``consumer`` (function, factory)
    ``consumer(*, settings=None, catalog=None, http=True, port=0, wait_ready=True) -> ConsumerProcess``
    starts ``ordo consumer`` for the test's settings (or the given ones), with its
    SQLite catalog at ``catalog`` (default: the settings' catalog) and, with
    ``http``, its HTTP service on 127.0.0.1:``port`` (0 = any free port; pass the
    previous ``ConsumerProcess.port`` to restart it at the same URL). By default it
    returns once the consumer logged ``consumer ready`` (caught up with every
    decisions log that existed when it started). Killed at teardown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ordo.consumer import Catalog
from ordo.consumer.materializer import READY_MESSAGE
from ordo.consumer.stores import is_postgres
from ordo.services.stack import ManagedProcess, ProcessGroup
from ordo.settings import Settings


@dataclass
class ConsumerProcess:
    """A running ``ordo consumer`` and how to reach its catalog."""

    process: ManagedProcess
    settings: Settings
    catalog_path: str
    url: str | None

    @property
    def port(self) -> int | None:
        """The HTTP port (None without HTTP)."""
        return None if self.url is None else int(self.url.rsplit(":", 1)[1])

    def catalog(self) -> Catalog:
        """A ``Catalog`` reading the SQLite file directly."""
        return Catalog(self.catalog_path)

    def remote(self) -> Catalog:
        """A ``Catalog`` talking to the HTTP service."""
        assert self.url is not None, "started without HTTP"
        return Catalog(self.url)

    def kill(self) -> int:
        """SIGKILL, as a crash would."""
        return self.process.kill()

    def terminate(self) -> int:
        """A clean stop (SIGTERM)."""
        return self.process.terminate()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait for the ready line."""
        self.process.wait_for_line(READY_MESSAGE, timeout=timeout)


@pytest.fixture
def consumer(processes: ProcessGroup, settings: Settings) -> Callable[..., ConsumerProcess]:
    """Factory: start ``ordo consumer`` for this test's settings; returns the running process."""

    def start(
        *,
        settings: Settings = settings,
        catalog: str | Path | None = None,
        http: bool = True,
        port: int = 0,
        wait_ready: bool = True,
        timeout: float = 30.0,
        extra: tuple[str, ...] = (),
    ) -> ConsumerProcess:
        location = str(catalog if catalog is not None else settings.catalog)
        catalog_path = location if is_postgres(location) else str(Path(location).absolute())
        args = ["consumer", "--catalog", catalog_path, *extra]
        args += ["--http-port", str(port), "--http-host", "127.0.0.1"] if http else ["--no-http"]
        process = processes.start_ordo(settings, *args, name=f"consumer-{settings.topic_prefix}")
        url = None
        if http:
            match = process.wait_for_line(r"ORDO_CATALOG_URL=(\S+)", timeout=timeout)
            url = match.group(1)
        handle = ConsumerProcess(process, settings, catalog_path, url)
        if wait_ready:
            handle.wait_ready(timeout)
        return handle

    return start
