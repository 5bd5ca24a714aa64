"""The consumer's read-only HTTP service (FastAPI), run in the consumer process next to the materializer.

Endpoints (JSON unless noted; OpenAPI docs at ``/docs``):

* ``GET /tables``, ``GET /tables/{t}``                      tables, one table (metadata, head, error)
* ``GET /tables/{t}/snapshot?version=&timestamp=&groups=``  live files at a version / as of a time / head
  (``groups``: JSON list of ``{"partition": {...}, "bucket": n}``, only those groups' files)
* ``GET /tables/{t}/layout``                                files per partition, last compaction, pending
  work of the table service (``ordo compactor``)
* ``GET /tables/{t}/history?limit=``                        every decision, newest first
* ``GET /tables/{t}/commits?start=&end=&by=id|time``         accepted commits, bounds inclusive
* ``GET /tables/{t}/changes/stream?from_version=``          Server-Sent Events of commits; ``id:`` is the
  ID version, so a client resumes with ``Last-Event-ID`` (= next is id + 1). The feed's form is the
  commit form: one event per commit with its file actions, not rows (rows: ``format("ordo")`` gives
  Delta's form, ``DeltaTable.changes`` the compact form by default; docs/api.md)
* ``GET /healthz`` liveness (with the tables the consumer stopped applying),
  ``GET /readyz`` 200 once caught up with the log end seen at start-up, else 503
* ``GET /metrics`` Prometheus text: lag per table, counters of decisions applied and refused, gaps, errors,
  stopped tables, ``ordo_build_info`` (the same three paths as the arbiter's and the compactor's,
  ``kernel.observe``)

Unknown tables and versions answer 404 with ``{"error": <exception class>, "message": ...}``.
Binds 127.0.0.1 by default (``ORDO_HTTP_HOST``/``ORDO_HTTP_PORT``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from ordo.consumer.catalog import Catalog
from ordo.consumer.errors import CatalogError, CatalogUnavailableError
from ordo.consumer.groups import groups_from_json
from ordo.consumer.materializer import ConsumerStatus
from ordo.consumer.models import Commit, DecisionRecord, Snapshot, TableInfo
from ordo.kernel.errors import TableNotFoundError, VersionNotFoundError
from ordo.kernel.observe import ordo_version

log = logging.getLogger("ordo.consumer.http")

SSE_PAGE = 200
SSE_RETRY_MS = 1000  # the ``retry:`` the stream announces: clients wait this long before reconnecting, then back off

# The status code of each error the catalog raises (the most specific class in the exception's MRO wins),
# answered as ``{"error": <exception class>, "message": ...}``.
ERROR_STATUS: dict[type[Exception], int] = {
    TableNotFoundError: 404,
    VersionNotFoundError: 404,
    CatalogUnavailableError: 503,
    CatalogError: 500,
    ValueError: 400,
    TypeError: 400,
    Exception: 500,  # anything else is a bug, still answered with the documented JSON body
}


INT64_MAX = 2**63 - 1  # versions, offsets and page sizes are 64-bit in the log and in SQL


def _int64(number: int, what: str) -> int:
    """``number`` if it fits a signed 64-bit integer, else a ValueError (a 400) naming ``what``."""
    if not -INT64_MAX - 1 <= number <= INT64_MAX:
        raise ValueError(f"{what} must fit a signed 64-bit integer, got {number}")
    return number


def parse_bound(value: str | None, by: str) -> int | str | None:
    """A ``start``/``end`` query value: an ID version for ``by=id``; ISO-8601 or epoch ms for ``by=time``."""
    if value is None or value == "":
        return None
    if by == "id":
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"by=id needs integer versions, got {value!r}") from None
        return _int64(number, "an ID version")
    stripped = value.strip()
    if stripped.lstrip("-").isdigit():
        return _int64(int(stripped), "epoch milliseconds")
    return stripped


class ErrorBody(BaseModel):
    """The body of every error answer."""

    error: str = Field(description="the exception class, e.g. TableNotFoundError")
    message: str


class ReadyBody(BaseModel):
    """``/readyz``: 200 when ready, else 503."""

    ready: bool


class HealthBody(BaseModel):
    """``/healthz``: always 200 while the process is alive; ``degraded`` names the stopped tables."""

    process: str = "consumer"
    status: str = Field(description="ok, or degraded when a table is stopped")
    stopped: dict[str, str] = Field(description="stopped table -> reason (the same as broken)")
    broken: dict[str, str]
    tables: dict[str, Any]
    kafka_ok: bool | None = None
    refused_total: int | None = None
    last_error: str | None = None


class TablesBody(BaseModel):
    """Every created table."""

    tables: list[TableInfo]


class HistoryPage(BaseModel):
    """One page of a table's decisions, newest first."""

    decisions: list[DecisionRecord]
    next_cursor: str | None = Field(None, description="pass as cursor for the next (older) page; null: no more")


