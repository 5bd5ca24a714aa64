"""What every long-running process serves to an operator: ``/metrics``, ``/healthz`` and ``/readyz``.

The arbiter and the table service serve them from ``ObservabilityServer`` (a
stdlib HTTP server on a daemon thread); the consumer serves the same three
paths from its FastAPI app, with the same bodies. One contract for all three:

* ``GET /metrics``: Prometheus text exposition of the process's own registry
  (never the process-global one), ``ordo_build_info{version,process}`` included;
* ``GET /healthz``: 200 while the process is alive and its loop turns, with a
  JSON body (``status`` "ok" or "degraded", and what is degraded: stopped
  tables, ...); 503 when, once ready, the loop has not turned for
  ``stall_after`` seconds (a long rebuild at start-up is not a stall);
* ``GET /readyz``: 200 ``{"ready": true}`` once the process does its work
  (arbiter: tables rebuilt; consumer: caught up; compactor: Spark up), else 503;
  also 503 while it holds work it cannot do, named in ``not_serving`` (a fleet
  arbiter's table whose transactions it cannot end).

Unauthenticated: bind it to loopback (the default) or a private network.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any

log = logging.getLogger("ordo.observe")


def ordo_version() -> str:
    """The installed ordo version ("unknown" when run from a tree that is not installed)."""
    try:
        return package_version("ordo")
    except PackageNotFoundError:
        return "unknown"


def register_build_info(registry: Any, process: str) -> None:
    """Add ``ordo_build_info{version,process} 1`` to ``registry`` (a Prometheus ``CollectorRegistry``)."""
    from prometheus_client import Gauge

    info = Gauge("ordo_build_info", "ordo's version; always 1", ["version", "process"], registry=registry)
    info.labels(ordo_version(), process).set(1)


class Health:
    """A process's liveness and readiness, set by its loop and read by the HTTP thread.

    ``beat()`` once per loop turn; ``ready`` once the process does its work;
    ``degraded`` maps what is wrong (a stopped table -> why) for ``/healthz``;
    ``not_serving`` what it holds but cannot serve now (a table -> why): not ready.
    """

    def __init__(self, process: str, stall_after: float = 120.0) -> None:
        import time

        self.process = process
        self.stall_after = stall_after
        self.ready = False
        self.degraded: dict[str, str] = {}
        self.not_serving: dict[str, str] = {}
        self._clock = time.monotonic
        self._last_beat = self._clock()

    def beat(self) -> None:
        """The loop turned."""
        self._last_beat = self._clock()

    def healthz(self) -> tuple[int, dict[str, Any]]:
        """Status code and body of ``/healthz`` (a process still starting, not ready yet, is alive)."""
        stalled = self._clock() - self._last_beat
        alive = stalled <= self.stall_after or not self.ready
        body: dict[str, Any] = {
            "process": self.process,
            "status": "stalled" if not alive else "degraded" if self.degraded else "ok",
            "stopped": dict(self.degraded),
            "seconds_since_loop": round(stalled, 3),
        }
        return (200 if alive else 503), body

    def readyz(self) -> tuple[int, dict[str, Any]]:
        """Status code and body of ``/readyz``."""
        not_serving = dict(self.not_serving)
        ready = self.ready and not not_serving
        body: dict[str, Any] = {"ready": ready}
        if not_serving:
            body["not_serving"] = not_serving
        return (200 if ready else 503), body


class ObservabilityServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` for ``registry`` and ``health`` on ``host:port`` (0: any free).

    Binds at construction (a port in use fails here, naming it); ``start()`` serves from a daemon thread.
    """

    def __init__(self, registry: Any, health: Health, host: str, port: int) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        def render() -> tuple[int, str, bytes]:
            return 200, CONTENT_TYPE_LATEST, generate_latest(registry)

        def as_json(result: tuple[int, dict[str, Any]]) -> tuple[int, str, bytes]:
            return result[0], "application/json", json.dumps(result[1]).encode()

        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/metrics": render,
            "/healthz": lambda: as_json(health.healthz()),
            "/readyz": lambda: as_json(health.readyz()),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    status, kind, body = 404, "application/json", b'{"error": "not found"}'
                else:
                    status, kind, body = route()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # no access log on stderr
                pass

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise OSError(
                f"cannot serve /metrics, /healthz and /readyz of the {health.process} on {host}:{port}: {exc.strerror}"
            ) from exc
        self._server.daemon_threads = True
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the endpoints."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> ObservabilityServer:
        """Serve from a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="ordo-observe", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread = None
        self._server.server_close()


__all__ = ["Health", "ObservabilityServer", "ordo_version", "register_build_info"]
