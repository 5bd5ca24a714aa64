"""The HTTP service and the HTTP-backed ``Catalog`` against the SQLite one (real uvicorn on loopback, no broker)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ordo.consumer import Catalog, TableNotFoundError, VersionNotFoundError
from ordo.consumer.errors import CatalogError, CatalogTimeoutError, CatalogUnavailableError, TableBrokenError
from ordo.consumer.http import HttpServer, create_app
from ordo.consumer.materializer import ConsumerStatus
from ordo.consumer.store import CatalogWriter

from .test_catalog import at, build
from .test_catalog_model import Script


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Catalog, Catalog, Script, ConsumerStatus]]:
    script = Script(seed=21).run(60)
    local = build(tmp_path / "c.db", script, Script("u", seed=22, partitioned=False).run(10))
    status = ConsumerStatus()
    server = HttpServer(create_app(Catalog(tmp_path / "c.db"), status, sse_poll_interval=0.02), "127.0.0.1", 0).start()
    remote = Catalog(server.url)
    try:
        yield local, remote, script, status
    finally:
        remote.close()
        server.stop()


def test_remote_catalog_answers_like_the_local_one(served: tuple[Catalog, Catalog, Script, ConsumerStatus]) -> None:
    local, remote, script, _ = served
    assert remote.is_remote and not local.is_remote
    assert remote.tables() == local.tables()
    assert remote.table("t") == local.table("t")
    for version in range(script.model.head + 1):
        assert remote.snapshot("t", version) == local.snapshot("t", version)
    for millis in script.model.times[::7]:
        assert remote.snapshot("t", timestamp=at(millis)) == local.snapshot("t", timestamp=at(millis))
        assert remote.snapshot("t", timestamp=millis) == local.snapshot("t", timestamp=millis)
    groups = [({"dt": p}, b) for p in ("a", "b", "c") for b in (None, 0)]
    for version in range(0, script.model.head + 1, 5):
        assert remote.snapshot("t", version, groups=groups) == local.snapshot("t", version, groups=groups)
    assert remote.history("t") == local.history("t")
    assert remote.history("t", limit=2) == local.history("t", limit=2)
    assert remote.commits("t", 2, 30) == local.commits("t", 2, 30)
    assert remote.commits("t", 0, include_rewrites=True) == local.commits("t", 0, include_rewrites=True)
    low, high = at(script.model.times[3]), at(script.model.times[20])
    assert remote.commits("t", low, high, by="time") == local.commits("t", low, high, by="time")
    assert remote.health()["broken"] == local.health()["broken"] == {}


def test_remote_errors_are_the_local_exceptions(served: tuple[Catalog, Catalog, Script, ConsumerStatus]) -> None:
    local, remote, _, _ = served
    for catalog in (local, remote):
        with pytest.raises(TableNotFoundError, match="table 'nope' is not in the catalog"):
            catalog.table("nope")
        with pytest.raises(VersionNotFoundError, match="version 999 does not exist"):
            catalog.snapshot("t", 999)
        with pytest.raises(VersionNotFoundError, match="before table 't' was created"):
            catalog.snapshot("t", timestamp=at(1))
        with pytest.raises(VersionNotFoundError, match="start version 999"):
            catalog.commits("t", 999)


def test_http_endpoints_status_codes_and_bodies(served: tuple[Catalog, Catalog, Script, ConsumerStatus]) -> None:
    _, remote, script, status = served
    url = remote.location
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    assert httpx.get(f"{url}/readyz").status_code == 503  # the materializer has not caught up yet
    status.ready = True
    assert httpx.get(f"{url}/readyz").json() == {"ready": True}
    missing = httpx.get(f"{url}/tables/nope/snapshot")
    assert missing.status_code == 404 and missing.json()["error"] == "TableNotFoundError"
    assert httpx.get(f"{url}/tables/t/snapshot", params={"version": 999}).status_code == 404
    assert httpx.get(f"{url}/tables/t/commits", params={"by": "id", "start": "x"}).status_code == 400
    assert httpx.get(f"{url}/tables/t/snapshot", params={"timestamp": "not a time"}).status_code == 400
    beyond = str(2**63)  # no version, offset or page size is that large: refused, not an overflow inside
    assert httpx.get(f"{url}/tables/t/history", params={"limit": beyond}).status_code == 422
    assert httpx.get(f"{url}/tables/t/history", params={"cursor": beyond}).status_code == 400
    assert httpx.get(f"{url}/tables/t/commits", params={"start": beyond}).status_code == 400
    assert httpx.get(f"{url}/tables/t/commits", params={"by": "time", "end": beyond}).status_code == 400
    snapshot = httpx.get(f"{url}/tables/t/snapshot", params={"version": 5}).json()
    assert snapshot["id_version"] == 5 and {f["path"] for f in snapshot["files"]} == set(script.model.live(5))
    assert httpx.get(f"{url}/openapi.json").json()["paths"].keys() >= {"/tables/{table}/changes/stream", "/metrics"}
    assert httpx.get(f"{url}/docs").status_code == 200
    metrics = httpx.get(f"{url}/metrics").text
    assert f'ordo_consumer_head_version{{table="t"}} {float(script.model.head)}' in metrics
    assert "ordo_consumer_decisions_applied_total 0.0" in metrics
    assert 'ordo_consumer_table_broken{table="u"} 0.0' in metrics


def _events(response: httpx.Response, count: int) -> list[tuple[str | None, dict[str, object]]]:
    events: list[tuple[str | None, dict[str, object]]] = []
    event_id = None
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            events.append((event_id, json.loads(line[6:])))
            event_id = None
            if len(events) == count:
                break
    return events


def test_sse_stream_resumes_with_last_event_id(tmp_path: Path) -> None:
    script = Script(seed=23).run(80)
    path = tmp_path / "c.db"
    writer = CatalogWriter(path, "ordo")
    writer.apply(script.records[:30])
    server = HttpServer(create_app(Catalog(path), sse_poll_interval=0.02), "127.0.0.1", 0).start()
    url = f"{server.url}/tables/t/changes/stream"
    try:
        with httpx.Client(timeout=10) as client:
            with client.stream("GET", url, params={"from_version": 0, "include_rewrites": "true"}) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                first = _events(response, 5)
            last_id = first[-1][0]
            assert [e[0] for e in first] == [str(v) for v in range(5)]
            feeder = threading.Thread(
                target=lambda: [writer.apply(script.records[i : i + 5]) or time.sleep(0.01) for i in range(30, 80, 5)]
            )
            feeder.start()
            with client.stream(
                "GET", url, params={"include_rewrites": "true"}, headers={"Last-Event-ID": last_id}
            ) as r:
                rest = _events(r, script.model.head - 4)
            feeder.join()
    finally:
        server.stop()
        writer.close()
    versions = [int(e[0]) for e in first + rest]  # type: ignore[arg-type]
    assert versions == list(range(script.model.head + 1))
    assert all(e[1]["id_version"] == int(e[0]) for e in first + rest)  # type: ignore[arg-type]


def test_remote_subscribe_follows_the_stream(served: tuple[Catalog, Catalog, Script, ConsumerStatus]) -> None:
    local, remote, script, _ = served
    got = [c.id_version for c in remote.subscribe("t", 10, idle_timeout=0.5)]
    assert got == script.model.logical(10, script.model.head)
    assert [c for c in remote.subscribe("t", 10, idle_timeout=0.5)] == local.commits("t", 10)


def test_layout_endpoint_answers_like_the_local_function(
    served: tuple[Catalog, Catalog, Script, ConsumerStatus],
) -> None:
    from ordo.services.compactor import table_layout

    local, remote, _, _ = served
    now = time.time()
    assert table_layout(remote, "t", now) == table_layout(local, "t", now)
    response = httpx.get(f"{remote.location}/tables/t/layout")
    assert response.status_code == 200
    body = response.json()
    assert (
        body["files"] == len(local.snapshot("t").files) and sum(body["files_per_partition"].values()) == body["files"]
    )
    assert httpx.get(f"{remote.location}/tables/nope/layout").status_code == 404


@pytest.mark.parametrize(
    ("raised", "status"),
    [
        (TableNotFoundError("no t"), 404),
        (VersionNotFoundError("no v"), 404),
        (CatalogUnavailableError("down"), 503),
        (CatalogTimeoutError("slow"), 500),  # a CatalogError: the nearest class in its MRO
        (TableBrokenError("broken", "why"), 500),
        (CatalogError("odd"), 500),
        (ValueError("bad"), 400),
        (TypeError("worse"), 400),
        (ZeroDivisionError("a bug"), 500),  # still the documented JSON body, not Starlette's text/plain
    ],
)
def test_each_catalog_error_has_its_status(raised: Exception, status: int) -> None:
    class Failing:
        def tables(self) -> None:
            raise raised

    from fastapi.testclient import TestClient

    response = TestClient(create_app(Failing()), raise_server_exceptions=False).get("/tables")  # type: ignore[arg-type]
    assert response.status_code == status
    assert response.json() == {"error": type(raised).__name__, "message": str(raised)}
