"""Exposure: the consumer's HTTP API is read-only and listens on loopback unless configured otherwise.

* every route answers GET (and HEAD for the docs) only; POST, PUT, PATCH and
  DELETE get 405 on every path, and the catalog connection behind the API is
  opened query-only;
* the default host is 127.0.0.1 in ``Settings``, in ``load_settings`` without
  environment, and for a real ``ordo consumer`` started with no host option and
  no ``ORDO_HTTP_HOST`` (checked in the kernel's table of listening sockets).

The path rule (files must resolve inside the table location) is fuzzed in
``tests/unit/test_fuzz.py``; Kafka ACLs are documented in docs/reliability.md.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from ordo.consumer import Catalog
from ordo.consumer.http import create_app
from ordo.consumer.store import CatalogWriter
from ordo.services.stack import ProcessGroup, ordo_args
from ordo.settings import Settings, load_settings

from . import figures

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]

WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


@pytest.fixture
def catalog_path(tmp_path: Path) -> str:
    path = str(tmp_path / "catalog.db")
    CatalogWriter(path, "p").close()  # an initialized, empty catalog
    return path


def test_every_http_route_is_read_only(catalog_path: str) -> None:
    from fastapi.routing import APIRoute
    from fastapi.testclient import TestClient

    app = create_app(Catalog(catalog_path))
    paths = []
    for route in app.routes:
        methods = set(getattr(route, "methods", None) or ())
        allowed = {"GET"} if isinstance(route, APIRoute) else {"GET", "HEAD"}
        assert methods and methods <= allowed, (route.path, methods)
        paths.append(re.sub(r"\{[^}]+\}", "t", route.path))
    assert "/tables/t/snapshot" in paths and "/healthz" in paths
    client = TestClient(app)
    for path in paths:
        for method in WRITE_METHODS:
            assert client.request(method, path).status_code == 405, (method, path)
    # The connection the API reads through cannot write either.
    backend = Catalog(catalog_path)._backend
    with pytest.raises(sqlite3.OperationalError):
        backend._conn().execute("DELETE FROM tables")
    figures.add("http_routes_checked_read_only", len(paths))


def test_the_http_service_binds_loopback_by_default(bootstrap_servers: str, catalog_path: str, tmp_path: Path) -> None:
    assert Settings().http_host == "127.0.0.1"
    assert load_settings({}).http_host == "127.0.0.1"
    from ordo.keys import embedded_keys

    env = {
        "ORDO_TRUSTED_KEYS": embedded_keys(Settings(), tmp_path).trusted_keys,
        "ORDO_BOOTSTRAP_SERVERS": bootstrap_servers,
        "ORDO_TOPIC_PREFIX": "p",
        "ORDO_HTTP_HOST": "",  # unset: the default applies
        "ORDO_HTTP_PORT": "",
    }
    with ProcessGroup(log_dir=tmp_path / "logs") as group:
        process = group.start(ordo_args("consumer", "--catalog", catalog_path, "--http-port", "0"), env, name="c")
        url = process.wait_for_line(r"ORDO_CATALOG_URL=(\S+)", timeout=60).group(1)
        host, port = re.fullmatch(r"http://([^:/\[\]]+):(\d+)", url).groups()  # type: ignore[union-attr]
        assert host == "127.0.0.1"
        assert _listening(int(port)) == {"127.0.0.1"}, "the service must listen on loopback only"


def _listening(port: int) -> set[str]:
    """Local addresses with a socket listening on ``port`` (Linux: /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) != port or fields[3] != "0A":  # 0A = LISTEN
                continue
            if len(address) == 8:
                found.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
            else:
                found.add("ipv6:" + address)
    assert Path("/proc/net/tcp").exists(), "needs Linux /proc to read listening sockets"
    return found
