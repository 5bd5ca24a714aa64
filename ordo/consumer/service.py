"""``ordo consumer``: the materializer and the HTTP service in one process.

The materializer runs on the main thread (it owns the catalog's only writer
connection); uvicorn serves reads on a background thread through its own
read connections. SIGINT/SIGTERM stop both after the current batch.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from pathlib import Path

from ordo.consumer.materializer import ConsumerStatus, Materializer
from ordo.consumer.store import CatalogWriter
from ordo.kernel.settings import Settings

log = logging.getLogger("ordo.consumer")


def run_consumer(settings: Settings, *, http: bool = True, echo: Callable[[str], None] = print) -> int:
    """Run until SIGINT/SIGTERM; returns the exit code. Prints the settings a reader needs."""
    from ordo.consumer.repair import consumer_lock
    from ordo.consumer.stores import is_postgres

    if is_postgres(settings.catalog):  # shared by consumers on several hosts: no lock file; repairs run anywhere
        return _run(settings, settings.catalog, http, echo)
    catalog_path = str(Path(settings.catalog).absolute())
    Path(catalog_path).parent.mkdir(parents=True, exist_ok=True)
    with consumer_lock(catalog_path):  # ``ordo repair`` then asks this consumer instead of writing the file itself
        return _run(settings, catalog_path, http, echo)


def _run(settings: Settings, catalog_path: str, http: bool, echo: Callable[[str], None]) -> int:
    writer = CatalogWriter(catalog_path, settings.topic_prefix)
    status = ConsumerStatus()
    materializer = Materializer(settings, writer, status)
    server = None
    if http:
        from ordo.consumer.catalog import Catalog
        from ordo.consumer.http import HttpServer, create_app

        server = HttpServer(create_app(Catalog(catalog_path), status), settings.http_host, settings.http_port).start()

    def _on_signal(signum: int, frame: object) -> None:
        materializer.stop()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    echo(f"ORDO_CATALOG={catalog_path}")
    if server is not None:
        echo(f"ORDO_CATALOG_URL={server.url}")
        log.info("consumer HTTP service at %s (docs at %s/docs)", server.url, server.url)
    try:
        materializer.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server is not None:
            server.stop()
        writer.close()
    log.info("consumer stopped: %s", status.snapshot())
    return 0


__all__ = ["run_consumer"]