class CommitsPage(BaseModel):
    """One page of accepted commits, by ID version."""

    commits: list[Commit]
    next_cursor: str | None = Field(None, description="by=id: pass as cursor for the next page; null: no more")


ERRORS = {404: {"model": ErrorBody}, 400: {"model": ErrorBody}, 500: {"model": ErrorBody}, 503: {"model": ErrorBody}}


def openapi_document() -> dict[str, Any]:
    """The HTTP API's OpenAPI document (what ``/openapi.json`` serves; ``docs/openapi.json`` keeps a copy)."""
    return create_app(Catalog("unused.db")).openapi()  # the catalog is never opened


def create_app(
    catalog: Catalog,
    status: ConsumerStatus | None = None,
    *,
    sse_poll_interval: float = 0.2,
    sse_heartbeat: float = 15.0,
) -> FastAPI:
    """The FastAPI application serving ``catalog`` (a local one) and, when given, the materializer ``status``."""
    app = FastAPI(
        title="ordo catalog",
        description="Read-only access to the tables, snapshots, history and change feeds materialized by the "
        "ordo consumer from the Kafka decisions log.",
        version="1",
        responses=ERRORS,  # type: ignore[arg-type]
    )

    async def error(request: Request, exc: Exception) -> JSONResponse:
        status_code = next(ERROR_STATUS[kind] for kind in type(exc).__mro__ if kind in ERROR_STATUS)
        return JSONResponse({"error": type(exc).__name__, "message": str(exc)}, status_code=status_code)

    for kind in ERROR_STATUS:  # Starlette picks the handler of the nearest class in the MRO, as ``error`` does
        app.add_exception_handler(kind, error)

    @app.get("/tables", summary="Every created table", response_model=TablesBody)
    def tables() -> JSONResponse:
        return JSONResponse({"tables": [t.to_dict() for t in catalog.tables()]})

    @app.get(
        "/tables/{table}", summary="One table: metadata, head versions, materialization error", response_model=TableInfo
    )
    def table(table: str) -> JSONResponse:
        return JSONResponse(catalog.table(table).to_dict())

    @app.get("/tables/{table}/layout", summary="Files per partition, last compaction, pending table-service work")
    def layout(table: str) -> JSONResponse:
        from ordo.services.compactor import table_layout

        return JSONResponse(table_layout(catalog, table))

    @app.get(
        "/tables/{table}/snapshot",
        summary="Live files at an ID version, as of a timestamp, or at the head",
        response_model=Snapshot,
    )
    def snapshot(
        table: str,
        version: int | None = Query(None, ge=0, le=INT64_MAX, description="ID version"),
        timestamp: str | None = Query(None, description="ISO-8601 time or epoch milliseconds"),
        groups: str | None = Query(
            None, description='only these groups\' files: [{"partition": {...}, "bucket": n or null}, ...]'
        ),
    ) -> Response:
        ts = parse_bound(timestamp, "time")
        chosen = None if groups is None else groups_from_json(groups)
        snapshot = catalog.snapshot(table, version=version, timestamp=ts, groups=chosen)
        return Response(snapshot.to_json(), media_type="application/json")  # 100k+ files: no dict in between

    @app.get(
        "/tables/{table}/history",
        summary="Every decision (accepted and rejected), newest first; pages with limit and cursor",
        response_model=HistoryPage,
    )
    def history(
        table: str,
        limit: int | None = Query(None, ge=1, le=INT64_MAX, description="page size (default: everything)"),
        accepted_only: bool = Query(False, description="only accepted decisions (DESCRIBE HISTORY)"),
        cursor: str | None = Query(None, description="next_cursor of the previous page"),
    ) -> JSONResponse:
        before = _cursor(cursor)
        found = catalog.history(table, limit, accepted_only=accepted_only, before=before)
        more = limit is not None and len(found) == limit and found[-1].log_offset > 0
        return JSONResponse(
            {"decisions": [d.to_dict() for d in found], "next_cursor": str(found[-1].log_offset) if more else None}
        )

    @app.get(
        "/tables/{table}/commits",
        summary="Accepted commits in [start, end] (both inclusive); by=id pages with limit and cursor",
        response_model=CommitsPage,
    )
    def commits(
        table: str,
        start: str | None = Query(None, description="by=id: ID version (default 0); by=time: timestamp"),
        end: str | None = Query(None, description="inclusive; default: the head"),
        by: str = Query("id", pattern="^(id|time)$"),
        include_rewrites: bool = Query(False, description="also compaction and clustering commits"),
        limit: int | None = Query(None, ge=1, le=INT64_MAX, description="page size (default: the whole range)"),
        cursor: str | None = Query(None, description="by=id: next_cursor of the previous page (instead of start)"),
    ) -> JSONResponse:
        low = parse_bound(start, by)
        if cursor is not None:
            if by != "id":
                raise ValueError("cursor pages commits by=id; by=time, take the first ID version and page by id")
            low = _cursor(cursor)
        if low is None:
            low = 0
        high = parse_bound(end, by)
        found = catalog.commits(table, low, high, by, include_rewrites=include_rewrites, limit=limit)
        next_cursor = None
        if by == "id" and limit is not None and len(found) == limit:  # a full page: more may follow up to the end
            last = catalog.table(table).head_version if not isinstance(high, int) else high
            if found[-1].id_version < last:
                next_cursor = str(found[-1].id_version + 1)
        return JSONResponse({"commits": [c.to_dict() for c in found], "next_cursor": next_cursor})

    @app.get(
        "/tables/{table}/changes/stream",
        summary="Server-Sent Events of accepted commits from a cursor (event id = ID version); "
        "the commit form: file actions per commit, not change rows",
        response_class=StreamingResponse,
    )
    async def stream(
        request: Request,
        table: str,
        from_version: int = Query(0, ge=0, le=INT64_MAX, description="first ID version to send"),
        include_rewrites: bool = Query(False),
        last_event_id: str | None = Header(None, alias="Last-Event-ID"),
    ) -> StreamingResponse:
        cursor = from_version
        if last_event_id is not None and last_event_id.strip():
            try:
                cursor = _int64(int(last_event_id), "Last-Event-ID") + 1
            except ValueError:
                raise ValueError(f"Last-Event-ID must be an ID version, got {last_event_id!r}") from None
        await run_in_threadpool(catalog.table, table)  # 404 before the stream starts

        async def events() -> AsyncIterator[str]:
            position = cursor
            last_sent = time.monotonic()
            yield f"retry: {SSE_RETRY_MS}\n\n"
            while True:
                if await request.is_disconnected():
                    return
                try:
                    info = await run_in_threadpool(catalog.table, table)
                except CatalogError as exc:
                    yield _event("error", {"error": type(exc).__name__, "message": str(exc)})
                    return
                if info.head_version >= position:
                    high = min(info.head_version, position + SSE_PAGE - 1)
                    found = await run_in_threadpool(
                        catalog.commits, table, position, high, "id", include_rewrites=include_rewrites
                    )
                    for commit in found:
                        yield _event("commit", commit.to_dict(), commit.id_version)
                    position = high + 1
                    last_sent = time.monotonic()
                    continue
                if info.error is not None:
                    yield _event("error", {"error": "TableBrokenError", "message": info.error})
                    return
                if time.monotonic() - last_sent >= sse_heartbeat:
                    yield f": keepalive\nretry: {SSE_RETRY_MS}\n\n"  # a retry-only event: clients see the beat
                    last_sent = time.monotonic()
                await asyncio.sleep(sse_poll_interval)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    @app.get("/healthz", summary="Liveness; lists tables the consumer stopped applying", response_model=HealthBody)
    def healthz() -> JSONResponse:
        try:
            health = catalog.health()
        except CatalogUnavailableError:
            health = {"tables": {}, "broken": {}}
        broken = health["broken"]
        body: dict[str, Any] = {
            "process": "consumer",
            "status": "degraded" if broken else "ok",
            "stopped": broken,
            "broken": broken,
            "tables": health["tables"],
        }
        if status is not None:
            body["kafka_ok"] = status.kafka_ok
            body["refused_total"] = status.refused_total
            body["last_error"] = status.last_error
        return JSONResponse(body)

    @app.get(
        "/readyz",
        summary="200 once caught up with the log end seen at start-up, else 503",
        response_model=ReadyBody,
        responses={503: {"model": ReadyBody}},
    )
    def readyz() -> JSONResponse:
        ready = status.ready if status is not None else True
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)

    @app.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        from prometheus_client import CONTENT_TYPE_LATEST

        return PlainTextResponse(render_metrics(catalog, status), media_type=CONTENT_TYPE_LATEST)

    return app


def _cursor(cursor: str | None) -> int | None:
    """A page cursor (an offset or version, as the previous page gave it)."""
    if cursor is None or cursor == "":
        return None
    if not cursor.isdigit():
        raise ValueError(f"cursor must be the next_cursor of a previous page, got {cursor!r}")
    return _int64(int(cursor), "cursor")


def _event(kind: str, data: dict[str, Any], event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def render_metrics(catalog: Catalog, status: ConsumerStatus | None) -> bytes:
    """Prometheus exposition of the consumer's state (computed at scrape time)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    try:
        health = catalog.health()["tables"]
    except CatalogUnavailableError:
        health = {}
    snap = status.snapshot() if status is not None else None

    class _Collector:
        def collect(self) -> Any:
            head = GaugeMetricFamily("ordo_consumer_head_version", "Materialized head ID version", labels=["table"])
            broken = GaugeMetricFamily(
                "ordo_consumer_table_broken", "1 when the consumer stopped applying the table's log", labels=["table"]
            )
            for name, info in health.items():
                head.add_metric([name], info["head_version"])
                broken.add_metric([name], 1 if info["error"] else 0)
            yield head
            yield broken
            yield GaugeMetricFamily("ordo_consumer_tables", "Decisions topics followed", value=len(health))
            yield GaugeMetricFamily(
                "ordo_consumer_tables_stopped",
                "Tables the consumer stopped applying (ordo repair)",
                value=sum(1 for info in health.values() if info["error"]),
            )
            build = GaugeMetricFamily("ordo_build_info", "ordo's version; always 1", labels=["version", "process"])
            build.add_metric([ordo_version(), "consumer"], 1)
            yield build
            if snap is not None:
                lag = GaugeMetricFamily(
                    "ordo_consumer_lag_records",
                    "Records between the applied offset and the decisions log end (incl. transaction markers)",
                    labels=["table"],
                )
                for name, value in snap["lag"].items():
                    lag.add_metric([name], value)
                yield lag
                yield CounterMetricFamily(
                    "ordo_consumer_decisions_applied", "Decision records applied", value=snap["applied_total"]
                )
                yield CounterMetricFamily(
                    "ordo_consumer_decisions_refused",
                    "Decision records refused: no trusted signature vouches for them",
                    value=snap["refused_total"],
                )
                yield CounterMetricFamily(
                    "ordo_consumer_commits_applied", "Accepted commits applied", value=snap["commits_total"]
                )
                yield CounterMetricFamily(
                    "ordo_consumer_batches_applied",
                    "Batches applied (one catalog transaction each)",
                    value=snap["batches_total"],
                )
                yield CounterMetricFamily(
                    "ordo_consumer_errors",
                    "Kafka and discovery errors the consumer loop hit (the last one in /healthz)",
                    value=snap["errors_total"],
                )
                yield GaugeMetricFamily("ordo_consumer_ready", "1 once caught up at start-up", value=int(snap["ready"]))
                gaps = snap.get("gaps") or {}
                yield CounterMetricFamily(
                    "ordo_consumer_log_rereads", "Re-reads of offsets the fetch skipped", value=gaps.get("rereads", 0)
                )
                yield CounterMetricFamily(
                    "ordo_consumer_log_recovered",
                    "Records a re-read found that the fetch had skipped",
                    value=gaps.get("recovered", 0),
                )
                yield CounterMetricFamily(
                    "ordo_consumer_log_unresolved_gaps",
                    "Gaps still unexplained after the re-reads (the table is held back)",
                    value=gaps.get("unresolved", 0),
                )

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())  # type: ignore[arg-type]
    return generate_latest(registry)


class HttpServer:
    """uvicorn serving an app on a background thread; binds at construction so the port is known at once."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on such sockets (else ~40 ms per request)
        self._socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except OSError as exc:
            self._socket.close()
            raise OSError(f"cannot bind the consumer HTTP service to {host}:{port}: {exc.strerror}") from exc
        self._socket.listen(128)
        self.host = host
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the service."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> HttpServer:
        """Serve on a daemon thread."""
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="ordo-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Ask uvicorn to exit and wait for it."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._socket.close()


__all__ = [
    "ErrorBody",
    "HealthBody",
    "HttpServer",
    "ReadyBody",
    "create_app",
    "openapi_document",
    "parse_bound",
    "render_metrics",
]


if __name__ == "__main__":  # python -m ordo.consumer.http > docs/openapi.json
    print(json.dumps(openapi_document(), indent=2, sort_keys=True))
